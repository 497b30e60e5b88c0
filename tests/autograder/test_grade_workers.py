"""`make grade`'s workers (autograder/apps/grade/pool.py): each keeps to one drop, the
students are in the gradebook before any grades, progress says the rate and the time left,
workers that cannot start stop the run with the reason, their kernels do not prestart the
forkserver, and a grader stopped by SIGTERM stops its workers too."""
import os
import shutil
import signal
import time

import pytest
from grade_course import one_drop_course
from grading_harness import run_folder, share_cell_seconds

from autograder.apps import grade
from autograder.apps.grade.pool import HELP_AT_LEAST
from autograder.course import ROOT

pytestmark = pytest.mark.slow


def test_workers_that_cannot_start_stop_the_run_with_the_reason_not_a_retry_each(tmp_path, monkeypatch):
    """A worker that dies before it takes its submission is not the submission's doing: it
    is started once more, and when that one dies starting too, every submission left is
    named with why (here: a course without nbgrader_config.py), without a worker each."""
    monkeypatch.setattr(grade.pool, "add_students", lambda root, students: None)
    todo = [("d", "s1"), ("d", "s2"), ("d", "s3")]
    for assignment, student in todo:   # a notebook each: nothing refuses them before a worker
        (tmp_path / "submitted" / student / assignment).mkdir(parents=True)
        (tmp_path / "submitted" / student / assignment / f"{assignment}.ipynb").write_text("{}")
    out = grade.grade_submissions(tmp_path, todo, 1, progress=None)
    assert sorted(out.failed) == todo
    for message in out.failed.values():
        assert "no grading worker could start (exit status 1)" in message, message
        assert "nbgrader_config.py" in message, message
    log = (tmp_path / grade.GRADED / grade.LOGS / "worker-1.log").read_text()
    assert log.count("-- the worker died") == 1   # two workers started in all


def test_progress_says_the_count_the_rate_and_the_time_left():
    import io

    out = io.StringIO()
    grade.pool.show_progress(out, 10, 40, 120.0, ("drop01", "alice"))
    line = out.getvalue()
    # 10 in 2 minutes: 5.0 a minute; 30 left at that rate take 6 minutes
    assert "10/40 done, 5.0/min, 6:00 of autograding left (alice/drop01)" in line
    grade.pool.show_progress(out, 11, 40, 120.0, ("drop01", "bob"), ok=False)
    assert out.getvalue().endswith("(bob/drop01: not graded)\n")


def test_grading_kernels_do_not_prestart_the_forkserver(tmp_path, monkeypatch):
    """Cells run back to back when grading: an early forkserver gains nothing there, and
    costs CPU in the drops that never launch ranks."""
    import subprocess

    seen = {}
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: seen.update(kw["env"]))
    grade.nbgrader(tmp_path, "autograde", "*")
    assert seen["THREEAXES_PRESTART"] == "0"


def _hand_out(todo, workers: int) -> list:
    """[(worker, item)]: `workers` take from one ByDrop in rounds, as the grading threads do;
    a worker that once gets None is done."""
    queue, holding, taken = grade.ByDrop(todo), [None] * workers, []
    done = [False] * workers
    while not all(done):
        for w in range(workers):
            if not done[w]:
                item = queue.take(holding[w])
                done[w], holding[w] = item is None, item[0] if item else None
                taken += [(w, item)] if item else []
    assert sorted(item for _, item in taken) == sorted(todo)   # every submission handed out once
    return taken


def test_workers_keep_to_one_drop_and_share_only_the_last():
    """Each drop's opening cells run in a worker's kernel host (autograder/judging/warm_start.py):
    three workers over four drops each take whole drops, in order, and join one only
    when every drop left is held, and it has submissions enough to pay for their opening."""
    sizes = {"d1": 4, "d2": 4, "d3": 4, "d4": 16}
    taken = _hand_out([(d, f"s{k}") for d, n in sizes.items() for k in range(n)], 3)
    workers_of = {d: {w for w, (drop, _) in taken if drop == d} for d in sizes}
    assert [sorted(workers_of[d]) for d in ("d1", "d2", "d3")] == [[0], [1], [2]]   # the first drops first
    assert len(workers_of["d4"]) >= 2   # the last drop is shared once the others are done


def test_a_worker_does_not_open_a_drop_for_its_last_few_submissions():
    """Joining a drop costs its opening: with fewer than HELP_AT_LEAST submissions left for each
    holder, a worker whose own drop is done ends instead; its holder grades the rest."""
    todo = [("d1", f"s{k}") for k in range(2 * HELP_AT_LEAST)] + [("d2", "s0")]
    taken = _hand_out(todo, 2)
    assert {w for w, (drop, _) in taken if drop == "d1"} == {0}
    assert [item for w, item in taken if w == 1] == [("d2", "s0")]


def test_students_are_in_the_gradebook_before_any_worker_grades(tmp_path):
    """Two workers that start on two drops begin with the same student; were each to add
    that student to the gradebook itself, one would fail (the first run of a class of 40
    lost s01/drop01 that way). The roster's details stay as they were."""
    from nbgrader.api import Gradebook

    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    url = f"sqlite:///{tmp_path}/gradebook.db"
    grade.add_students(tmp_path, [])   # makes the gradebook (nbgrader runs `alembic` from this environment)
    with Gradebook(url) as gb:
        gb.add_student("ada", first_name="Ada")
    grade.add_students(tmp_path, ["bo", "ada", "bo"])
    grade.add_students(tmp_path, ["bo"])   # again: nothing changes
    with Gradebook(url) as gb:
        assert sorted(s.id for s in gb.students) == ["ada", "bo"]
        assert gb.find_student("ada").first_name == "Ada"


def test_a_terminated_grader_stops_its_workers_and_leaves_no_process(tmp_path, tmp_path_factory, worker_id):
    """SIGTERM (a timeout, a CI runner giving up) ends `make grade` as Ctrl-C does: the
    workers, each in a session of its own that the signal does not reach, are stopped too."""
    import subprocess
    import sys

    course = one_drop_course(tmp_path / "course")
    # the model solution's cell times as the run measured them (or measured here, once for all)
    share_cell_seconds(course, run_folder(tmp_path_factory, worker_id))
    grade.copy_samples(course)
    env = {**os.environ, "THREEAXES_GRADE_ISOLATE": "0", "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen([sys.executable, "-c", "import sys; from autograder.apps import grade; "
                            "grade.grade_all(sys.argv[1], jobs=1)", str(course)], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    logs = course / grade.GRADED / grade.LOGS
    # the event, not a time: a worker has begun a submission (or the grader ended without one)
    while not any("-- grading " in log.read_text(errors="replace") for log in logs.glob("worker-*.log")):
        assert run.poll() is None, f"the grader ended before any worker began to grade: {run.stderr.read()[-2000:]}"
        time.sleep(0.2)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate()
    assert "stopped: " in err, err[-2000:]
    time.sleep(1)
    left = subprocess.run(["pgrep", "-f", str(course)], capture_output=True, text=True).stdout.split()
    assert not left, f"processes of the grading left behind: {left}"
