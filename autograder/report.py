"""The class's mistakes, for the instructor (`make report`, after `make grade`).

    python -m autograder.report [course root] [--out report]

Reads the graded class: each exercise's points per student from nbgrader's
gradebook, and what each test cell told the student from the autograded
notebooks. What it told them is matched against the exercise's catalogue of
mistakes (its drop's grading.json, the `says` lines the checks print), so each
wrong answer is counted under the mistake's name: a catalogued mistake, a call
the exercise forbids (`borrowed: <name>`), `blank` (the answer was never
written), or `other: <error>` when no check named it. Writes to `--out`:

    scores.csv     drop, exercise, student, score, max
    mistakes.csv   drop, exercise, mistake, count, students
    index.html     per drop: the exercises from worst to best, the mistakes with counts
    <drop>.png     per drop: the share of the points earned per exercise, and the
                   five commonest mistakes per exercise
"""
from __future__ import annotations

import argparse
import csv
import html
import json
import sys
from collections import defaultdict
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
BLANK = ("NotImplementedError", "is not defined")   # the stub raised, or was never replaced


def exercises(course_root: Path, assignment: str) -> list[dict]:
    path = Path(course_root) / "source" / assignment / "grading.json"
    if not path.is_file():
        path = ROOT / "source" / assignment / "grading.json"
    return json.loads(path.read_text()).get("exercises", []) if path.is_file() else []


def name_of(said: dict | None, exercise: dict, blank: bool = False) -> str | None:
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
        named = [(where.index(m["says"]), m["name"]) for m in exercise.get("mistakes", [])
                 if where and m["says"] in where]
        if named:
            return min(named)[1]
    if not error:
        return None
    if any(marker in text for marker in BLANK):
        return "blank"
    return f"other: {error.get('ename', 'error')}"


def graded(course_root: Path) -> list[dict]:
    """One row per (drop, exercise, student): score, max, and the mistake named."""
    from nbgrader.api import Gradebook

    course_root = Path(course_root)
    rows = []
    with Gradebook(f"sqlite:///{course_root / 'gradebook.db'}") as gb:
        for assignment in sorted(a.name for a in gb.assignments):
            listed = exercises(course_root, assignment)
            for submission in gb.assignment_submissions(assignment):
                student = submission.student.id
                nb_path = course_root / "autograded" / student / assignment / f"{assignment}.ipynb"
                cells = _cells(nb_path)
                grades = {g.name: g for nb in submission.notebooks for g in nb.grades}
                for exercise in listed:
                    tests = [grades[t] for t in exercise["tests"] if t in grades]
                    if not tests:
                        continue
                    score = sum(g.score or 0.0 for g in tests)
                    top = sum(g.max_score for g in tests)
                    said = next((cells[t] for t in exercise["tests"] if cells.get(t, {}).get("error")),
                                next((cells[t] for t in exercise["tests"] if t in cells), None))
                    if said is not None:
                        said = {**said, "partial": score < top}
                    blank = "NotImplementedError" in (cells.get(exercise["answer"], {}).get("error") or {}).get(
                        "ename", "")
                    rows.append({"drop": assignment, "exercise": exercise["answer"], "student": student,
                                 "score": score, "max": top, "mistake": name_of(said, exercise, blank)})
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
    """{drop: {exercise: {"share": points earned / points possible, "mistakes": {name: [students]}}}}."""
    out = defaultdict(lambda: defaultdict(lambda: {"earned": 0.0, "max": 0.0, "mistakes": defaultdict(list)}))
    for r in rows:
        entry = out[r["drop"]][r["exercise"]]
        entry["earned"] += r["score"]
        entry["max"] += r["max"]
        if r["mistake"]:
            entry["mistakes"][r["mistake"]].append(r["student"])
    return {drop: {ex: {"share": e["earned"] / e["max"] if e["max"] else 0.0,
                        "mistakes": dict(sorted(e["mistakes"].items(), key=lambda kv: -len(kv[1])))}
                   for ex, e in exs.items()} for drop, exs in out.items()}


def write(rows: list[dict], out: Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "scores.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["drop", "exercise", "student", "score", "max", "mistake"])
        w.writerows([r["drop"], r["exercise"], r["student"], r["score"], r["max"], r["mistake"] or ""]
                    for r in rows)
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
    (out / "index.html").write_text(_page(table))
    return out


def _chart(drop: str, exs: dict):
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


def _page(table: dict) -> str:
    parts = ["<html><head><meta charset='utf-8'><title>The class's mistakes</title></head><body>",
             "<h1>The class's mistakes</h1>"]
    worst = sorted(((e["share"], d, ex) for d, exs in table.items() for ex, e in exs.items()))[:5]
    parts.append("<h2>Where the class did worst</h2><ol>" + "".join(
        f"<li>{html.escape(d)} {html.escape(ex)}: {s:.0%} of the points</li>" for s, d, ex in worst) + "</ol>")
    for drop, exs in sorted(table.items()):
        parts.append(f"<h2>{html.escape(drop)}</h2><img src='{html.escape(drop)}.png'><table border=1>"
                     "<tr><th>exercise</th><th>points earned</th><th>mistake</th><th>students</th></tr>")
        for ex, e in sorted(exs.items(), key=lambda kv: kv[1]["share"]):
            named = e["mistakes"] or {"": []}
            for name, students in named.items():
                parts.append(f"<tr><td>{html.escape(ex)}</td><td>{e['share']:.0%}</td>"
                             f"<td>{html.escape(name)}</td><td>{len(students)}: "
                             f"{html.escape(', '.join(sorted(students)))}</td></tr>")
        parts.append("</table>")
    return "\n".join(parts + ["</body></html>"]) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("course", nargs="?", default=str(ROOT), type=Path)
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
