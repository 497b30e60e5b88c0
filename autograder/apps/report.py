"""The class's mistakes, for the instructor (`make report`, after `make grade`).

    python -m autograder.apps.report [course root] [--out report]

Reads the graded class: each exercise's points per student from nbgrader's
gradebook, and what each test cell told the student from the autograded
notebooks. What it told them is matched against the exercise's catalogue of
mistakes (its drop's grading.json, the `says` lines the checks print), so each
wrong answer is counted under the mistake's name: a catalogued mistake, a call
the exercise forbids (`borrowed: <name>`), `blank` (the answer was never
written), or `other: <error>` when no check named it. Writes to `--out`:

    scores.csv     drop, exercise, student, score, max
    mistakes.csv   drop, exercise, mistake, count, students
    index.html     what to do next (the written answers waiting in the formgrader, then the
                   feedback); the exercises below full marks, worst first; per drop each
                   mistake as the sentence the students read (its name small), a failure
                   no check named with its message, and who made it
    <drop>.png     per drop: the share of the points earned per exercise, and the
                   five commonest mistakes per exercise
"""
from __future__ import annotations

import argparse
import csv
import html
import sys
import urllib.parse
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat

from autograder import course, spec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

BLANK = ("NotImplementedError", "is not defined")   # the stub raised, or was never replaced


def records(course_root: Path, assignment: str) -> list[spec.Exercise]:
    """The drop's exercises (autograder.spec): the course's own grading data, else this repository's."""
    for root in (Path(course_root), course.ROOT):
        path = course.grading_file(assignment, root)
        if path.is_file():
            return list(spec.load(path).exercises)
    return []


def name_of(said: dict | None, exercise: spec.Exercise, blank: bool = False) -> str | None:
    """The mistake a test cell named, in the report's terms; None when it said nothing
    wrong. `said`: the cell's error ("error") and what it printed ("printed"): a
    configuration that works but is slow earns part of the points and is named in print."""
    if blank:
        return "blank"
    if said is None:
        return None
    error = said.get("error")
    text = f"{error.get('ename', '')}: {error.get('evalue', '')}" if error else ""
    if "this exercise scores 0:" in text:
        used = text.split(" used ", 1)[-1].split(",", 1)[0].split(" ", 1)[0]
        return f"borrowed: {used}"
    for where in (text, said.get("printed", "") if said.get("partial") else ""):
        # a configuration may break several rules: the check says them in its own order
        named = [(where.index(m.says), m.name) for m in exercise.mistakes if where and m.says in where]
        if named:
            return min(named)[1]
    if not error:
        return None
    if any(marker in text for marker in BLANK):
        return "blank"
    return f"other: {error.get('ename', 'error')}"


def sentence_of(name: str | None, said: dict | None, exercise: spec.Exercise) -> str:
    """What the student read for the mistake `name`: the catalogue's sentence, the reason a
    forbidden call scores 0, or, for a failure no check named, its error and message."""
    if not name:
        return ""
    for mistake in exercise.mistakes:
        if mistake.name == name:
            return mistake.says
    if name == "blank":
        return "left the answer as released (it still raises NotImplementedError or was never defined)"
    error = (said or {}).get("error") or {}
    message = " ".join(str(error.get("evalue", "")).split())[:240]
    if name.startswith("borrowed: "):
        return f"called {name.split(': ', 1)[1]}, which this exercise may not use, so it scores 0"
    return f"{error.get('ename', 'error')}: {message}" if message else error.get("ename", name)


def graded(course_root: Path) -> list[dict]:
    """One row per (drop, exercise, student): score, max, and the mistake named."""
    from nbgrader.api import Gradebook

    course_root = Path(course_root)
    rows = []
    with Gradebook(f"sqlite:///{course_root / 'gradebook.db'}") as gb:
        for assignment in sorted(a.name for a in gb.assignments):
            listed = records(course_root, assignment)
            for submission in gb.assignment_submissions(assignment):
                student = submission.student.id
                nb_path = course.notebook_in(course.students(assignment, student, course_root, of="autograded"))
                cells = _cells(nb_path)
                grades = {g.name: g for nb in submission.notebooks for g in nb.grades}
                for exercise in listed:
                    tests = [grades[t] for t in exercise.tests if t in grades]
                    if not tests:
                        continue
                    score = sum(g.score or 0.0 for g in tests)
                    top = sum(g.max_score for g in tests)
                    said = next((cells[t] for t in exercise.tests if cells.get(t, {}).get("error")),
                                next((cells[t] for t in exercise.tests if t in cells), None))
                    if said is not None:
                        said = {**said, "partial": score < top}
                    blank = "NotImplementedError" in (cells.get(exercise.answer, {}).get("error") or {}).get(
                        "ename", "")
                    name = name_of(said, exercise, blank)
                    rows.append({"drop": assignment, "exercise": exercise.answer, "student": student,
                                 "score": score, "max": top, "mistake": name,
                                 "says": sentence_of(name, said, exercise)})
                pending = sum(1 for nb in submission.notebooks for g in nb.grades if g.needs_manual_grade)
                if pending:
                    rows.append({"drop": assignment, "exercise": "", "student": student, "score": 0.0,
                                 "max": 0.0, "mistake": None, "says": "", "written_waiting": pending})
    return rows


