"""Test cells judged outside the student's kernel: the wire, the judge, the sandbox.

The wire and the judge are exercised in one process (`LocalKernel`, the same
code path without the sandbox); the sandbox with a real kernel host.
"""
import json
import os
import sys
from pathlib import Path

import pytest
import torch

from autograder.judging.judge import judge_cell, notebook_names
from threeaxes.grading.wire import Answers, LocalKernel, Opaque, is_remote
from threeaxes.toy import ToyConfig, ToyTransformer


@pytest.fixture
def notebook():
    """A student's namespace, and the grader's view of it."""
    namespace = {"__name__": "__main__"}
    return namespace, Answers(LocalKernel(namespace))


def outcome(outputs):
    errors = [o for o in outputs if o["output_type"] == "error"]
    return f"{errors[0]['ename']}: {errors[0]['evalue']}" if errors else "pass"


# -- what crosses the wire --------------------------------------------------------------------
def test_plain_values_tensors_and_dataclasses_arrive_as_values(notebook):
    namespace, answers = notebook
    namespace.update(n=3, x=2.5, s="dp", none=None, items=[1, (2, 3)], pair=(4, "a"),
                     table={("dp", 2): {1, 2}}, t=torch.arange(6, dtype=torch.float64).reshape(2, 3),
                     cfg=ToyConfig(d_model=16, n_heads=2), dtype=torch.bfloat16, module=torch)
    got = answers.get(namespace)
    assert got["items"] == [1, (2, 3)] and type(got["items"][1]) is tuple
    assert got["table"] == {("dp", 2): {1, 2}}
    assert torch.equal(got["t"], namespace["t"]) and got["t"].dtype == torch.float64
    assert type(got["cfg"]) is ToyConfig and got["cfg"] == namespace["cfg"]
    assert got["dtype"] is torch.bfloat16
    assert isinstance(got["module"], Opaque)   # a module is no answer: names are never resolved
    assert {k: got[k] for k in ("n", "x", "s", "none", "pair")} == {
        "n": 3, "x": 2.5, "s": "dp", "none": None, "pair": (4, "a")}


def test_library_and_student_functions_alike_are_called_in_the_kernel(notebook):
    """No callable crosses: a library's class or function is a Remote like the student's own
    (run by the grader, a library function would be the grader's full copy)."""
    namespace, answers = notebook
    exec("from threeaxes.toy import ToyTransformer\n"
         "def double(v):\n    return [2 * x for x in v]\n"
         "def broken(v):\n    raise ValueError(f'no {v}')\n"
         "class MyError(ValueError):\n    pass\n"
         "def picky(v):\n    raise MyError('odd')\n", namespace)
    got = answers.get(["ToyTransformer", "double", "broken", "picky"])
    assert is_remote(got["ToyTransformer"]) and got["ToyTransformer"] is not ToyTransformer
    assert got["ToyTransformer"].__module__ == "threeaxes.toy"   # what the kernel says, a label only
    model = got["ToyTransformer"](ToyConfig(d_model=16, n_heads=2))   # built in the kernel
    assert isinstance(model, Opaque) and type(model).__name__ == "ToyTransformer"
    assert is_remote(got["double"]) and got["double"]([1, 2]) == [2, 4]
    with pytest.raises(ValueError, match="no 7"):
        got["broken"](7)
    with pytest.raises(ValueError, match="MyError: odd"):   # a subclass arrives as its builtin base
        got["picky"](1)


def test_objects_that_are_not_data_arrive_as_opaque_and_fail_checks(notebook):
    namespace, answers = notebook
    class Always:   # the classic attack: equal to everything
        def __eq__(self, other):
            return True
    namespace.update(model=ToyTransformer(ToyConfig(d_model=16, n_heads=2)), sneaky=Always(),
                     gen=(i for i in range(3)))
    got = answers.get(["model", "sneaky", "gen", "undefined"])
    assert all(isinstance(got[k], Opaque) for k in ("model", "sneaky", "gen"))
    assert type(got["model"]).__name__ == "ToyTransformer"
    with pytest.raises(AssertionError, match="Always from the notebook cannot be checked"):
        got["sneaky"] == 1   # noqa: B015 - the comparison itself fails
    assert "undefined" not in got


