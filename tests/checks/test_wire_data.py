"""A kernel's reply is data, never the grader's objects (issue 32, section 2).

Each forged reply below is one a tampered kernel sent, or could send, to the grader:
under the old decoder an attribute chain under a trusted package reached `os.abort`
(the worker died) and `shutil.rmtree` (a course file was deleted), a dataclass took
any attribute, a namedtuple named any function, and a library function answer ran
ranks in the grader. Here each arrives through the real reply path (`Answers` with a
kernel whose printed text we write) as plain data or an `Opaque` that fails the
check it meets, and the grader's state is untouched.
"""
import json
import os
import re

import pytest
import torch

from autograder.judging.judge import judge_cell
from threeaxes.grading import as_number, check_on_ranks, wire
from threeaxes.grading.wire import Answers, KernelGone, LocalKernel, Opaque, ReplyRefused, is_remote
from threeaxes.grading.wire import data as wire_data

REQUEST = re.compile(r"reply\(globals\(\), (\".*\"), '([0-9a-f]+)'\)$")


class Forged:
    """A kernel that answers every request with `reply` (JSON text), as a tampered one can."""

    def __init__(self, reply: str):
        self.reply, self.requests = reply, []

    def __call__(self, code: str, timeout: float) -> str:
        body, nonce = REQUEST.search(code).groups()
        self.requests.append(json.loads(json.loads(body)))
        return f"{nonce}{self.reply}{nonce}"


def forged(**values) -> Answers:
    return Answers(Forged(json.dumps(values)))


def outcome(outputs):
    errors = [o for o in outputs if o["output_type"] == "error"]
    return f"{errors[0]['ename']}: {errors[0]['evalue']}" if errors else "pass"


@pytest.fixture
def no_abort(monkeypatch):
    """os.abort, recorded instead of killing the test run."""
    calls = []
    monkeypatch.setattr(os, "abort", lambda *a: calls.append(a))
    return calls


# -- forged replies -----------------------------------------------------------------------------
def test_an_attribute_chain_to_os_abort_under_a_trusted_package_is_opaque(no_abort):
    answers = forged(answer={"__import__": "threeaxes.grading.wire.oracle:os.abort"},
                     module={"__module__": "os"}, chain={"__import__": "torch:os.abort"})
    got = answers.get(["answer", "module", "chain"])
    assert all(isinstance(got[k], Opaque) for k in got), got
    for value in got.values():
        with pytest.raises(AssertionError, match="cannot be checked"):
            value()
    assert outcome(judge_cell("answer()", answers)).startswith("AssertionError")
    assert no_abort == []


def test_an_attribute_chain_to_shutil_rmtree_deletes_nothing(tmp_path):
    course_file = tmp_path / "course" / "drop01.ipynb"
    course_file.parent.mkdir()
    course_file.write_text("{}")
    answers = forged(answer={"__import__": "torch.hub:shutil.rmtree"})
    out = judge_cell(f"answer({str(course_file.parent)!r})\nprint('ran')", answers)
    assert outcome(out).startswith("AssertionError: Opaque from the notebook cannot be checked")
    assert course_file.read_text() == "{}"