def _cells(path: Path) -> dict:
    """{grade id: {"error": the cell's first error output or None, "printed": its stdout}}
    for the graded cells (test cells and answer cells) of an autograded notebook."""
    if not path.is_file():
        return {}
    found = {}
    for cell in nbformat.read(path, as_version=4).cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade_id"):
            outputs = cell.get("outputs", [])
            found[meta["grade_id"]] = {
                "error": next((dict(o) for o in outputs if o.get("output_type") == "error"), None),
                "printed": "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")}
    return found


def summary(rows: list[dict]) -> dict:
    """{drop: {exercise: {"share": points earned / points possible, "mistakes": {name: [students]},
    "says": {name: [what the students read, each once]}}}}."""
    out: defaultdict[str, defaultdict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(lambda: {
        "earned": 0.0, "max": 0.0, "mistakes": defaultdict(list), "says": defaultdict(list)}))
    for r in rows:
        if not r["exercise"]:
            continue                 # a written answer waiting: waiting() counts those
        entry = out[r["drop"]][r["exercise"]]
        entry["earned"] += r["score"]
        entry["max"] += r["max"]
        if r["mistake"]:
            entry["mistakes"][r["mistake"]].append(r["student"])
            if r.get("says") and r["says"] not in entry["says"][r["mistake"]]:
                entry["says"][r["mistake"]].append(r["says"])
    return {drop: {ex: {"share": e["earned"] / e["max"] if e["max"] else 0.0,
                        "mistakes": dict(sorted(e["mistakes"].items(), key=lambda kv: -len(kv[1]))),
                        "says": dict(e["says"])}
                   for ex, e in exs.items()} for drop, exs in out.items()}


def waiting(rows: list[dict]) -> dict:
    """{drop: [students whose written answers wait for the instructor in the formgrader]}."""
    out = defaultdict(list)
    for r in rows:
        if r.get("written_waiting"):
            out[r["drop"]].append(r["student"])
    return dict(out)


def write(rows: list[dict], out: Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "scores.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["drop", "exercise", "student", "score", "max", "mistake"])
        w.writerows([r["drop"], r["exercise"], r["student"], r["score"], r["max"], r["mistake"] or ""]
                    for r in rows if r["exercise"])
    table = summary(rows)
    with open(out / "mistakes.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["drop", "exercise", "mistake", "count", "students"])
        for drop, exs in sorted(table.items()):
            for ex, e in exs.items():
                for name, students in e["mistakes"].items():
                    w.writerow([drop, ex, name, len(students), " ".join(sorted(students))])
    for drop, exs in table.items():
        _chart(drop, exs).savefig(out / f"{drop}.png", dpi=90)
    (out / "index.html").write_text(_page(table, waiting(rows)))
    return out


def _chart(drop: str, exs: dict) -> Figure:
    from matplotlib.figure import Figure

    names = list(exs)
    fig = Figure(figsize=(9, 1.2 + 0.9 * len(names)))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 2]})
    left.barh(names, [exs[n]["share"] for n in names], color="#4c72b0")
    left.set_xlim(0, 1)
    left.set_xlabel("share of the points earned")
    left.invert_yaxis()
    labels, counts = [], []
    for n in names:
        for mistake, students in list(exs[n]["mistakes"].items())[:5]:
            labels.append(f"{n}: {mistake}")
            counts.append(len(students))
    right.barh(labels or ["(no mistakes)"], counts or [0], color="#dd8452")
    right.invert_yaxis()
    right.set_xlabel("students")
    right.tick_params(axis="y", labelsize=7)
    fig.suptitle(f"{drop}: how the class did")
    fig.tight_layout()
    return fig


STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0 1rem; }
th, td { text-align: left; vertical-align: top; padding: .35rem .5rem; border-bottom: 1px solid #eee; }
th { background: #f6f6f6; font-weight: 600; }
small code { color: #777; font-size: .8em; }
.next { background: #eef5ff; border: 1px solid #b8d2f5; border-radius: 6px; padding: .5rem 1rem; }
img { max-width: 100%; }
"""


def _formgrader_url(page: str) -> str:
    """The formgrader's `page` from where the instructor opens the report: under their
    server's prefix on a hub (JUPYTERHUB_SERVICE_PREFIX), at the root of a local Jupyter."""
    import os

    return os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/").rstrip("/") + f"/formgrader/{page}"


def _page(table: dict, written: dict | None = None) -> str:
    written = written or {}
    drops = sorted(table)
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>The class's mistakes</title>",
             f"<style>{STYLE}</style></head><body>", "<h1>The class's mistakes</h1>"]
    waiting_n = sum(len(v) for v in written.values())
    steps = []
    if waiting_n:
        steps.append(f"Grade the written answers: {waiting_n} submission{'s' * (waiting_n != 1)} "
                     f"({html.escape(', '.join(f'{d}: {len(s)}' for d, s in sorted(written.items())))}) "
                     f"{'waits' if waiting_n == 1 else 'wait'} in the "
                     f"<a href='{html.escape(_formgrader_url('manual_grading'))}'>formgrader's Manual Grading</a>.")
    steps.append("Generate and release the feedback: <code>python -m autograder.apps.exchange feedback "
                 + html.escape(" ".join(drops)) + "</code> (or <code>nbgrader generate_feedback</code>, then "
                 "<code>nbgrader release_feedback</code>); students fetch it from the Assignments tab.")
    parts.append("<div class='next'><h2>Next</h2><ol>" + "".join(f"<li>{x}</li>" for x in steps) + "</ol></div>")
    below = [(e["share"], d, ex) for d, exs in table.items() for ex, e in exs.items() if e["share"] < 1]
    parts.append("<h2>Where the class did worst</h2>")
    if below:
        parts.append("<ol>" + "".join(f"<li>{html.escape(d)} <code>{html.escape(ex)}</code>: {s:.0%} of the "
                                      f"points</li>" for s, d, ex in sorted(below)[:5]) + "</ol>")
    else:
        parts.append("<p>Every exercise earned full marks.</p>")
    if written:
        parts.append("<h2>Written answers waiting</h2><ul>" + "".join(
            f"<li>{html.escape(d)}: {html.escape(', '.join(sorted(s)))} (<a href='"
            f"{html.escape(_formgrader_url('gradebook/' + urllib.parse.quote(d)))}'>grade them</a>)</li>"
            for d, s in sorted(written.items()))
            + "</ul>")
    for drop in drops:
        exs = table[drop]
        parts.append(f"<h2>{html.escape(drop)}</h2><img src='{html.escape(drop)}.png' alt='{html.escape(drop)}'>"
                     "<table><tr><th>exercise</th><th>points earned</th><th>what the students were told</th>"
                     "<th>students</th></tr>")
        for ex, e in sorted(exs.items(), key=lambda kv: kv[1]["share"]):
            named = e["mistakes"] or {"": []}
            for name, students in named.items():
                says = "<br>".join(html.escape(t) for t in e.get("says", {}).get(name, [])[:3])
                told = f"{says} <small><code>{html.escape(name)}</code></small>" if name else "(no mistakes)"
                parts.append(f"<tr><td><code>{html.escape(ex)}</code></td><td>{e['share']:.0%}</td>"
                             f"<td>{told}</td><td>{len(students) or ''}{': ' if students else ''}"
                             f"{html.escape(', '.join(sorted(students)))}</td></tr>")
        parts.append("</table>")
    return "\n".join(parts + ["</body></html>"]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("course", nargs="?", default=str(course.ROOT), type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if not (args.course / "gradebook.db").is_file():
        raise SystemExit(f"no gradebook in {args.course}: grade the class first (make grade)")
    rows = graded(args.course)
    if not rows:
        raise SystemExit("the gradebook holds no graded submission yet: run make grade first")
    out = write(rows, args.out or args.course / "report")
    print(f"{len(rows)} graded answers: {out}/index.html, mistakes.csv, scores.csv", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
