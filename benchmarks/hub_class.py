"""A class of 20 on the course's hub at once: `make hub`'s hub, every student's server
started through the hub's REST API, fetch and submit sent to nbgrader's server extension
at the same time (the requests the Assignments tab sends), then the instructor's collect,
grade and feedback, and every student's fetch_feedback at once.

    python benchmarks/hub_class.py [--students 20] [--batch 5] [--out benchmarks/hub_class.txt]

As root the students are Unix accounts made here (and removed after), each server
running as its student; otherwise the hub's demo login (one system user). Each student
writes a marker of their own into an answer cell through the contents API; half solve
the drop, half hand it in blank, and student 0 submits twice (blank, then solved). It
then checks that every submission was collected once and graded, the later one of the
student who submitted twice, and that every feedback page came back to its owner only
(its marker, its score). Between submit and collect the hub is restarted, as in the middle
of a class: its users and every submission must still be there. It prints the times: hub
start, a server's spawn (median and slowest, `--batch` at once), fetch and submit under
load, the restart, collect, grade, feedback.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import nbformat  # noqa: E402
from grading_harness import Course, answer_ids, cell_by_grade_id  # noqa: E402

from autograder.apps import hub  # noqa: E402
from autograder.apps.release import generate  # noqa: E402

DROP = "drop01-three-kinds-of-parallel"
PREFIX = "taxbench-"


def _accounts(names: list[str], make: bool) -> None:
    for name in names:
        if hub.has_account(name):
            home = Path(hub.pwd_entry(name).pw_dir)
            subprocess.run(["userdel", name], capture_output=True)
            if home.name == name:
                shutil.rmtree(home, ignore_errors=True)
        if make:
            hub.make_account(name, f"pw-{os.urandom(6).hex()}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--batch", type=int, default=5, help="servers started at once")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    accounts = hub.is_root()
    students = [f"{PREFIX}{i:02d}" for i in range(args.students)]
    teach = PREFIX + "teach"
    base = Path(tempfile.mkdtemp(prefix="threeaxes-hub-bench-"))
    base.chmod(0o755)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))   # clean up on kill

    class Figures(dict):
        """Each figure printed (and written to --out) as soon as it is measured: a run cut short
        still leaves what it measured."""
        def __setitem__(self, name, seconds):
            super().__setitem__(name, seconds)
            print(f"{name}: {seconds:.1f} s", flush=True)
            if args.out:
                args.out.write_text("partial: " + "; ".join(f"{k} {v:.1f} s" for k, v in self.items()) + "\n")

    figures, class_hub = Figures(), None
    try:
        done = hub.install(accounts)
        if accounts:
            _accounts([*students, teach], make=True)
        course = Course(base / "instructor", [DROP]).root
        generate(course, course, gradebook=course / "gradebook.db")
        (course / "roster.csv").write_text("id,first_name,last_name,email\n"
                                           + "".join(f"{s},S{s[-2:]},Student,\n" for s in students))
        if accounts:
            entry = hub.pwd_entry(teach)
            subprocess.run(["chown", "-R", f"{entry.pw_uid}:{entry.pw_gid}", str(course)], check=True)
        settings = hub.prepare(hub.Settings(state=base / "state", students=students, instructor=teach,
                                            course=course, accounts=accounts, port=hub.free_port()), done)
        env = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", "HOME": str(base),
               "PYTHONPATH": str(ROOT), "JUPYTER_CONFIG_PATH": str(base / "state" / "jupyter" / "instructor")}

        def instructor(*argv: str) -> str:
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, *argv], cwd=course, env=env, capture_output=True, text=True)
            if accounts:
                subprocess.run(["chown", "-R", f"{entry.pw_uid}:{entry.pw_gid}", str(course)], check=True)
            if out.returncode:
                raise SystemExit(f"{' '.join(argv)}:\n{out.stdout}\n{out.stderr}")
            figures[" ".join(argv[1:3])] = time.perf_counter() - t0
            return out.stdout + out.stderr

        class_hub = hub.Hub(settings, done)
        figures["hub start"] = class_hub.start_seconds
        instructor("-m", "nbgrader", "db", "student", "import", "roster.csv")
        instructor("-m", "autograder.apps.exchange", "release", DROP)

        spawns = []
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.batch) as pool:
            spawns = list(pool.map(class_hub.spawn, students))
        figures["all servers started"] = time.perf_counter() - t0
        figures["a server's spawn, median"] = statistics.median(spawns)
        figures["a server's spawn, slowest"] = max(spawns)

        def call(name: str, path: str, body=None):
            t = time.perf_counter()
            reply = class_hub.request("POST" if body is not None else "GET", f"/user/{name}{path}", body)
            return reply, time.perf_counter() - t

        what = {"course_id": hub.COURSE_ID, "assignment_id": DROP}
        with ThreadPoolExecutor(len(students)) as pool:     # every student at the same moment
            t0 = time.perf_counter()
            fetched = list(pool.map(lambda s: call(s, "/assignments/fetch", what), students))
            figures["fetch, 20 at once (all done)"] = time.perf_counter() - t0
        assert all(r["success"] for r, _ in fetched), [r for r, _ in fetched if not r["success"]][:2]
        figures["fetch, slowest request"] = max(t for _, t in fetched)

        source = nbformat.read(course / "source" / DROP / f"{DROP}.ipynb", as_version=4)
        released = nbformat.read(course / "release" / DROP / f"{DROP}.ipynb", as_version=4)
        answer = answer_ids(source)[0]
        solved = {s: i % 2 == 0 for i, s in enumerate(students)}

        def write(name: str, solve: bool) -> None:
            nb = nbformat.from_dict(json.loads(json.dumps(released)))
            if solve:
                from grading_harness import set_answer, solution_of
                for grade_id in answer_ids(source):
                    nb = set_answer(nb, grade_id, solution_of(source, grade_id))
            cell = cell_by_grade_id(nb, answer)
            cell.source = f"# marker-{name}\n" + cell.source
            class_hub.request("PUT", f"/user/{name}/api/contents/{DROP}/{DROP}.ipynb",
                              {"type": "notebook", "format": "json", "content": nb})

        first = students[0]
        write(first, False)                       # student 0: blank first, solved later
        call(first, "/assignments/submit", what)
        time.sleep(1.1)                           # nbgrader's timestamps: the second is later
        with ThreadPoolExecutor(len(students)) as pool:
            list(pool.map(lambda s: write(s, solved[s]), students))
            t0 = time.perf_counter()
            submitted = list(pool.map(lambda s: call(s, "/assignments/submit", what), students))
            figures["submit, 20 at once (all done)"] = time.perf_counter() - t0
        assert all(r["success"] for r, _ in submitted), [r for r, _ in submitted if not r["success"]][:2]
        figures["submit, slowest request"] = max(t for _, t in submitted)

        # the hub restarted in the middle of the class: its users, their logins and everything
        # submitted stay; the servers start again on the next visit (here: through the REST API)
        t0 = time.perf_counter()
        class_hub.stop()
        class_hub = hub.Hub(settings, done)
        figures["hub restart (stop, start)"] = time.perf_counter() - t0
        known = {u["name"] for u in class_hub.api("GET", "/users")}
        assert set(students) <= known, sorted(set(students) - known)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.batch) as pool:
            list(pool.map(class_hub.spawn, students))
        figures["all servers started again after the restart"] = time.perf_counter() - t0
        for name in students[:3]:
            listing = class_hub.request("GET", f"/user/{name}/assignments?course_id={hub.COURSE_ID}")
            assert any(a["status"] == "submitted" for a in listing["value"]), (name, listing)

        collected = instructor("-m", "autograder.apps.exchange", "collect", DROP)
        graded = instructor("-m", "autograder.apps.exchange", "grade", DROP, "--jobs", "2")
        instructor("-m", "autograder.apps.exchange", "feedback", DROP)
        scores = {line.split()[0]: float(line.split(": ", 1)[1].split(" / ")[0])
                  for line in graded.splitlines() if line.startswith(PREFIX)}
        assert sorted(scores) == students, (collected, graded)
        full = max(scores.values())
        assert all((scores[s] == full) == solved[s] for s in students), scores
        assert len(list((course / "submitted").iterdir())) == len(students)

        with ThreadPoolExecutor(len(students)) as pool:
            t0 = time.perf_counter()
            back = list(pool.map(lambda s: call(s, "/assignments/fetch_feedback", what), students))
            figures["fetch_feedback, 20 at once (all done)"] = time.perf_counter() - t0
        assert all(r["success"] for r, _ in back)
        for name in students:
            listing = class_hub.request("GET", f"/user/{name}/assignments?course_id={hub.COURSE_ID}")
            subs = [sub for a in listing["value"] if a["status"] == "submitted"
                    for sub in a.get("submissions", [a]) if sub.get("local_feedback_path")]
            newest = max(subs, key=lambda sub: sub["timestamp"])
            home = settings["state"] + f"/homes/{name}" if not accounts else hub.pwd_entry(name).pw_dir
            rel = newest["local_feedback_path"]           # relative to the server's root, or absolute
            rel = os.path.relpath(rel, home) if os.path.isabs(rel) else rel
            quoted = urllib.parse.quote(f"{rel}/{DROP}.html")   # the timestamp folder has spaces
            page = class_hub.request("GET", f"/user/{name}/api/contents/{quoted}?content=1")["content"]
            others = [s for s in students if s != name and f"marker-{s}" in page]
            assert f"marker-{name}" in page and not others, (name, others)
        print(f"{len(students)} students: every submission collected once, graded, returned to its owner; "
              f"{first}'s second submission was the one graded ({scores[first]:g} of {full:g})")
    finally:
        if class_hub is not None:
            class_hub.stop()
        if accounts:
            _accounts([*students, teach], make=False)
        shutil.rmtree(base, ignore_errors=True)
    lines = [f"{name}: {seconds:.1f} s" for name, seconds in figures.items()]
    text = (f"hub class of {len(students)} ({'Unix accounts' if accounts else 'demo login'}, "
            f"{os.cpu_count()} cores, {args.batch} servers started at once), {time.strftime('%Y-%m-%d')}:\n"
            + "\n".join(lines) + "\n")
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