def test_a_kernel_that_says_anything_can_only_send_data():
    """A tampered kernel's reply is parsed as JSON and rebuilt from trusted code: an
    import outside the trusted packages, or an unknown tag, becomes Opaque."""
    answers = Answers(run_code=None)
    for forged in ({"__import__": "os:system"}, {"__module__": "subprocess"},
                   {"__dataclass__": "os:environ", "fields": {}}, {"__eval__": "1"}):
        assert isinstance(answers.decode(forged), Opaque), forged


def test_a_silent_or_garbled_kernel_fails_the_test_cell():
    for printed in (None, "", "no nonce here"):
        outputs = judge_cell("assert answer == 1", Answers(lambda code, timeout, p=printed: p))
        assert outcome(outputs).startswith("KernelGone"), printed


# -- the judge ---------------------------------------------------------------------------------
def test_the_judge_runs_visible_and_hidden_parts_and_reports_like_a_kernel(notebook):
    namespace, answers = notebook
    namespace["bubble"] = 0.25
    cell = ("from threeaxes.grading import assert_close\n"
            "assert_close(bubble, 0.25, name='bubble')\nprint('right')\n"
            "### BEGIN HIDDEN TESTS\nassert_close(bubble, 3 / 12, name='bubble')\n### END HIDDEN TESTS")
    out = judge_cell(cell, answers)
    assert outcome(out) == "pass" and out[0]["text"] == "right\n"
    namespace["bubble"] = 0.3
    assert outcome(judge_cell(cell, answers)) == "AssertionError: bubble=0.3 is not right."
    partial = judge_cell("points = 1.5\npoints", answers)
    assert partial[-1]["output_type"] == "execute_result" and partial[-1]["data"]["text/plain"] == "1.5"


def test_names_a_cell_reads_include_those_it_binds_only_later():
    assert notebook_names("print(f(x))\nimport math\nx = math.pi") == ["f", "math", "x"]


# -- the sandbox -------------------------------------------------------------------------------
sandboxed = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces are Linux only")


@pytest.fixture(scope="module")
def kernel():
    from autograder.runtime.kernel_session import KernelSession

    with KernelSession(isolate=True, timeout=60) as session:
        if not session.sandbox.get("namespaces"):
            pytest.skip(f"this machine refuses namespaces: {session.sandbox.get('refused')}")
        yield session


def printed(kernel, code, timeout=60):
    outputs = kernel.run_cell(code, timeout)
    return "".join(o.get("text", "") for o in outputs) + "".join(
        f"{o['ename']}: {o['evalue']}" for o in outputs if o["output_type"] == "error")


@pytest.mark.slow
@sandboxed
def test_the_kernel_sees_no_course_no_home_and_no_network(kernel):
    """Its root holds the system, the Python environment and the package, nothing else:
    not the course, not a home folder, not another copy of the course elsewhere."""
    from autograder.runtime.kernel_session import ROOT
    from autograder.runtime.mounts import SYSTEM

    def listing(path):
        code = f"import os, json; print(json.dumps(os.listdir({str(path)!r})))"
        return set(json.loads(printed(kernel, code)))

    kept = [sys.prefix, sys.base_prefix, str(ROOT / "threeaxes")]
    assert listing("/") <= {p.strip("/") for p in SYSTEM} | {"tmp", "proc", "dev"} | {p.split("/")[1] for p in kept}
    assert listing(ROOT) == {p for p in (".venv", "threeaxes") if str(ROOT / p) in " ".join(kept)}
    own = {"work", "home"} if ROOT.parent == Path("/tmp") else set()   # a clone under /tmp: the kernel's own
    assert not (listing(ROOT.parent) - {ROOT.name} - own - {p.split("/")[2] for p in kept if p.count("/") > 1})
    assert "Read-only file system" in printed(kernel, f"open({str(ROOT / 'threeaxes' / 'x.py')!r}, 'w')")
    assert "Read-only file system" in printed(kernel, "open('/usr/planted', 'w')")
    reached = printed(kernel, "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), 2)\n"
                              "    print('reached')\nexcept OSError as e:\n    print('refused', e)")
    assert reached.startswith("refused")


