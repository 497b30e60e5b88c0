"""`make grade` end to end, in a temporary copy of the course: the sample submissions, and
beside them the ones that must not stop the class (a worker killed under one, a notebook
that is not JSON, duplicate grade ids, a student's scripts in outputs and markdown), then
graded again; and what a failure is named by."""
import copy
import csv
import io
import os
import shutil
import signal
import threading
import time
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from grade_course import DROP, one_drop_course
from grading_harness import GRADING_FILE, revealed_hidden_tests, run_folder, share_cell_seconds, without_rank_demos

from autograder.apps import grade
from autograder.course import ROOT

pytestmark = pytest.mark.slow

KILLED = "a-killed-worker"   # sorts first: the whole class is its worker's queue
HTML = "html-script"
LARGE = "large-file"   # an extra file of 100 kB beside the notebook
NOT_JSON = "not-json"
TWICE = "twice-the-same-grade-id"
SCRIPTS = ["<script>alert('output')</script>", "<img src=x onerror=\"alert('onerror')\">",
           "<script>alert('markdown')</script>"]


def _kill_whoever_grades(student: str, logs: Path, stop: threading.Event, killed: list) -> None:
    """Kill (SIGKILL) each grading worker as soon as its log says it began `student`."""
    seen = set()
    while not stop.is_set():
        for log in logs.glob("worker-*.log"):
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith(f"-- grading {student}/") and line not in seen:
                    seen.add(line)
                    pid = int(line.rsplit("worker ", 1)[1].rstrip(")"))
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
        time.sleep(0.05)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, worker_id):
    """One class of drop 1, graded once by grade_all (`make grade`), one worker, no sandbox
    (what is tested here is the orchestration; tests/drops/test_grading.py grades in it):

        alice, bob            the sample submissions (make grade-demo)   5 and 3 points
        html-script           alice's (less the cells that only run      5 points; no script
                              ranks to show them), then a cell that displays HTML
                              with a script and an onerror attribute,    in its feedback page
                              JavaScript and a widget view, and a        or autograded notebook
                              markdown cell with a script
        a-killed-worker       alice's, but its worker is killed (twice)  not graded, named; the
                              whenever it grades this one                rest of its queue graded
        large-file            alice's (light), and a 100 kB data file    not graded, named: a
                              beside it                                  submission is its notebook
                                                                         alone (the drop's own data
                                                                         file, as big, in source/,
                                                                         reaches every kernel)
        not-json              a notebook that is not JSON                not graded, named
        twice-the-same-grade-id  a test cell given another's grade id    not graded, named
    """
    course = one_drop_course(tmp_path_factory.mktemp("grade-script") / "course")
    # the model solution's cell times, measured once in the run (the source notebook is the drop's own)
    share_cell_seconds(course, run_folder(tmp_path_factory, worker_id))
    (course / "source" / DROP / "table.bin").write_bytes(os.urandom(100_000))   # data the drop ships
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(grade.run, "SAMPLES", ROOT / "autograder" / "samples")
        mp.setenv("THREEAXES_GRADE_ISOLATE", "0")
        grade.copy_samples(course)
        alice = nbformat.read(course / "submitted" / "alice" / DROP / f"{DROP}.ipynb", as_version=4)

        def submit(student, nb):
            (course / "submitted" / student / DROP).mkdir(parents=True)
            path = course / "submitted" / student / DROP / f"{DROP}.ipynb"
            nbformat.write(nb, path) if not isinstance(nb, str) else path.write_text(nb)

        light = without_rank_demos(alice)   # alice's answers, without the 4-rank launches: cheaper
        submit(KILLED, light)
        html = copy.deepcopy(light)
        # before the last graded cell: the grader runs no cell after it (autograder/plugins/execute.py)
        answer = next(k for k, c in enumerate(html.cells) if c.metadata.get("nbgrader", {}).get("solution"))
        html.cells[answer + 1:answer + 1] = [nbformat.v4.new_code_cell(
            "from IPython.display import HTML, Javascript, display\n"
            f"display(HTML({SCRIPTS[0] + SCRIPTS[1]!r} + '<b>still shown</b>'))\n"
            "display(Javascript(\"alert('javascript')\"))\n"
            "display({'application/vnd.jupyter.widget-view+json': {'model_id': 'x', 'version_major': 2, "
            "'version_minor': 0}, 'text/plain': 'a widget'}, raw=True)")]
        html.cells += [nbformat.v4.new_markdown_cell(f"my notes {SCRIPTS[2]}")]
        submit(HTML, html)
        submit(LARGE, light)
        (course / "submitted" / LARGE / DROP / "data.bin").write_bytes(os.urandom(100_000))
        submit(NOT_JSON, '{"cells": [ this is not JSON')
        twice = copy.deepcopy(alice)
        tests = [c for c in twice.cells if c.metadata.get("nbgrader", {}).get("grade")
                 and c.cell_type == "code"]
        tests[1].metadata["nbgrader"]["grade_id"] = tests[0].metadata["nbgrader"]["grade_id"]
        submit(TWICE, twice)

        stop, killed = threading.Event(), []
        (course / grade.GRADED / grade.LOGS).mkdir(parents=True)
        killer = threading.Thread(target=_kill_whoever_grades,
                                  args=(KILLED, course / grade.GRADED / grade.LOGS, stop, killed), daemon=True)
        killer.start()
        progress, start = io.StringIO(), time.perf_counter()
        try:
            grade.grade_all(course, jobs=1, progress=progress)
            ended = None
        except grade.NotAllGraded as stopped:
            ended = stopped
        finally:
            stop.set()
            killer.join()
        return SimpleNamespace(root=course, ended=ended, killed=killed, progress=progress.getvalue(),
                               seconds=time.perf_counter() - start,
                               rows={r["student_id"]: r for r in csv.DictReader((course / "grades.csv").open())})


