"""The grading workers: JOBS processes (autograder/apps/grade_worker.py), each fed one
submission at a time, drop by drop; a worker that dies is replaced."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import BinaryIO, NoReturn, TextIO

from autograder.apps.grade.failures import WorkerAnswer, failure, since, tail
from autograder.apps.grade.nbgrader_cli import add_students, nbgrader_env
from autograder.apps.grade.notes import GRADED, LOGS, note_path, refused, submission_digest

MAX_ANSWER_CHARS = 1 << 20   # one answer line of a grading worker (grade_worker.KEEP bounds its text)

Item = tuple[str, str]   # (assignment, student)
Worker = subprocess.Popen[str]


@dataclass
class Autograded:
    seconds: dict[Item, float] = field(default_factory=dict)   # seconds, graded or not
    failed: dict[Item, str] = field(default_factory=dict)       # why, with the log it names
    phases: dict[Item, dict[str, float]] = field(default_factory=dict)   # {phase: seconds} (autograder/phases.py)

    def failure_report(self) -> str:
        return "could not grade:\n" + "\n".join(self.failed[k] for k in sorted(self.failed))


def grade_submissions(course_root: Path, todo: list[Item], jobs: int, *extra: str,
                      progress: TextIO | None = sys.stderr) -> Autograded:
    """nbgrader's autograde for each (assignment, student), by `jobs` worker processes
    at once (autograder/apps/grade_worker.py; each submission in its own sandboxed kernel,
    all sharing the gradebook, whose db_url waits for its lock). `extra`: nbgrader
    settings such as "--Execute.timeout=30". Notes each submission graded (`pending`
    then leaves it out).

    A submission nbgrader cannot grade is named in `failed` with its cause: the last
    lines of what nbgrader and the worker logged, the whole of it in a log file under
    .graded/.logs/ that the message names; the others are graded all the same. A worker
    that dies (killed, os.abort, out of memory) is replaced and the queue goes on; the
    submission it was grading is graded once more by the new worker and, if that one
    dies too, named as not graded. Each worker's own log: .graded/.logs/worker-N.log.
    Ctrl-C raises SystemExit saying how far the run got."""
    course_root = Path(course_root)
    add_students(course_root, [student for _, student in todo])
    logs = course_root / GRADED / LOGS
    logs.mkdir(parents=True, exist_ok=True)
    out = Autograded()
    for assignment, student in todo:   # a submission that is not its notebook alone: named, never run
        why = refused(course_root, assignment, student)
        if why:
            out.failed[assignment, student] = f"{student}/{assignment}: {why}"
            out.seconds[assignment, student] = 0.0
    queue = ByDrop([item for item in todo if item not in out.failed])
    lock, start, stopping = threading.Lock(), time.perf_counter(), threading.Event()
    workers: list[Worker] = []
    broken: list[str] = []   # why no worker can start, once two in a row died starting

    def start_worker(log: BinaryIO) -> Worker:
        env = {**nbgrader_env(), "THREEAXES_WORKER_STARTED": repr(time.time())}   # grade_worker.STARTED_AT
        worker = subprocess.Popen([sys.executable, "-m", "autograder.apps.grade_worker", str(course_root), *extra],
                                  cwd=course_root, env=env, text=True, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        with lock:
            workers.append(worker)
        return worker

    def end(worker: Worker) -> None:
        try:
            if worker.stdin is not None:   # (always: started with a pipe)
                worker.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            _kill(worker)

    def work(number: int) -> None:
        log_path = logs / f"worker-{number}.log"
        with open(log_path, "ab") as log:
            item = queue.take(None)
            if item is None:   # none it should open a drop for (ByDrop.take): no worker started
                return
            log.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')}: worker {number} starts\n".encode())
            log.flush()
            worker, unstarted = start_worker(log), 0
            retried: set[Item] = set()
            try:
                while item is not None:
                    began = time.perf_counter()
                    while True:
                        digest, mark = submission_digest(course_root, *item), log_path.stat().st_size
                        result: WorkerAnswer | None = None if broken else _ask(worker, item)
                        if broken:
                            result = {"success": False, "died": True, "error": broken[0]}
                        if result is not None or stopping.is_set():
                            break
                        died = _death(worker)
                        _kill(worker)
                        said = since(log_path, mark)
                        if f"-- grading {item[1]}/{item[0]} (" not in said:
                            # it died before it took the submission: the worker's trouble, not the student's
                            unstarted += 1
                            if unstarted >= 2:   # twice running: no worker can grade here; say why, stop
                                broken.append(f"no grading worker could start ({died}); the last lines of "
                                              f"its log: " + " | ".join(tail(said, 5)))
                                continue
                        elif item in retried:
                            result = {"success": False, "died": True,
                                      "error": f"the grading worker died while grading it ({died}), "
                                               f"in two workers one after the other; not tried again"}
                            worker = start_worker(log)
                            break
                        else:
                            retried.add(item)
                        log.write(f"-- the worker died ({died}) by {item[1]}/{item[0]}: "
                                  f"a new worker takes it\n".encode())
                        log.flush()
                        worker = start_worker(log)   # for this submission once more and the rest of the queue
                    if result is None:   # stopped (Ctrl-C)
                        return
                    if result["success"]:
                        unstarted = 0
                    with lock:
                        out.seconds[item] = time.perf_counter() - began
                        out.phases[item] = phases_of(result, out.seconds[item])
                        if result["success"]:
                            note = note_path(course_root, *item)
                            note.parent.mkdir(parents=True, exist_ok=True)
                            note.write_text(digest)
                        elif result.get("refused"):   # changed since the check above (grade_worker.py)
                            out.failed[item] = f"{item[1]}/{item[0]}: {result['refused']}"
                        else:
                            out.failed[item] = failure(course_root, item, result, log_path, mark)
                        show_progress(progress, len(out.seconds), len(todo), time.perf_counter() - start, item,
                                  ok=result["success"])
                    item = queue.take(item[0])
            finally:
                end(worker)

    left = len(todo) - len(out.failed)
    threads = [threading.Thread(target=work, args=(k + 1,), daemon=True)
               for k in range(max(1, min(jobs, left)) if left else 0)]
    for t in threads:
        t.start()
    restore = _sigterm_as_interrupt()   # killed by a timeout or a CI runner: stop the workers as Ctrl-C does
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        stopping.set()
        _stop(queue, workers)
        done = len(out.seconds) - len(out.failed)
        raise SystemExit(f"stopped: {done} of {len(todo)} graded and kept; run it again to grade the rest"
                         + "".join(f"\n  not graded: {s}/{a}" for a, s in sorted(out.failed))) from None
    finally:
        restore()
    return out


def _sigterm_as_interrupt() -> Callable[[], object]:
    """Until the returned function is called, SIGTERM raises KeyboardInterrupt in the main
    thread, so that the workers (each in a session of its own, which the signal does not
    reach) are stopped rather than left running. Elsewhere than the main thread: nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: FrameType | None) -> NoReturn:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)