@pytest.mark.slow
@sandboxed
def test_ranks_still_launch_in_the_sandbox(kernel):
    code = "from threeaxes.launch import launch\ndef rank(r, n):\n    return r * 10\nprint(launch(rank, 2))"
    assert printed(kernel, code).strip().splitlines()[-1] == "[0, 10]"


@pytest.mark.slow
@sandboxed
def test_a_kernel_that_exits_stops_the_session_and_leaves_no_process():
    from autograder.runtime.kernel_session import KernelSession

    with KernelSession(isolate=True, timeout=30) as session:
        host = session.host._proc.pid
        assert "KernelStopped" in printed(session, "import os\nos._exit(3)") + printed(session, "1")
        assert session.answers.run_code("print(1)", 5) is None
    with pytest.raises(ProcessLookupError):
        os.kill(host, 0)


@pytest.mark.slow
@sandboxed
def test_a_cell_past_its_time_is_interrupted_and_one_that_ignores_it_ends_the_kernel():
    from autograder.runtime.kernel_session import KernelSession

    with KernelSession(isolate=True, timeout=30) as session:
        caught = "import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('interrupted')"
        assert printed(session, caught, timeout=2) == (
            "interrupted\nTimeoutError: the cell ran past the grading time limit")
        assert printed(session, "print('still here')") == "still here\n"
        # ignores the interrupt (SIG_IGN): ended at once, without the grace (asleep, so no core is
        # burnt; the class's attack that spins meanwhile is tests/grading_attacks.py's loops-forever)
        deaf = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(600)"
        assert "TimeoutError" in "".join(str(o) for o in session.run_cell(deaf, 2))
        assert "KernelStopped" in printed(session, "print('never')")


@pytest.mark.slow
@sandboxed
def test_a_cell_that_catches_the_interrupt_and_goes_on_ends_the_kernel_after_the_grace():
    from autograder.runtime.kernel_session import KernelSession

    with KernelSession(isolate=True, timeout=30) as session:
        goes_on = ("import time\nwhile True:\n    try:\n        time.sleep(600)\n"
                   "    except KeyboardInterrupt:\n        pass")
        assert "TimeoutError" in "".join(str(o) for o in session.run_cell(goes_on, 2))
        assert "KernelStopped" in printed(session, "print('never')")


def test_the_host_sees_whether_a_kernel_ignores_the_interrupt():
    import signal
    import subprocess

    from autograder.runtime.forked_kernel import Kernel

    # each sets its own handling: a child keeps an ignored SIGINT of its parent's (a shell's background job)
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN if sys.argv[1] == 'ignore' else signal.default_int_handler)\n"
            "print('ready', flush=True)\ntime.sleep(60)")
    for how, ignores in (("ignore", True), ("handle", False)):
        proc = subprocess.Popen([sys.executable, "-c", code, how], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline() == "ready\n"
            kernel = Kernel(None, sys.stdout, None, namespaced=False)
            kernel.kernel_pid = proc.pid
            assert kernel._ignores(signal.SIGINT) is ignores, how
        finally:
            proc.kill()
            proc.wait()


def test_numpy_scalars_and_arrays_arrive_as_tensors(notebook):
    import numpy as np

    namespace, answers = notebook
    namespace.update(scalar=np.float64(0.25), array=np.arange(4).reshape(2, 2))
    got = answers.get(["scalar", "array"])
    assert got["scalar"].shape == () and got["scalar"].item() == 0.25
    assert got["array"].tolist() == [[0, 1], [2, 3]]