def test_grades_csv_gives_each_drops_grade_and_extra_credit_apart(graded):
    """Drop 1's core (its grade) holds 2 points, its optional sections 5 (the course map's
    POINTS, tested against the notebook): the two columns add up to nbgrader's raw score."""
    from threeaxes.course import POINTS

    for student, row in graded.rows.items():
        assert float(row["core_max"]) == POINTS[1][0], student
        assert float(row["core_score"]) + float(row["extra_credit"]) == float(row["raw_score"]), student
    assert float(graded.rows["alice"]["core_score"]) == POINTS[1][0]   # she answered the core's exercise


def test_grade_all_autogrades_writes_feedback_and_exports_csv(graded):
    # alice typed in the solutions (5 auto points) and a written answer still to be marked by hand;
    # bob forgot the fp32 master copy, which costs the 2 points of that one cell.
    assert float(graded.rows["alice"]["raw_score"]) == 5.0
    assert float(graded.rows["bob"]["raw_score"]) == 3.0
    source = nbformat.read(graded.root / "source" / DROP / f"{DROP}.ipynb", as_version=4)
    for student in ("alice", "bob"):
        page = (graded.root / "feedback" / student / DROP / f"{DROP}.html").read_text()
        assert "BEGIN HIDDEN TESTS" not in page
        assert not revealed_hidden_tests(page, source), "the feedback shows a hidden test"
    assert not list((graded.root / "feedback").rglob(GRADING_FILE)), "the grading data reached the students"
    alice = (graded.root / "feedback" / "alice" / DROP / f"{DROP}.html").read_text()
    assert "waiting for your instructor" in alice and "Written response (Score" not in alice
    # the steps after autograding say what they are and how long they took
    for step in ("the feedback pages of 1 drop(s) for the whole class", "grades.csv"):
        assert f"then {step}...\n" in graded.progress and f"  {step}: done in " in graded.progress, step


def test_a_killed_worker_is_replaced_its_queue_graded_and_its_submission_named(graded):
    """The worker dies twice under the same submission: it is named, with the signal, and
    everything queued behind it is graded by the worker that replaced it."""
    assert len(graded.killed) == 2, graded.killed   # tried once more, then given up
    said = str(graded.ended)
    assert f"{KILLED}/{DROP}: the grading worker died while grading it (killed by SIGKILL)" in said
    for student in ("alice", "bob", HTML):
        assert (graded.root / "autograded" / student / DROP / f"{DROP}.ipynb").is_file(), student
        assert student in graded.rows
    assert not (graded.root / "feedback" / KILLED / DROP).exists()
    assert (graded.root / grade.GRADED / grade.LOGS / f"{KILLED}+{DROP}.log").is_file()


