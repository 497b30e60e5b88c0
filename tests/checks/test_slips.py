"""The reveal of drops 10-12's sealed diagnoses names the catalogued mistake a student made.

Each mistake's formula in threeaxes.grading.slips is checked against the catalogue's own code
for it (the answer cell as a student who made the mistake writes it, in the drop's
grading.json), run here, with the right value from the instructor's reference: the two are
written independently, and a formula that drifts from its catalogued code fails."""
from pathlib import Path

import nbformat
import pytest

from autograder import cases, spec
from autograder.references import drop10 as ref10
from autograder.references import drop11 as ref11
from autograder.references import drop12 as ref12
from threeaxes.cost import plan
from threeaxes.grading import slips, visible
from threeaxes.scenarios import drop10, drop11, drop12

ROOT = Path(__file__).resolve().parents[2]


def _pieces(name):
    """(drop, answer, right value, the slips' mistakes) as the drop's reveal cell builds them."""
    if name == "drop10":
        right = ref10.oom_terms_gb()
        return "drop10-oom-at-step-4000", "oom_terms_answer", right, slips.oom_terms(
            right, drop10.SCENARIO["model"], drop10.CRASHED, drop10.SEQ_BEFORE, drop10.SEQ_AFTER)
    if name == "drop11":
        after = plan(drop11.MODEL, drop11.NEW_CLUSTER, drop11.NEW_BATCH, **drop11.old_config_on(drop11.NEW_CLUSTER),
                     allow_tp_across_nodes=True)
        assert after.time.tp_comm == ref11.tp_after_seconds()
        return ("drop11-slower-bigger-cluster", "tp_after_answer", after.time.tp_comm,
                slips.tp_after(after, drop11.OLD_CLUSTER, drop11.NEW_CLUSTER))
    batch = drop12.SCENARIO["global_batch"]
    shapes = {lever: (s["pp"], batch // (s["dp"] * drop12.MICRO_BATCH)) for lever, s in ref12.LEVERS.items()}
    current = (drop12.CURRENT["pp"], batch // (drop12.CURRENT["dp"] * drop12.MICRO_BATCH))
    return "drop12-bubble-fixed-m", "lever_bubbles_answer", ref12.lever_bubbles(), slips.lever_bubbles(shapes, current)


def _catalogue(folder, answer):
    exercise = spec.load(ROOT / "source" / folder / "grading.json").exercise(answer).entry
    nb = nbformat.read(ROOT / "source" / folder / f"{folder}.ipynb", as_version=4)
    call = exercise["visible"]["call"]
    code = {m["name"]: cases.defined("\n".join(m["code"]), call) for m in exercise["mistakes"]}
    return exercise, code, cases.defined(cases.solution_code(nb, answer), call)


@pytest.mark.parametrize("drop", ["drop10", "drop11", "drop12"])
def test_each_formula_gives_what_its_catalogued_code_gives(drop):
    folder, answer, right, mistakes = _pieces(drop)
    exercise, code, _ = _catalogue(folder, answer)
    rel = exercise["visible"]["rel"]
    assert set(mistakes) == set(code), "one formula for each catalogued mistake"
    for name, value in code.items():
        assert visible.same(visible.plain(value, exercise["visible"]["form"], name), mistakes[name], rel), name


@pytest.mark.parametrize("drop", ["drop10", "drop11", "drop12"])
def test_the_reveal_names_each_catalogued_mistake_and_passes_the_solution(drop, capsys):
    folder, answer, right, mistakes = _pieces(drop)
    exercise, code, solution = _catalogue(folder, answer)
    rel = exercise["visible"]["rel"]
    says = {m["name"]: m["says"] for m in exercise["mistakes"]}
    assert visible.load(drop)[answer]["slips"] == says, "run python -m autograder.cases " + drop
    assert all(said is None for *_, said in slips.verdicts(drop, answer, solution, right, mistakes, rel))
    for name, value in code.items():
        said = [s for *_, s in slips.verdicts(drop, answer, value, right, mistakes, rel) if s]
        assert said and said[0] == says[name], (name, said)
    slips.beside(drop, answer, code[next(iter(code))], right, mistakes, rel=rel)
    assert "✗" in capsys.readouterr().out


def test_a_value_that_is_no_catalogued_mistake_says_how_far_off_it_is():
    folder, answer, right, mistakes = _pieces("drop11")
    [(_, _, _, said)] = slips.verdicts("drop11", answer, right * 1.7, right, mistakes, 0.1)
    assert said.startswith("1.7x the cost model's")
    [(_, _, _, said)] = slips.verdicts("drop11", answer, "fast", right, mistakes, 0.1)
    assert "should be a number" in said


def test_a_percentage_fails_the_form_of_drop_12s_shares():
    """lever_bubbles is stored as two fractions: 18.75 (a percentage) fails its form check,
    naming the fraction, while any share between 0 and 1 passes (its value is graded later)."""
    with pytest.raises(AssertionError, match="should be a fraction between 0 and 1"):
        visible.check("drop12", "lever_bubbles_answer", {"fewer_stages": 18.75, "fewer_replicas": 0.2}, show=False)
    visible.check("drop12", "lever_bubbles_answer", {"fewer_stages": 0.5, "fewer_replicas": 0.2}, show=False)
