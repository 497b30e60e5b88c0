"""The second red team's attacks on what a submission carries beside its notebook and on the
oracle (issue 43, parts 1 and 2), graded together through `make grade`'s own path (grade_all,
its workers, nbgrader, the sandboxed kernels with the drop's functions withheld), once, with a
blank and an honest submission beside them:

    a-blank                 the release as handed out                    the blank's score
    b-floods-the-oracle     1,500 half-sent requests, then 200 whole     the blank's score
                            ones left waiting behind them when its
                            kernel ends
    c-honest                the instructor's notebook, graded right      full marks
                            after b, by the same worker and host
    d-reads-files           visible.load(...) on paths to a root-only    the blank's score, nothing
                            secret and to the drop's grading.json         read into any page
    e-endless-line          its kernel writes 64 MiB on its reply pipe   the blank's score, named
    links, files, folders   a hashlib.py beside the notebook, the        refused before anything
                            notebook a link to the source or to c's,     runs or is copied, each
                            a folder, a pipe, a device (made as root)    named with its cause

The attacks (b, d, e) are the blank less its demo cells that launch ranks: they score nothing.
What stops each now: tests/autograder/test_oracle_per_kernel.py tries the parts one at a time.
"""
from __future__ import annotations

import copy
import io
import os
import re
import shutil
import stat
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from grading_harness import revealed_hidden_tests, run_folder, share_cell_seconds, without_rank_demos

from autograder.apps import grade

ROOT = Path(__file__).resolve().parents[2]
DROP = "drop01-three-kinds-of-parallel"
NB = f"{DROP}.ipynb"
SECRET = "secret-mark-0b7e41"
pytestmark = pytest.mark.slow
AS_ROOT = os.geteuid() == 0   # a device can be made (mknod) only by root; the rest holds for any user

FLOODS = '''
import json, os, socket, threading, time
import threeaxes.cost as c
where = os.environ.get("THREEAXES_ORACLE", "")
half = json.dumps({"path": "threeaxes.cost.memory:bytes_per_param", "args": {"__tuple__": ["mixed"]},
                   "kwargs": {"__dict__": []}}).encode()[:30]
held = []
for _ in range(1500):        # half-sent requests first: they hold whatever a connection is given
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(0.05)
        s.connect(where)
        s.sendall(half)
        held.append(s)
    except OSError:
        pass
def ask(f, *args):
    try:
        f(*args)
    except Exception:
        pass
for _ in range(100):         # then whole requests, left waiting behind them when the kernel ends
    threading.Thread(target=ask, args=(c.bytes_per_param, "mixed"), daemon=True).start()
    threading.Thread(target=ask, args=(c.model_state_bytes, 10 ** 9), daemon=True).start()
time.sleep(1)
'''

READS_FILES = '''
from threeaxes.grading import visible
import threading, time
read = {}
def keep_trying():
    while True:
        for name in NAMES:
            try:
                read[name] = visible.load(name)
            except Exception as exc:
                read[name] = f"{type(exc).__name__}: {exc}"
        time.sleep(0.05)
threading.Thread(target=keep_trying, daemon=True).start()
time.sleep(0.5)
print(read)
'''

ENDLESS_LINE = '''
import fcntl, os, stat
block = b"x" * (1 << 20)
for fd in range(3, 64):
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & 3 == 1:
            for _ in range(64):
                os.write(fd, block)
    except OSError:
        pass
'''


def _with_first_cell(nb, code: str):
    nb = copy.deepcopy(nb)
    nb.cells.insert(1, nbformat.v4.new_code_cell(code))
    return nb