def phases_of(result: WorkerAnswer, seconds: float) -> dict[str, float]:
    """The worker's seconds per phase for one submission, and the rest of `seconds` (from
    handing it over to its answer) as the grader's side."""
    said = result.get("phases")
    if not isinstance(said, dict):
        said = {}
    spent = {str(k): float(v) for k, v in said.items() if isinstance(v, (int, float))}
    spent["grader side"] = max(0.0, seconds - sum(spent.values()))   # a worker starts inside `seconds`
    return spent


def _ask(worker: Worker, item: Item) -> WorkerAnswer | None:
    """The worker's answer for one submission; None if the worker died first."""
    assert worker.stdin is not None and worker.stdout is not None   # started with pipes
    try:
        worker.stdin.write(json.dumps(item) + "\n")
        worker.stdin.flush()
        line = worker.stdout.readline(MAX_ANSWER_CHARS + 1)
    except (BrokenPipeError, OSError, ValueError):
        return None
    if len(line) > MAX_ANSWER_CHARS:   # a worker's answer is a few kB: this one stops the worker
        _kill(worker)
        return None
    try:
        return json.loads(line) if line else None
    except ValueError:
        return None


def _death(worker: Worker) -> str:
    """How a worker ended: its exit status or the signal that killed it."""
    try:
        code = worker.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return "it stopped answering"
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _kill(worker: Worker) -> None:
    from autograder.runtime import sandbox

    sandbox.kill_tree(worker)


# A worker joins a drop other workers hold only while each of them, it included, would still have
# this many of its submissions to grade: joining costs the worker that drop's opening, which costs
# what grading several submissions does (the suite's class of 124, 2 workers: 7.2 s an opening on
# average, 1.4 s a submission besides). Below it, the worker ends and leaves the rest to the holders.
HELP_AT_LEAST = 3


class ByDrop:
    """The submissions left, drop by drop. A worker keeps to one drop while it has
    submissions: its kernel host ran that drop's opening cells (autograder/judging/warm_start.py),
    so each drop's opening runs about once per class instead of once per worker. A worker
    whose drop is done takes the next drop no worker holds, in order; when every drop left
    is held, it helps the one with the most submissions left per worker, if that is
    HELP_AT_LEAST or more, and otherwise takes nothing (None: it is done)."""

    def __init__(self, todo: Iterable[Item]):
        self.left: dict[str, deque[Item]] = {}
        for assignment, student in todo:
            self.left.setdefault(assignment, deque()).append((assignment, student))
        self.holders: dict[str, int] = {a: 0 for a in self.left}
        self.lock = threading.Lock()

    def take(self, current: str | None) -> Item | None:
        with self.lock:
            if current is not None and self.left.get(current):
                return self.left[current].popleft()
            if current is not None:
                self.holders[current] -= 1
            open_drops = [a for a in self.left if self.left[a]]
            if not open_drops:
                return None
            free = [a for a in open_drops if self.holders[a] == 0]

            def share(a: str) -> float:   # each holder's part of a drop, were this worker to join
                return len(self.left[a]) / (self.holders[a] + 1)
            drop = free[0] if free else max(open_drops, key=share)
            if not free and share(drop) < HELP_AT_LEAST:
                return None
            self.holders[drop] += 1
            return self.left[drop].popleft()

    def clear(self) -> None:
        with self.lock:
            for left in self.left.values():
                left.clear()


def _stop(queue: ByDrop, workers: list[Worker]) -> None:
    """Ctrl-C: take no more submissions; interrupt each worker, so that the submission it
    grades stops its sandboxed kernel on the way out, then end what is left of it."""
    from autograder.runtime import sandbox

    queue.clear()
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGINT)
    for worker in workers:
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        sandbox.kill_tree(worker)


def show_progress(stream: TextIO | None, done: int, total: int, elapsed: float, item: Item, ok: bool = True) -> None:
    if stream is None:
        return
    width = 30
    bar = "#" * round(width * done / total) + "." * (width - round(width * done / total))
    rate = done / elapsed * 60 if elapsed > 0 else 0.0
    left = (total - done) / rate * 60 if rate else 0.0
    line = (f"[{bar}] {done}/{total} done, {rate:.1f}/min, {clock(left)} of autograding left "
            f"({item[1]}/{item[0]}{'' if ok else ': not graded'})")
    if stream.isatty():
        stream.write("\r" + line.ljust(100) + ("\n" if done == total else ""))
    else:
        stream.write(line + "\n")
    stream.flush()


def clock(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}:{seconds:02d}"
