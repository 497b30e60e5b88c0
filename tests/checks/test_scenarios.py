"""The sizing drops' scenarios (threeaxes/scenarios/): content that the checks and the
notebooks read, made by `scenario(...)`, and named where the grading data points at them.
That a scenario imports no check is tests/repo/test_import_graph.py's rule (grading sits on top)."""
import importlib
import json
from pathlib import Path

from threeaxes.cost import get_cluster, get_model
from threeaxes.scenarios import scenario

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"model", "cluster", "global_batch", "seq_len", "assumptions", "search_options"}


def resolve(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_a_scenario_copies_its_assumptions():
    assumptions = {"interleave": "group_p"}
    made = scenario(get_model("30B"), get_cluster("a100-80gb", n_nodes=4), 512, assumptions=assumptions)
    assumptions["interleave"] = "any"          # the caller's dict changes later: the scenario does not
    assert made["assumptions"] == {"interleave": "group_p"}
    assert set(made) == KEYS and made["global_batch"] == 512 and made["seq_len"] is None
    assert scenario(get_model("30B"), get_cluster("a100-80gb", n_nodes=4), 512)["assumptions"] == {}


def test_every_stored_scenario_path_names_a_scenario_module():
    named = []
    for path in sorted((ROOT / "threeaxes" / "grading" / "cases").glob("*.config.json")):
        for exercise in json.loads(path.read_text()).values():
            named.append((path.name, exercise["scenario"]))
    assert len(named) >= 5, named
    for where, dotted in named:
        assert dotted.startswith("threeaxes.scenarios.drop"), f"{where}: {dotted} is not in threeaxes.scenarios"
        assert set(resolve(dotted)) == KEYS, f"{where}: {dotted} is not a dict made by scenario(...)"