def test_a_dataclass_with_an_extra_attribute_or_a_forged_field_is_opaque(no_abort):
    fields = {"vocab_size": 32, "d_model": 16, "n_heads": 2, "n_layers": 4, "seq_len": 16,
              "mlp_ratio": 4, "dtype": {"__dtype__": "float32"}}
    good = forged(cfg={"__record__": "threeaxes.toy:ToyConfig", "fields": fields}).get(["cfg"])["cfg"]
    from threeaxes.toy import ToyConfig
    assert type(good) is ToyConfig and good == ToyConfig(d_model=16, n_heads=2)
    abort = {"__import__": "threeaxes.grading.wire.oracle:os.abort"}
    bad = {
        "old_tag": {"__dataclass__": "threeaxes.toy:ToyConfig", "fields": {**fields, "__eq__": abort}},
        "extra": {"__record__": "threeaxes.toy:ToyConfig", "fields": {**fields, "__class__": 1}},
        "missing": {"__record__": "threeaxes.toy:ToyConfig", "fields": {"d_model": 16}},
        "forged_field": {"__record__": "threeaxes.toy:ToyConfig", "fields": {**fields, "d_model": abort}},
        "remote_field": {"__record__": "threeaxes.toy:ToyConfig",
                         "fields": {**fields, "d_model": {"__remote__": 0, "name": "f"}}},
        "refused": {"__record__": "threeaxes.toy:ToyConfig", "fields": {**fields, "n_heads": 3}},
        "bad_dtype": {"__record__": "threeaxes.toy:ToyConfig", "fields": {**fields, "dtype": "os"}},
        # its error for n_heads would list every divisor of d_model: refused before it is built
        "endless": {"__record__": "threeaxes.toy:ToyConfig", "fields": {**fields, "d_model": 10**18 + 1}},
    }
    got = forged(**bad).get(list(bad))
    assert set(got) == set(bad)
    for name, value in got.items():
        assert isinstance(value, Opaque) and not isinstance(value, ToyConfig), name
    assert "exactly the fields" in value_why(got["extra"]) and "exactly the fields" in value_why(got["missing"])
    assert "ToyConfig.d_model is not plain data" in value_why(got["forged_field"])
    assert "ToyConfig.d_model is not plain data" in value_why(got["remote_field"])
    assert "refused its fields" in value_why(got["refused"])
    assert "ToyConfig.d_model=1000000000000000001 is over" in value_why(got["endless"])
    assert no_abort == []


def value_why(value) -> str:
    return value.__dict__["why"]


def test_a_namedtuple_or_record_naming_a_function_is_opaque(no_abort):
    abort = "threeaxes.grading.wire.oracle:os.abort"
    got = forged(nt={"__namedtuple__": abort, "values": []},
                 rec={"__record__": abort, "fields": {}},
                 method={"__record__": "threeaxes.cost.memory:ModelStateBytes.__new__", "fields": {}},
                 cls={"__record__": "threeaxes.cost.memory:ModelStateBytes._make", "fields": {}}).get(
        ["nt", "rec", "method", "cls"])
    assert all(isinstance(v, Opaque) for v in got.values()), got
    assert "is not one of the course's result types" in value_why(got["rec"])
    assert no_abort == []


def test_a_tensor_whose_shape_lies_or_whose_values_are_not_numbers_is_opaque():
    def tensor(dtype="float64", shape=(2, 2), data=(1.0, 2.0, 3.0, 4.0)):
        return {"__tensor__": {"dtype": dtype, "shape": list(shape), "data": list(data)}}
    cases = {
        "fine": tensor(),
        "huge_shape": tensor(shape=(10**6, 10**6), data=[0.0]),
        "short": tensor(shape=(2, 2), data=[1.0, 2.0, 3.0]),
        "negative": tensor(shape=(-1,), data=[1.0]),
        "nested": tensor(shape=(1,), data=[{"__import__": "os:abort"}]),
        "strings": tensor(shape=(1,), data=["1"]),
        "float_in_int": tensor(dtype="int64", shape=(1,), data=[0.5]),
        "dtype_name": tensor(dtype="float64; os.abort", shape=(1,), data=[1.0]),
        "dtype_attr": tensor(dtype="Tensor", shape=(1,), data=[1.0]),
        "overflow": tensor(dtype="int8", shape=(1,), data=[10**30]),
        "too_many": tensor(shape=(wire_data.MAX_TENSOR_VALUES + 1,), data=[]),
    }
    got = forged(**cases).get(list(cases))
    assert type(got.pop("fine")) is torch.Tensor
    for name, value in got.items():
        assert isinstance(value, Opaque) and type(value).__name__ == "Tensor", name
    with pytest.raises(AssertionError, match="should be a number"):
        as_number(got["short"], "answer")
    with pytest.raises(AssertionError, match="Tensor from the notebook cannot be checked: a tensor of shape"):
        float(got["short"])