def _watch_workers(logs: Path, stop: threading.Event, seen: dict) -> None:
    """The most threads and the peak memory of each grading worker, from /proc, while it grades."""
    while not stop.is_set():
        for log in logs.glob("worker-*.log"):
            for pid in set(re.findall(r"\(worker (\d+)\)", log.read_text(errors="replace"))):
                try:
                    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
                    threads, peak = int(status["Threads"]), int(status["VmHWM"].split()[0]) << 10
                except (OSError, KeyError, ValueError):     # gone, or a zombie about to be
                    continue
                old = seen.get(pid, (0, 0))
                seen[pid] = (max(old[0], threads), max(old[1], peak))
        time.sleep(0.1)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, worker_id):
    course = tmp_path_factory.mktemp("attacks-beside") / "course"
    shutil.copytree(ROOT / "source" / DROP, course / "source" / DROP)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    # the model solution's cell times, measured once in the run (the source notebook is the drop's own)
    share_cell_seconds(course, run_folder(tmp_path_factory, worker_id))
    secret = course / "secret.json"
    secret.write_text(f'{{"token": "{SECRET}"}}')
    secret.chmod(0o600)
    blank = nbformat.read(ROOT / "release" / DROP / NB, as_version=4)
    source = nbformat.read(course / "source" / DROP / NB, as_version=4)
    climb = "../" * 16
    names = [climb + str(secret.with_suffix("")).lstrip("/"),
             climb + str(course / "source" / DROP / "grading").lstrip("/")]

    def submit(student, nb=None) -> Path:
        folder = course / "submitted" / student / DROP
        folder.mkdir(parents=True)
        if nb is not None:
            nbformat.write(nb, folder / NB)
        return folder

    submit("a-blank", blank)
    # the attacks without the blank's 4-rank launches, which score nothing and no test here reads
    bare = without_rank_demos(blank)
    submit("b-floods-the-oracle", _with_first_cell(bare, FLOODS))
    honest = submit("c-honest", source)
    submit("d-reads-files", _with_first_cell(bare, f"NAMES = {names!r}\n" + READS_FILES))
    submit("e-endless-line", _with_first_cell(bare, ENDLESS_LINE))
    refused = {"hashlib-beside": "hashlib.py is a file other than the notebook",
               "links-to-the-source": f"{NB} is a link",
               "links-to-a-classmate": f"{NB} is a link",
               "holds-a-folder": "extra is a folder",
               "holds-a-pipe": "pipe is a pipe"}
    (submit("hashlib-beside", blank) / "hashlib.py").write_text("import os\nprint('ran in the grader')\n")
    (submit("links-to-the-source") / NB).symlink_to(course / "source" / DROP / NB)
    (submit("links-to-a-classmate") / NB).symlink_to(honest / NB)
    (submit("holds-a-folder", blank) / "extra").mkdir()
    os.mkfifo(submit("holds-a-pipe", blank) / "pipe")
    if AS_ROOT:
        refused["holds-a-device"] = "null is a device"
        os.mknod(submit("holds-a-device", blank) / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))

    logs = course / grade.GRADED / grade.LOGS
    logs.mkdir(parents=True)
    stop, seen = threading.Event(), {}
    watcher = threading.Thread(target=_watch_workers, args=(logs, stop, seen), daemon=True)
    watcher.start()
    start = time.perf_counter()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("THREEAXES_GRADE_ISOLATE", "1")
            grade.grade_all(course, jobs=1, progress=io.StringIO())
        ended = None
    except grade.NotAllGraded as stopped:
        ended = str(stopped)
    finally:
        stop.set()
        watcher.join()
    return SimpleNamespace(root=course, ended=ended or "", refused=refused, workers=seen, source=source,
                           seconds=time.perf_counter() - start)


def _scores(course: Path, student: str) -> dict:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(DROP, DROP, student)
        return {g.name: float(g.score) for g in nb.grades if g.cell.cell_type == "code"}


def _outputs(course: Path, student: str) -> str:
    nb = nbformat.read(course / "autograded" / student / DROP / NB, as_version=4)
    return "\n".join(str(o) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_each_attack_scores_what_the_blank_scores(graded):
    blank = _scores(graded.root, "a-blank")
    for student in ("b-floods-the-oracle", "d-reads-files", "e-endless-line"):
        assert _scores(graded.root, student) == blank, student


def test_the_honest_neighbour_graded_right_after_the_flood_keeps_full_marks(graded):
    from grading_harness import autograded_ids

    assert _scores(graded.root, "c-honest") == autograded_ids(graded.source)
    assert "BorrowedAnswer" not in _outputs(graded.root, "c-honest")


def test_an_endless_line_ends_the_kernel_and_says_why(graded):
    assert "a reply of over 48 MiB: it was stopped" in _outputs(graded.root, "e-endless-line")


def test_what_is_beside_or_instead_of_the_notebook_is_refused_unrun_and_named(graded):
    for student, cause in graded.refused.items():
        line = next((ln for ln in graded.ended.splitlines() if ln.startswith(f"{student}/{DROP}: ")), "")
        assert cause in line and "a submission is the notebook alone" in line, (student, graded.ended)
        for folder in ("autograded", "feedback"):
            assert not (graded.root / folder / student).exists(), (folder, student)
    # graded, each of the others, with a page
    for student in ("a-blank", "b-floods-the-oracle", "c-honest", "d-reads-files", "e-endless-line"):
        assert (graded.root / "feedback" / student / DROP / f"{DROP}.html").is_file(), student


def test_nothing_secret_reaches_any_page(graded):
    for path in [*(graded.root / "feedback").rglob("*.html"), *(graded.root / "autograded").rglob("*.ipynb")]:
        text = path.read_text()
        assert SECRET not in text, path
        # grading.json's mistakes, as a dict read by the kernel would print (or escape) them
        assert not re.search(r"""(&#x27;|&#39;|'|\\?")loses(&#x27;|&#39;|'|\\?"):""", text), path
        if path.suffix == ".html":
            assert not revealed_hidden_tests(text, graded.source), path
    assert "not a drop's name" in _outputs(graded.root, "d-reads-files") or \
        "PermissionError" in _outputs(graded.root, "d-reads-files")


def test_the_workers_threads_and_memory_stay_bounded(graded):
    """1,500 idle connections once made 1,504 threads in the worker; a 1 GiB line from a host
    grew it from 0.4 to 2.9 GB."""
    assert graded.workers, "no grading worker was seen"
    print(f"grading workers (pid: most threads, peak memory in MiB): "
          f"{ {pid: (t, p >> 20) for pid, (t, p) in graded.workers.items()} }, graded in {graded.seconds:.0f} s")
    for pid, (threads, peak) in graded.workers.items():
        assert threads < 64, (pid, threads)
        assert peak < 1536 << 20, (pid, peak >> 20)
