"""release/ is exactly what nbgrader generates from source/, and gives nothing away."""
import filecmp
import json
import shutil

import pytest
from grading_harness import GRADING_FILE

from autograder import course
from autograder.apps import release
from autograder.apps.release import assignments
from autograder.spec import SpecError

ROOT = course.ROOT
ASSIGNMENTS = assignments()


@pytest.fixture(scope="module")
def fresh_release(released):
    """What `make release` generates from source/ now (tests/conftest.py: released once
    for the whole run, the grading course starts from the same release)."""
    return released / "release"


def test_every_drop_in_source_is_released():
    assert ASSIGNMENTS, "source/ holds no assignments"
    for name in ASSIGNMENTS:
        assert course.notebook(name, of="release").exists(), f"run `make release` for {name}"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_committed_release_equals_a_fresh_generation(name, fresh_release):
    committed, fresh = course.folder(name, of="release"), fresh_release / name
    compare = filecmp.dircmp(committed, fresh)
    assert not compare.left_only and not compare.right_only, "release/ files differ; run `make release`"
    for nb in sorted(fresh.glob("*.ipynb")):
        assert (committed / nb.name).read_text() == nb.read_text(), (
            f"release/{name}/{nb.name} is out of date; run `make release`")


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_no_release_holds_the_grading_data(name, fresh_release):
    """source/<drop>/grading.json lists the mistakes the hidden tests catch; nbgrader's
    CourseDirectory.ignore (nbgrader_config.py) keeps it out of every release."""
    for folder in (course.folder(name, of="release"), fresh_release / name):
        assert not list(folder.rglob(GRADING_FILE)), f"{folder} holds {GRADING_FILE}"


def _sources(path):
    return [("".join(c["source"]), c) for c in json.loads(path.read_text())["cells"]]


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_released_notebook_holds_no_solution_or_hidden_test(name):
    source = dict((c["id"], text) for text, c in _sources(course.notebook(name)))
    released = _sources(course.notebook(name, of="release"))
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


DROP1 = "drop01-three-kinds-of-parallel"


@pytest.mark.parametrize("key, value, named", [
    (("mistakes", 0, "name"), "calls_model_state_byts", "mistakes[0].name = 'calls_model_state_byts'"),
    (("exercises", 0, "forbid", 0), "threeaxes.cost.model_state_byts", "exercises[0].forbid[0]"),
])
def test_a_release_stops_on_a_fault_in_the_grading_data_naming_file_and_key(tmp_path, key, value, named):
    """`make release` checks every drop's grading.json first (autograder.spec): a misspelt
    mistake or a forbidden route naming no function stops it before anything is written."""
    shutil.copytree(course.folder(DROP1), course.folder(DROP1, tmp_path))
    path = course.grading_file(DROP1, tmp_path)
    data = json.loads(path.read_text())
    *parents, last = key
    entry = data
    for k in parents:
        entry = entry[k]
    entry[last] = value
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError) as caught:
        release.generate(tmp_path, tmp_path, [DROP1])
    assert str(caught.value).startswith(f"source/{DROP1}/grading.json: {named}"), caught.value
    assert not course.folder(DROP1, tmp_path, of="release").exists(), "released despite the fault"


def test_the_repositorys_grading_data_passes_the_release_check():
    release.check_grading_data(ROOT)