def test_a_reply_over_the_cap_is_refused_unread(monkeypatch):
    parsed = []
    real_loads = json.loads
    monkeypatch.setattr(json, "loads", lambda text, *a, **k: parsed.append(len(text)) or real_loads(text, *a, **k))
    big = json.dumps({"answer": [0] * (wire_data.MAX_REPLY_CHARS // 3 + 10)})
    assert len(big) > wire_data.MAX_REPLY_CHARS
    kernel = Forged(big)
    with pytest.raises(ReplyRefused, match="MB the grader reads"):
        Answers(kernel).get(["answer"])
    assert all(n < 10_000 for n in parsed)   # only the test's own small request text was read
    out = judge_cell("assert answer == 1", Answers(kernel))
    assert outcome(out).startswith("ReplyRefused: the notebook's answer is")


def test_a_value_whose_class_claims_torch_is_not_a_tensor_and_item_is_never_called():
    calls = []

    class Liar:   # says it is torch's, has item(), shape and tolist(): the grader used to call item()
        __module__ = "torch"
        shape = ()

        def item(self):
            calls.append("item")
            return 0.25

        def tolist(self):
            calls.append("tolist")
            return 0.25

    class Rigged(torch.Tensor):   # a real tensor subclass: its values cross, not its class
        def __eq__(self, other):
            return True

    namespace = {"liar": Liar(), "rigged": torch.tensor([1.0, 2.0]).as_subclass(Rigged)}
    got = Answers(LocalKernel(namespace)).get(["liar", "rigged"])
    assert isinstance(got["liar"], Opaque) and type(got["liar"]).__name__ == "Liar"
    with pytest.raises(AssertionError, match="should be a number"):
        as_number(got["liar"], "liar")
    assert type(got["rigged"]) is torch.Tensor and not torch.equal(got["rigged"], torch.zeros(2))
    assert calls == []


def test_only_the_names_asked_for_come_back():
    answers = forged(answer=1, __builtins__={"__dict__": [["__import__", {"__remote__": 0}]]},
                     assert_close={"__remote__": 1, "name": "assert_close"})
    assert answers.get(["answer"]) == {"answer": 1}
    assert outcome(judge_cell("from threeaxes.grading import as_int\nassert as_int(answer) == 1", answers)) == "pass"


def test_a_raised_error_is_a_plain_exception_never_an_exit_or_an_interrupt():
    for names, kind in ((["KeyboardInterrupt"], RuntimeError), (["SystemExit"], RuntimeError),
                        (["UnicodeDecodeError", "ValueError"], ValueError), (["ValueError"], ValueError),
                        ("KeyError", KeyError), ([], RuntimeError)):
        with pytest.raises(kind):
            forged(__raised__=[names, "no"]).request({"op": "call"})
    with pytest.raises(KernelGone):   # a reply nested past what the JSON reader takes
        Answers(Forged("[" * 200_000 + "]" * 200_000)).request({"op": "call"})
    deep = json.loads(json.dumps(json.loads("[" * 60 + "1" + "]" * 60)))
    assert isinstance(Answers(None).decode(deep)[0][0][0], list)
    inner = Answers(None).decode(deep)
    for _ in range(wire_data.MAX_DEPTH + 1):
        inner = inner[0]
    assert isinstance(inner, Opaque)


def test_a_remote_that_claims_a_grading_module_still_runs_in_the_kernel():
    kernel = Forged(json.dumps({"__remote__": 7, "name": "gradients_after_average",
                                "module": "threeaxes.grading.drop02", "qualname": "gradients_after_average"}))
    remote = Answers(kernel).request({"op": "call"})
    assert is_remote(remote) and remote.__module__ == "threeaxes.grading.drop02"
    kernel.reply = json.dumps({"__tuple__": [1, 2]})
    assert remote(3, k=4) == (1, 2) and kernel.requests[-1]["op"] == "call" and kernel.requests[-1]["handle"] == 7
    with pytest.raises(KernelGone):   # with no kernel behind it (the oracle's decoder) it is never run
        Answers(None).decode({"__remote__": 0, "name": "f"})()


# -- what still crosses -------------------------------------------------------------------------
def test_a_library_function_answer_is_called_in_the_kernel_and_ranks_start_there():
    from threeaxes.grading import drop03

    namespace = {"__name__": "__main__"}
    exec("from threeaxes.cost import bubble_fraction as answer", namespace)
    calls = []

    def run_code(code, timeout):
        calls.append(json.loads(json.loads(REQUEST.search(code).group(1)))["op"])
        return LocalKernel(namespace)(code, timeout)

    answers = Answers(run_code)
    answer = answers.get(["answer"])["answer"]
    from threeaxes.cost import bubble_fraction
    assert is_remote(answer) and answer is not bubble_fraction
    assert answer.__module__ == bubble_fraction.__module__   # the guard's label for an alias
    assert answer(4, 12) == bubble_fraction(4, 12) and calls == ["get", "call"]
    # a runner on ranks with a Remote among its arguments starts them in the kernel, never here
    kernel = Forged(json.dumps([{"__tuple__": [2, 2, 64]}, {"__tuple__": [2, 2, 64]}]))
    remote = Answers(kernel).decode({"__remote__": 0, "name": "tp_block_allreduces"})
    assert check_on_ranks(drop03.tp_block_collectives, 2, remote) == [(2, 2, 64), (2, 2, 64)]
    assert kernel.requests[-1]["op"] == "on_ranks"
    assert kernel.requests[-1]["check"] == "threeaxes.grading.drop03:tp_block_collectives"


def test_the_course_result_types_cross_as_themselves():
    from fractions import Fraction

    from threeaxes.cost import (
        activation_bytes,
        get_cluster,
        get_model,
        group_link,
        judge,
        model_state_bytes,
        plan,
        stage_memory,
    )
    from threeaxes.dims import ParallelDims
    from threeaxes.pipeline import gpipe, make_plan, simulate
    from threeaxes.toy import ToyConfig

    model, cluster = get_model("13B"), get_cluster("a100-80gb", n_nodes=1)
    values = [model, cluster, model_state_bytes(1e9, dp=2, zero_stage=1), stage_memory(model, 2048, 1, tp=8),
              activation_bytes(16, 1, 64, 4), group_link(cluster, 1, 8),
              plan(model, cluster, 512, dp=1, tp=8, pp=1, micro_batch=1),
              judge(model, cluster, 512, 2048, config=dict(dp=1, tp=2, pp=1, micro_batch=1)),   # broken rules
              ToyConfig(d_model=16, n_heads=2, dtype=torch.float64), ParallelDims(dp=2, tp=2, pp=2),
              Fraction(3, 11), {"tp": (1, 2)}, torch.bfloat16,
              make_plan("interleaved", 2, 4, 2), simulate(gpipe(2, 3))]
    seen = set()
    for value in values:
        back = Answers(None).decode(json.loads(json.dumps(wire.encode(value))))
        assert type(back) is type(value) and back == value, value
        seen.add(f"{type(value).__module__}:{type(value).__qualname__}")
        for inner in value if isinstance(value, tuple) else ():
            seen.add(f"{type(inner).__module__}:{type(inner).__qualname__}")
        if type(value).__name__ == "Plan":          # its slots are Actions, rebuilt by Action(...)
            assert back.name == value.name and back.bubble_fraction() == value.bubble_fraction()
            seen.add(f"{type(back[0][0]).__module__}:{type(back[0][0]).__qualname__}")
        if type(value).__name__ == "Simulation":    # its events are trace.Events
            seen.add(f"{type(back.events[0][0]).__module__}:{type(back.events[0][0]).__qualname__}")
    assert set(wire_data.RECORDS) <= seen | {"threeaxes.cost.constraints:Violation"}
    verdict = Answers(None).decode(json.loads(json.dumps(wire.encode(values[7]))))
    assert verdict.violations and type(verdict.violations[0]).__name__ == "Violation"


def test_a_forged_plan_is_refused_by_the_plans_own_checks(no_abort):
    """A Plan crosses as its slots and name, rebuilt by `Plan(...)`, whose checks refuse a plan
    that misses work, runs an action before what it waits for, or holds anything but Actions."""
    from threeaxes.pipeline import Plan, gpipe

    good = json.loads(json.dumps(wire.encode(gpipe(2, 2))))
    assert type(Answers(None).decode(good)) is Plan

    def changed(edit):
        body = json.loads(json.dumps(good))
        edit(body["fields"])
        return {"__record__": "threeaxes.pipeline.schedules:Plan", "fields": body["fields"]}

    def row(fields, rank):
        return fields["slots"]["__dict__"][rank][1]["__tuple__"]

    def action(stage, mb, kind):
        return {"__record__": "threeaxes.pipeline.schedules:Action",
                "fields": {"stage": stage, "microbatch": mb, "kind": kind}}

    bad = {
        "missing": changed(lambda f: row(f, 1).__setitem__(row(f, 1).index(action(1, 0, "B")), None)),
        "too_early": changed(lambda f: row(f, 1).__setitem__(0, row(f, 1).pop(row(f, 1).index(action(1, 1, "F"))))),
        "not_an_action": changed(lambda f: row(f, 0).append({"__remote__": 0, "name": "f"})),
        "string_row": changed(lambda f: f["slots"]["__dict__"][0].__setitem__(1, "0F0")),
        "huge_stage": changed(lambda f: row(f, 0).append(action(2 * 10**9, 0, "F"))),
        "bad_kind": changed(lambda f: row(f, 0).append(action(0, 0, "X"))),
        "name": changed(lambda f: f.__setitem__("name", {"__tensor__": {"dtype": "int64", "shape": [], "data": [1]}})),
        "extra": changed(lambda f: f.__setitem__("_slots", {"__dict__": []})),
        "subclass": {"__record__": "threeaxes.pipeline.schedules:Plan.from_orders", "fields": good["fields"]},
    }
    got = forged(**bad).get(list(bad))
    for name, value in got.items():
        assert isinstance(value, Opaque) and not isinstance(value, Plan), name
    assert "1B0 is missing" in value_why(got["missing"])
    assert "runs before" in value_why(got["too_early"])
    assert "Plan.slots is not plain data" in value_why(got["not_an_action"])
    assert "Plan.slots is not plain data" in value_why(got["huge_stage"])   # its Action was refused first
    assert "Plan.name must be a str" in value_why(got["name"])
    assert no_abort == []


def test_an_opaque_fails_every_check_it_meets_and_says_why():
    value = Answers(None).decode({"__opaque__": "ToyTransformer"})
    assert repr(value).startswith("<ToyTransformer from the notebook")
    for check in (bool, float, int, len, iter, lambda v: v == 1, lambda v: v < 1, lambda v: v + 1,
                  lambda v: v[0], lambda v: 1 in v, lambda v: v()):
        with pytest.raises(AssertionError, match="ToyTransformer from the notebook cannot be checked"):
            check(value)
    with pytest.raises(AttributeError, match="has no 'shape'"):
        _ = value.shape
    with pytest.raises(AttributeError):
        value.why = "changed"
    assert {value: 1}[value] == 1   # hashable by identity: it may be a dict's key