def test_an_ungradeable_notebook_is_named_with_its_cause_and_the_others_get_feedback_and_a_row(graded):
    said = str(graded.ended)
    assert said.startswith("NOT GRADED")
    assert f"{NOT_JSON}/{DROP}: " in said and "NotJSONError" in said, said
    assert f"{TWICE}/{DROP}: Cell with id 'training_bytes_match_adam_accounting' exists multiple times" in said
    assert "Please see the" not in said.split(f"{NOT_JSON}/{DROP}: ", 1)[1].splitlines()[0]
    for student in (NOT_JSON, TWICE):
        log = graded.root / grade.GRADED / grade.LOGS / f"{student}+{DROP}.log"
        assert f"(all of it: {log.relative_to(graded.root)})" in said
        assert "Traceback" in log.read_text()
        assert not (graded.root / "feedback" / student / DROP).exists()
        assert not (graded.root / grade.GRADED / student / DROP).exists(), "noted as graded"
    for student in ("alice", "bob", HTML):
        assert (graded.root / "feedback" / student / DROP / f"{DROP}.html").is_file(), student
    assert float(graded.rows[HTML]["raw_score"]) == 5.0


class _Live(HTMLParser):
    """What a browser would run in a page: script elements and on* attributes."""

    def __init__(self):
        super().__init__()
        self.found, self._in_script = [], False

    def handle_starttag(self, tag, attrs):
        self._in_script = tag == "script"
        self.found += [f"{tag} {name}" for name, _ in attrs if name.startswith("on")]

    def handle_data(self, data):
        if self._in_script and "alert(" in data:
            self.found.append(f"script {data.strip()[:60]}")

    def handle_endtag(self, tag):
        self._in_script = False


def test_a_file_beside_the_notebook_is_refused_named_and_stops_no_one(graded):
    """A submission is its notebook alone: the data file beside it is named, nothing of it is
    run or copied. The drop's own 100 kB file in source/ goes to every kernel host (on its
    input: a command line holds no more than about 128 kB) and alice still scores 5."""
    said = str(graded.ended)
    assert (f"{LARGE}/{DROP}: a submission is the notebook alone, as a regular file, and this one holds "
            "more: data.bin is a file other than the notebook") in said, said
    assert not (graded.root / "autograded" / LARGE).exists()
    assert not graded.rows.get(LARGE, {}).get("timestamp"), graded.rows.get(LARGE)   # no submission graded
    assert float(graded.rows["alice"]["raw_score"]) == 5.0


def test_the_kernel_host_gets_the_drops_own_files_and_nothing_a_submission_holds(tmp_path):
    """A hashlib.py handed in beside the notebook once ran in the kernel host, before the guard."""
    from autograder.plugins.execute import _assignment_files

    source = tmp_path / "source" / DROP
    source.mkdir(parents=True)
    (source / f"{DROP}.ipynb").write_text("{}")
    (source / "grading.json").write_text("{}")
    (source / "table.csv").write_text("a,b\n1,2\n")
    (source / "link.py").symlink_to(source / "table.csv")
    (source / "folder").mkdir()
    submitted = tmp_path / "submitted" / "mallory" / DROP
    submitted.mkdir(parents=True)
    (submitted / "hashlib.py").write_text("print('ran')\n")
    assert _assignment_files(tmp_path, DROP) == {"table.csv": b"a,b\n1,2\n"}
    assert _assignment_files(tmp_path, "../submitted/mallory/" + DROP) == {}


