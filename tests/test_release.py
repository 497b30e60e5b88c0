"""release/ is exactly what nbgrader generates from source/, and gives nothing away."""
import filecmp
import json
from pathlib import Path

import pytest
from grading_harness import GRADING_FILE

from autograder.release import assignments

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = assignments()


@pytest.fixture(scope="module")
def fresh_release(released):
    """What `make release` generates from source/ now (tests/conftest.py: released once
    for the whole run, the grading course starts from the same release)."""
    return released / "release"


def test_every_drop_in_source_is_released():
    assert ASSIGNMENTS, "source/ holds no assignments"
    for name in ASSIGNMENTS:
        assert (ROOT / "release" / name / f"{name}.ipynb").exists(), f"run `make release` for {name}"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_committed_release_equals_a_fresh_generation(name, fresh_release):
    committed, fresh = ROOT / "release" / name, fresh_release / name
    compare = filecmp.dircmp(committed, fresh)
    assert not compare.left_only and not compare.right_only, "release/ files differ; run `make release`"
    for nb in sorted(fresh.glob("*.ipynb")):
        assert (committed / nb.name).read_text() == nb.read_text(), (
            f"release/{name}/{nb.name} is out of date; run `make release`")


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_no_release_holds_the_grading_data(name, fresh_release):
    """source/<drop>/grading.json lists the mistakes the hidden tests catch; nbgrader's
    CourseDirectory.ignore (nbgrader_config.py) keeps it out of every release."""
    for release in (ROOT / "release" / name, fresh_release / name):
        assert not list(release.rglob(GRADING_FILE)), f"{release} holds {GRADING_FILE}"


def _sources(path):
    return [("".join(c["source"]), c) for c in json.loads(path.read_text())["cells"]]


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_released_notebook_holds_no_solution_or_hidden_test(name):
    source = dict((c["id"], text) for text, c in _sources(ROOT / "source" / name / f"{name}.ipynb"))
    released = _sources(ROOT / "release" / name / f"{name}.ipynb")
    assert released
    for text, cell in released:
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
            assert marker not in text, f"{name}: a released cell still contains {marker!r}"
        original = source.get(cell["id"], "")
        visible = original
        for region in ("SOLUTION", "HIDDEN TESTS"):
            begin, end = f"### BEGIN {region}", f"### END {region}"
            while begin in visible and end in visible:
                visible = visible.split(begin, 1)[0] + visible.split(begin, 1)[1].split(end, 1)[1]
        for region in ("SOLUTION", "HIDDEN TESTS"):
            begin, end = f"### BEGIN {region}", f"### END {region}"
            if begin in original:
                secret = original.split(begin, 1)[1].split(end, 1)[0]
                # a secret line that also stands in the visible part (an import, say) reveals nothing
                lines = [ln.strip() for ln in secret.splitlines()
                         if len(ln.strip()) > 12 and ln.strip() not in visible]
                leaked = [ln for ln in lines if ln in text]
                assert not leaked, f"{name}: released cell {cell['id']} reveals {leaked[:1]}"
