"""`make student-repo`: the course without solutions, hidden tests or grading code."""
import subprocess
import sys

import nbformat

from autograder import student_repo
from grading_harness import ROOT, hidden_test_lines, without_solution_markers


def test_the_export_holds_the_release_but_no_solution_or_hidden_test(tmp_path):
    dest = tmp_path / "student"
    files = student_repo.export(dest)
    assert not (dest / "source").exists() and not (dest / "autograder" / "samples").exists()
    assert {f.split("/")[1] for f in files if f.startswith("release/")} == \
        {p.name for p in (ROOT / "release").iterdir() if p.is_dir()}
    # what the release took out of each source notebook: solutions and hidden tests
    secrets = set()
    for nb_path in sorted((ROOT / "source").glob("*/*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        handed_out = (ROOT / "release" / nb_path.parent.name / nb_path.name).read_text()
        lines = hidden_test_lines(nb) + [line.strip() for c in nb.cells
                                         if c.metadata.get("nbgrader", {}).get("solution")
                                         for line in without_solution_markers(c.source).splitlines()]
        secrets |= {line for line in lines if len(line) > 30 and line not in handed_out}
    # threeaxes/ is left out of the search: the course's package holds reference versions
    # of what several drops ask for (the later drops build on them), by design
    released = "\n".join(p.read_text(errors="replace") for p in dest.rglob("*") if p.is_file()
                         and ".git" not in p.parts and p.relative_to(dest).parts[0] != "threeaxes")
    leaked = sorted(line for line in secrets if line in released)
    assert not leaked, f"the student repository shows {len(leaked)} lines of solutions or hidden tests, e.g. {leaked[:2]}"
    log = subprocess.run(["git", "log", "--oneline"], cwd=dest, capture_output=True, text=True).stdout
    assert len(log.splitlines()) == 1, "one commit: no history that holds the solutions"
    done = subprocess.run([sys.executable, "-m", "autograder.workspace", "sync"], cwd=dest,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (dest / "work" / "notebooks" / "00-start-here.ipynb").exists()


def test_the_export_refuses_a_folder_that_is_in_use(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    import pytest
    with pytest.raises(SystemExit, match="not empty"):
        student_repo.export(tmp_path)