def test_student_html_and_javascript_are_made_inert(graded):
    """In the feedback page and in the autograded notebook the formgrader shows, the
    student's script elements, event handlers, JavaScript and widget views are gone
    (the code that displayed them is shown as code, escaped); harmless markup stays."""
    page = (graded.root / "feedback" / HTML / DROP / f"{DROP}.html").read_text()
    live = _Live()
    live.feed(page)
    assert live.found == []
    assert "<b>still shown</b>" in page
    nb = nbformat.read(graded.root / "autograded" / HTML / DROP / f"{DROP}.ipynb", as_version=4)
    shown = [str(o.get("data", "")) for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    shown += [c.source for c in nb.cells if c.cell_type == "markdown"]
    for text in shown:
        for script in ["<script", "onerror", "alert('javascript')", "widget-view+json"]:
            assert script not in text, text
    assert any("<b>still shown</b>" in text for text in shown)


def test_grading_again_after_autograded_and_feedback_were_deleted_regrades_what_is_missing(graded):
    """(Last: it changes the class.) The ungradeable submissions are withdrawn; html-script's
    autograded notebook and every feedback page are deleted by hand."""
    root = graded.root
    for student in (KILLED, LARGE, NOT_JSON, TWICE):
        shutil.rmtree(root / "submitted" / student)
    shutil.rmtree(root / "autograded" / HTML)
    shutil.rmtree(root / "feedback")
    progress = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("THREEAXES_GRADE_ISOLATE", "0")
        assert grade.grade_all(root, jobs=1, progress=progress) == [DROP]
    assert "2 of 3 submissions already graded" in progress.getvalue()
    assert f"({HTML}/" in progress.getvalue() and "(bob/" not in progress.getvalue()
    for student in ("alice", "bob", HTML):
        assert (root / "feedback" / student / DROP / f"{DROP}.html").is_file(), student
    rows = {r["student_id"]: r for r in csv.DictReader((root / "grades.csv").open())}
    assert float(rows[HTML]["raw_score"]) == 5.0 and float(rows["bob"]["raw_score"]) == 3.0
    # started again, it grades only what is new: nothing; then bob's resubmission, and a
    # submission whose note a stopped run never wrote
    todo = grade.submissions(root)
    assert grade.pending(root, todo) == []
    bob = root / "submitted" / "bob" / DROP / f"{DROP}.ipynb"
    bob.write_text(bob.read_text() + "\n")      # submitted again
    (root / grade.GRADED / "alice" / DROP).unlink()
    assert grade.pending(root, todo) == [(DROP, "alice"), (DROP, "bob")]


def test_a_feedback_page_nbgrader_cannot_write_names_its_student(tmp_path):
    said = ("[GenerateFeedbackApp | ERROR] There was an error processing assignment: "
            f"{tmp_path}/autograded/zoe/{DROP}\n"
            "[GenerateFeedbackApp | ERROR] Traceback (most recent call last):\n"
            "      File \"x.py\", line 1, in f\n"
            "    KeyError: 'text/plain'\n"
            "[GenerateFeedbackApp | ERROR] There was an error processing assignment 'd' for student 'zoe'\n"
            "[GenerateFeedbackApp | ERROR] Please see the the above traceback for details\n")
    problems = grade.feedback_failures(tmp_path, DROP, said)
    assert problems == [f"zoe/{DROP}: no feedback page: KeyError: 'text/plain' "
                        f"(all of it: {grade.GRADED}/{grade.LOGS}/feedback+{DROP}.log)"]
    assert (tmp_path / grade.GRADED / grade.LOGS / f"feedback+{DROP}.log").read_text() == said


def test_a_failure_names_the_real_cause_not_nbgraders_see_above():
    log = ("[AutogradeApp | ERROR] There was an error processing assignment: /c/submitted/x/d\n"
           "[AutogradeApp | ERROR] Traceback (most recent call last):\n"
           "Traceback (most recent call last):\n  File \"a.py\", line 1, in f\n"
           "RuntimeError: no kernel could be started for this submission: host said no\n"
           "[AutogradeApp | ERROR] Please see the the above traceback for details\n"
           "Traceback (most recent call last):\n  File \"b.py\", line 2\n"
           "nbgrader.utils.NbGraderException: Please see the the above traceback for details\n")
    assert grade.cause(log) == "RuntimeError: no kernel could be started for this submission: host said no"


def test_grade_all_says_what_to_do_when_nothing_was_submitted(tmp_path):
    (tmp_path / "submitted").mkdir()
    with pytest.raises(SystemExit, match="make grade-demo"):
        grade.grade_all(tmp_path)
