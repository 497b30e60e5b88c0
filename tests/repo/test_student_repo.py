"""`make student-repo`: the course without solutions, hidden tests, references or grading code."""
import ast
import subprocess
import sys

import nbformat
from grading_harness import ROOT, hidden_test_lines, without_solution_markers

from autograder.apps import student_repo

# Lines of an answer's solution that the package holds on purpose: the library the drops
# demonstrate computes these formulas (each exercise forbids calling it, autograder/judging/borrowed.py),
# so the line is there before any student writes it. Each entry: (line, where it lives).
LIBRARY_LINES = {
    'for recompute in ("none", "selective", "full"):':
        "threeaxes/cost/decide.py, the practice set's decision tree, trying each recompute setting "
        "as drop 10's model answer does",
    "return (p - 1) / (v * m + p - 1)":
        "threeaxes/cost/bubble.py's bubble_fraction, the formula drops 4, 7 and 12 teach and their "
        "explorers draw; drop 12's exercise forbids calling it",
}


def _solution_lines(nb_path) -> set:
    """The substantial lines of a source notebook's answers and hidden tests that its
    release does not hand out."""
    nb = nbformat.read(nb_path, as_version=4)
    handed_out = (ROOT / "release" / nb_path.parent.name / nb_path.name).read_text()
    lines = hidden_test_lines(nb) + [line.strip() for c in nb.cells
                                     if c.metadata.get("nbgrader", {}).get("solution")
                                     for line in without_solution_markers(c.source).splitlines()]
    # an import names a module students have anyway; it is no part of a solution
    return {line for line in lines if len(line) > 30 and line not in handed_out
            and not line.startswith(("from ", "import "))}


def _bodies(text: str, name: str) -> dict:
    """Each function's body (docstring left out) as an AST dump: a copy reformatted or
    recommented is still the same body."""
    bodies = {}
    for node in ast.walk(ast.parse(text, name)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[1:] if (node.body and isinstance(node.body[0], ast.Expr)
                                     and isinstance(node.body[0].value, ast.Constant)) else node.body
            # a docstring alone (an @overload's) or one return, pass or raise is no body to copy
            if len(body) > 1 or (body and not isinstance(body[0], (ast.Return, ast.Pass, ast.Raise))):
                bodies[ast.dump(ast.Module(body=body, type_ignores=[]))] = f"{name}:{node.name}"
    return bodies


def test_the_export_holds_the_release_but_no_solution_hidden_test_or_reference(tmp_path):
    dest = tmp_path / "student"
    files = student_repo.export(dest)
    assert not (dest / "source").exists() and not (dest / "autograder" / "samples").exists()
    assert not (dest / "autograder" / "references").exists()
    assert {f.split("/")[1] for f in files if f.startswith("release/")} == \
        {p.name for p in (ROOT / "release").iterdir() if p.is_dir()}
    secrets = set().union(*(_solution_lines(p) for p in sorted((ROOT / "source").glob("*/*.ipynb"))))
    exported = {p: p.read_text(errors="replace") for p in dest.rglob("*") if p.is_file() and ".git" not in p.parts}
    # every file searched, the package included: the lines the library holds on purpose are named above
    released = "\n".join(exported.values())
    leaked = sorted(line for line in secrets if line in released and line not in LIBRARY_LINES)
    assert not leaked, (f"the student repository shows {len(leaked)} lines of solutions or hidden tests, "
                        f"e.g. {leaked[:3]}")
    assert all(line in released for line in LIBRARY_LINES), (
        "a library line listed above has gone; drop it from the list")
    # every body of the references the hidden tests use: none of them anywhere in the export
    references = {}
    for path in sorted((ROOT / "autograder" / "references").glob("*.py")):
        references.update(_bodies(path.read_text(), path.name))
    copies = []
    for path, text in exported.items():
        if path.suffix == ".py":
            copies += [f"{where} in {path.relative_to(dest)}" for body, where in
                       _bodies(text, path.name).items() if body in references]
    assert len(references) > 50 and not copies, copies
    log = subprocess.run(["git", "log", "--oneline"], cwd=dest, capture_output=True, text=True).stdout
    assert len(log.splitlines()) == 1, "one commit: no history that holds the solutions"
    done = subprocess.run([sys.executable, "-m", "autograder.apps.workspace", "sync"], cwd=dest,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (dest / "work" / "notebooks" / "00-start-here.ipynb").exists()


def test_the_export_refuses_a_folder_that_is_in_use(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    import pytest
    with pytest.raises(SystemExit, match="not empty"):
        student_repo.export(tmp_path)
