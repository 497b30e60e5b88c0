"""What each drop withholds (autograder/judging/borrowed.py): every graded exercise's entry in
grading.json names what it may not call, every drop has an attack that calls it, and the
visible check a student runs says what the grader will. The attacks themselves ("mistakes"
named calls_...) are graded by tests/drops/test_grading.py like every other mistake."""
import nbformat
import pytest
from borrowed_helpers import DROPS, exercises
from grading_harness import answer_ids, autograded_ids

from autograder import spec, withheld
from autograder.course import PACKAGE, grading_file, notebook
from autograder.judging import borrowed


@pytest.mark.parametrize("drop", DROPS)
def test_every_graded_exercise_names_what_it_may_not_call_and_each_name_exists(drop):
    nb = nbformat.read(notebook(drop), as_version=4)
    listed = exercises(drop)
    assert sorted(e.answer for e in listed) == sorted(answer_ids(nb)), "one entry per answer cell"
    assert sorted(t for e in listed for t in e.tests) == sorted(autograded_ids(nb)), (
        "every auto-graded test cell belongs to exactly one exercise")
    for e in listed:
        assert e.forbid and e.why and e.may, e.answer
        for name in e.forbid:
            obj = withheld.resolve(name)        # importable, or this raises naming it
            assert callable(obj), name
            assert withheld.definition(name).startswith("threeaxes."), name


@pytest.mark.parametrize("drop", DROPS)
def test_every_drop_has_an_attack_that_calls_the_package(drop):
    attacks = [m for m in spec.load(grading_file(drop)).mistakes if m.name.startswith("calls_")]
    assert attacks, f"{drop}: add a mistake named calls_... that answers by calling a forbidden name"
    forbidden = {n.rsplit(".", 1)[-1] for e in exercises(drop) for n in e.forbid}
    for m in attacks:
        assert any(name in m.feedback for name in forbidden), m.name


# -- while a student works: the visible check says the same --------------------------------
def test_the_packages_copy_of_the_exercises_is_grading_jsons():
    assert (PACKAGE / "grading" / "own_work_data.py").read_text() == borrowed.package_source(), (
        "run `python -m autograder.judging.borrowed` after editing a grading.json's exercises")


@pytest.mark.parametrize("drop", DROPS)
def test_every_test_cell_starts_with_its_exercises_visible_check(drop):
    nb = nbformat.read(notebook(drop), as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    for e in exercises(drop):
        for test in e.tests:
            assert f'own_work.check("{drop[:6]}", "{e.answer}")' in cells[test].split("### BEGIN HIDDEN")[0]


def test_the_visible_check_names_the_call_with_the_graders_message():
    from IPython.core.interactiveshell import InteractiveShell

    from threeaxes.grading import own_work

    shell = InteractiveShell.instance()
    answer = ("# Graded on your own code: ...\nimport threeaxes.data_parallel as dpar\n"
              "def all_reduce_sizes(sizes, cap):\n    return dpar.plan_buckets(sizes[::-1], cap)")
    shell.run_cell(answer, store_history=True)
    with pytest.raises(AssertionError) as caught:
        own_work.check("drop05", "all_reduce_sizes_answer")
    e = next(x for x in exercises("drop05-data-parallel-trace") if x.answer == "all_reduce_sizes_answer")
    assert str(caught.value) == borrowed.message_for(e, "threeaxes.data_parallel.plan_buckets",
                                                     "the answer cell all_reduce_sizes_answer")
    own = "# Graded on your own code: ...\ndef all_reduce_sizes(sizes, cap):\n    return [sum(sizes)]"
    shell.run_cell(own, store_history=True)
    own_work.check("drop05", "all_reduce_sizes_answer")          # one's own code: silent
    by_string = "# Graded on your own code: ...\nimport threeaxes.cost as c\nf = getattr(c, 'search')"
    shell.run_cell(by_string, store_history=True)
    with pytest.raises(AssertionError, match="threeaxes.cost.search"):
        own_work.check("drop13", "my_config_answer")
