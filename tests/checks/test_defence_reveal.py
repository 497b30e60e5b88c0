"""The reveal of drops 13-14's defence says what the grader says, and names what is off.

The four numbers are counted once, in the package (threeaxes.grading.defence_reveal), and the
grader imports them (tests/drops/test_defence.py checks them by hand); the reveal's verdict on a
rival is compared with the grader's (autograder.references.defence) over the drops' solutions,
their rivals and a spread of other layouts; then the reveal is run on the solutions' answers
and on the usual slips."""
import itertools
from pathlib import Path

import nbformat
import pytest

from autograder import cases
from autograder.references import defence as ref
from threeaxes.grading import defence_reveal as reveal
from threeaxes.scenarios import drop13, drop14

ROOT = Path(__file__).resolve().parents[2]
DROPS = {"drop13": ("drop13-size-30b-on-32", drop13), "drop14": ("drop14-defend-70b-on-64", drop14)}


def _solution(drop):
    folder, module = DROPS[drop]
    nb = nbformat.read(ROOT / "source" / folder / f"{folder}.ipynb", as_version=4)
    setup = __import__(f"autograder.references.{drop}", fromlist=["x"]).DEFENCE_SETUP
    code = cases.solution_code(nb, "my_defence_answer")
    ns = {}
    exec("\n".join(setup) + "\n" + code.replace("print(my_defence, rivals, sep=\"\\n\")", ""), ns)
    return module, ns["my_config"], ns["my_defence"], ns["rivals"]


def _layouts(scenario):
    n = scenario["cluster"].n_gpus
    for tp, pp, zero, sp in itertools.product((1, 2, 4, 8, 16), (1, 2, 4, 8, 16), (0, 1, 3), (False, True)):
        if n % (tp * pp) == 0:
            yield dict(dp=n // (tp * pp), tp=tp, pp=pp, micro_batch=1, zero_stage=zero, sequence_parallel=sp)


@pytest.mark.parametrize("drop", DROPS)
def test_the_reveal_judges_a_rival_as_the_grader_does(drop):
    module, config, _, _ = _solution(drop)
    scenario = module.SCENARIO
    compared = 0
    for layout in [config, *module.RIVALS.values(), *_layouts(scenario)]:
        reason, number = ref.rival_reference(scenario, layout)
        assert reveal.rival(scenario, layout)[reason] == number, layout
        compared += not ref.broken_rules(scenario, layout)
    assert compared >= 10


@pytest.mark.parametrize("drop", DROPS)
def test_the_solution_is_marked_right_and_slips_are_named(drop, capsys):
    module, config, my_defence, rivals = _solution(drop)
    reveal.beside(module.SCENARIO, config, my_defence, module.RIVALS, rivals)
    out = capsys.readouterr().out
    assert "✗" not in out and out.count("✓") == 4 + len(module.RIVALS), out
    gib = {k: v * 1e9 / 2**30 for k, v in my_defence.items()}
    gib["bubble"] = 100 * my_defence["bubble"]
    wrong_rivals = {k: ("memory", 1.0) if v[0] != "memory" else ("tp_heads", 1.0) for k, v in rivals.items()}
    reveal.beside(module.SCENARIO, config, gib, module.RIVALS, wrong_rivals)
    out = capsys.readouterr().out
    assert out.count("that is GiB") == 3 - (my_defence["slow_link_gb"] == 0), out
    assert "not a percentage" in out and out.count("✗ the cost model says") == len(rivals), out


def test_an_answer_of_the_wrong_form_is_said_not_raised(capsys):
    module, config, my_defence, _ = _solution("drop13")
    reveal.beside(module.SCENARIO, config, my_defence, module.RIVALS, {"zero3_only": "memory"})
    out = capsys.readouterr().out
    assert out.count("✓") == 4 and "✗ rivals should be a dict" in out, out
