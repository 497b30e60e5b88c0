"""autograder.spec: every drop's grading.json reads into records, and each kind of fault in
one fails naming the file, the key path and the fix (a copy of a drop's folder, changed)."""
import copy
import json
import shutil

import nbformat
import pytest

from autograder import course, spec

DROP1 = "drop01-three-kinds-of-parallel"
DROP10 = "drop10-oom-at-step-4000"


def _ids(nb, solution: bool) -> list:
    """The grade ids of the notebook's code answer cells (`solution`), else of its auto-graded test cells."""
    meta = [c.metadata.get("nbgrader", {}) for c in nb.cells if c.cell_type == "code"]
    if solution:
        return [m["grade_id"] for m in meta if m.get("solution")]
    return [m["grade_id"] for m in meta if m.get("grade") and not m.get("solution")]


@pytest.mark.parametrize("drop", course.graded_drops())
def test_every_drop_reads_and_its_records_match_its_notebook(drop):
    data = spec.load(course.grading_file(drop))
    nb = nbformat.read(course.notebook(drop), as_version=4)
    assert sorted(e.answer for e in data.exercises) == sorted(_ids(nb, solution=True))
    assert sorted(t for e in data.exercises for t in e.tests) == sorted(_ids(nb, solution=False)) == sorted(data.points)
    for e in data.exercises:
        if e.visible:      # the typed record gives back the entry it was read from
            assert e.visible.as_dict() == {k: v for k, v in e.entry["visible"].items() if v != []}
        assert [m.code for m in e.mistakes] == ["\n".join(m["code"]) for m in e.entry["mistakes"]]
    for m in data.mistakes:
        assert m.touches <= set(data.points) and m.answer in {e.answer for e in data.exercises}


def _copy(tmp_path, drop):
    """A course holding a copy of `drop`'s folder: (its grading.json's data, a function writing it back)."""
    folder = tmp_path / "source" / drop
    shutil.copytree(course.folder(drop), folder)
    path = folder / course.GRADING_FILE
    data = json.loads(path.read_text())
    return data, lambda changed: path.write_text(json.dumps(changed))


def _fails(tmp_path, drop, change, where, says):
    data, write = _copy(tmp_path, drop)
    changed = copy.deepcopy(data)
    change(changed)
    write(changed)
    with pytest.raises(spec.SpecError) as caught:
        spec.load(course.grading_file(drop, tmp_path))
    message = str(caught.value)
    assert message.startswith(f"source/{drop}/grading.json: {where}"), message
    assert says in message, message


def _set(path, value):
    def change(data):
        *parents, last = path
        for key in parents:
            data = data[key]
        data[last] = value
    return change


FAULTS = [
    # (drop, the change, the key path named, what the message says)
    (DROP1, _set(("mistakes", 3, "name"), "calls_model_state_byts"), "mistakes[3].name = 'calls_model_state_byts'",
     "names no function the drop forbids"),
    (DROP1, _set(("exercises", 0, "forbid", 1), "threeaxes.cost.bytes_per_parm"),
     "exercises[0].forbid[1] = 'threeaxes.cost.bytes_per_parm'", "did you mean 'threeaxes.cost.bytes_per_param'?"),
    (DROP1, _set(("exercises", 0, "forbid", 1), "threeaxes.cost.verdict.CONFIG_KEYS"), "exercises[0].forbid[1]",
     "is not a function of threeaxes"),
    (DROP1, _set(("mistakes", 0, "feedbak"), "x"), "mistakes[0] has the key 'feedbak'", "did you mean 'feedback'?"),
    (DROP1, _set(("mistakes", 0, "answer"), "training_byte_answer"), "mistakes[0].answer = 'training_byte_answer'",
     "did you mean 'training_bytes_answer'?"),
    (DROP1, _set(("mistakes", 0, "loses", 0), "training_bytes_match"), "mistakes[0].loses[0]",
     "is no auto-graded test cell of the notebook"),
    (DROP1, _set(("mistakes", 0, "alone"), "yes"), "mistakes[0].alone = 'yes'", "should be true or false"),
    (DROP1, _set(("mistakes", 0, "code"), "def f(): pass"), "mistakes[0].code", "one per line of the cell"),
    (DROP1, _set(("points", "training_bytes_match_adam_accounting"), "2"),
     "points.training_bytes_match_adam_accounting", "should be a number"),
    (DROP1, _set(("points", "training_bytes_match_adam_accounting"), 7),
     "points.training_bytes_match_adam_accounting = 7", "the notebook's cell gives"),
    (DROP1, lambda d: d["points"].pop("training_bytes_match_adam_accounting"), "points needs the keys",
     "every auto-graded test cell"),
    (DROP1, _set(("exercises", 0, "visible", "reference"), "expected_training_byte"),
     "exercises[0].visible.reference", "did you mean 'expected_training_bytes'?"),
    (DROP1, _set(("exercises", 0, "visible", "form"), "numbr"), "exercises[0].visible.form", "did you mean 'number'?"),
    (DROP1, lambda d: d["exercises"][0]["mistakes"].append(d["exercises"][0]["mistakes"][0]),
     "exercises[0].mistakes[", "should be a new snake_case name"),
    (DROP1, _set(("exercises", 0, "answer"), "training_answer"), "exercises[0].answer", "is no answer cell"),
    (DROP1, _set(("exercisez",), []), "has the key 'exercisez'", "did you mean 'exercises'?"),
    (DROP1, lambda d: d["exercises"].pop(2), "exercises needs an entry for every answer cell",
     "add ['axis_roles_answer']"),
    (DROP1, lambda d: d["exercises"][1]["tests"].append("training_bytes_match_adam_accounting"),
     "exercises should list every auto-graded test cell", "listed twice ['training_bytes_match_adam_accounting']"),
    (DROP10, _set(("exercises", 2, "mistakes", 0, "rule"), "memroy"), "exercises[2].mistakes[0].rule = 'memroy'",
     "did you mean 'memory'?"),
    (DROP10, _set(("exercises", 2, "mistakes", 0, "when"), {"tensor_parallel": 2}), "exercises[2].mistakes[0].when",
     "is no key of a configuration"),
    (DROP10, _set(("exercises", 2, "visible_config", "scenario"), "threeaxes.scenarios.drop10.SCENARI"),
     "exercises[2].visible_config.scenario", "a drop's scenario"),
]


@pytest.mark.parametrize("drop, change, where, says", FAULTS, ids=[f[2].split(" ")[0] for f in FAULTS])
def test_a_fault_names_the_file_the_key_and_the_fix(tmp_path, drop, change, where, says):
    _fails(tmp_path, drop, change, where, says)


def test_a_drop_without_its_notebook_is_refused(tmp_path):
    _copy(tmp_path, DROP1)
    course.notebook(DROP1, tmp_path).unlink()
    with pytest.raises(spec.SpecError, match=rf"source/{DROP1}/grading.json: has no notebook beside it"):
        spec.load(course.grading_file(DROP1, tmp_path))


def test_an_edited_file_is_read_again(tmp_path):
    data, write = _copy(tmp_path, DROP1)
    assert spec.load(course.grading_file(DROP1, tmp_path)).mistakes[0].name == "forgets_master_copy"
    data["mistakes"][0]["name"] = "forgets_the_master_copy"
    write(data)
    assert spec.load(course.grading_file(DROP1, tmp_path)).mistakes[0].name == "forgets_the_master_copy"
