"""threeaxes.launch.prestart: the forkserver starts in the background when threeaxes is imported.

What is checked is structure, not timing: the server is running before the first
launch is called, the ranks of that launch fork from exactly that server, no second
server appears (not even when a launch races the prestart), and nothing starts when
opted out, outside a kernel, or inside the forkserver and its ranks.

Each scenario runs in a fresh Python (or a real Jupyter kernel): the decision is
taken once, when threeaxes is first imported in a process.
"""

import json
import sys

import pytest
from launch_helpers import ROOT, run_child

from threeaxes.launch import prestart


# ---- the decision, in this process ------------------------------------------------------
def test_outside_a_kernel_it_waits_for_the_first_launch():
    assert prestart.skip_reason({}) == "not in a Jupyter kernel (THREEAXES_PRESTART=1 starts it anyway)"
    assert prestart.skip_reason({"THREEAXES_PRESTART": "auto"}).startswith("not in a Jupyter kernel")


def test_forced_on_it_starts_in_a_plain_process():
    assert prestart.skip_reason({"THREEAXES_PRESTART": "1"}) is None


@pytest.mark.parametrize("value", ["0", "off", "false", " No "])
def test_opting_out_wins_even_in_a_kernel(monkeypatch, value):
    _pretend_kernel(monkeypatch)
    assert prestart.skip_reason({}) is None  # the kernel alone would start it
    assert prestart.skip_reason({"THREEAXES_PRESTART": value}).startswith("opted out")


def test_in_a_kernel_like_condition_it_starts(monkeypatch):
    _pretend_kernel(monkeypatch)
    assert prestart.skip_reason({}) is None


def test_a_terminal_ipython_is_not_a_kernel(monkeypatch):
    _pretend_kernel(monkeypatch, kernel=None)
    assert prestart.skip_reason({}).startswith("not in a Jupyter kernel")


def test_under_torchrun_nothing_is_started():
    assert prestart.skip_reason({"THREEAXES_PRESTART": "1", "RANK": "0", "WORLD_SIZE": "2"}) == (
        "under torchrun: launch spawns no processes")


def test_an_unknown_setting_warns_with_the_valid_ones_and_means_auto():
    with pytest.warns(UserWarning, match=r"use 0 \(never\), 1 \(always\) or auto"):
        reason = prestart.skip_reason({"THREEAXES_PRESTART": "sometimes"})
    assert reason.startswith("not in a Jupyter kernel")


def test_without_a_forkserver_nothing_is_started(monkeypatch):
    import multiprocessing

    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    assert prestart.skip_reason({"THREEAXES_PRESTART": "1"}) == "this platform has no forkserver"
    assert prestart.forkserver_context().get_start_method() == "spawn"


_A_KERNEL = object()


def _pretend_kernel(monkeypatch, kernel=_A_KERNEL):
    class Shell:
        pass

    shell = Shell()
    shell.kernel = kernel
    fake = type(sys)("IPython")
    fake.get_ipython = lambda: shell
    monkeypatch.setitem(sys.modules, "IPython", fake)


# ---- fresh processes ----------------------------------------------------------------------
@pytest.mark.slow  # a fresh Python and torch import
def test_kernel_like_import_starts_one_server_and_the_first_launch_uses_it():
    run = run_child("""
        import multiprocessing.forkserver as fs
        import threeaxes
        from threeaxes.launch import prestart
        assert prestart.wait(30)
        server_before = fs._forkserver._forkserver_pid      # running before launch is called
        from threeaxes.launch import launch
        ranks = launch(ppid_of_rank, 2)
        print(json.dumps({"decision": prestart.decision, "error": repr(prestart.error),
                          "server_before": server_before, "server_after": fs._forkserver._forkserver_pid,
                          "servers": forkservers_under(os.getpid()), "ranks": ranks}))
    """, setting=None, kernel_like=True)
    assert run["decision"] == "started" and run["error"] == "None"
    assert run["server_before"] is not None
    assert run["server_after"] == run["server_before"]
    assert run["servers"] == [run["server_before"]]  # one server, and it started no server of its own
    assert [r["ppid"] for r in run["ranks"]] == [run["server_before"]] * 2  # forked from it
    for rank in run["ranks"]:
        # The forkserver imported threeaxes (PRELOAD) and declined (it is no kernel);
        # ranks fork with that module, and would decline on their own even when forced.
        assert rank["decision"].startswith("not in a Jupyter kernel")
        assert rank["reason_if_forced"] == "inside a multiprocessing child (a rank)"


@pytest.mark.slow
def test_opted_out_kernel_starts_nothing_until_launch():
    run = run_child("""
        import multiprocessing.forkserver as fs
        import threeaxes
        from threeaxes.launch import prestart
        time.sleep(0.5)
        before = {"decision": prestart.decision, "thread": prestart._thread is None,
                  "server": fs._forkserver._forkserver_pid, "servers": forkservers_under(os.getpid())}
        from threeaxes.launch import launch
        ranks = launch(ppid_of_rank, 2)
        print(json.dumps({**before, "servers_after": forkservers_under(os.getpid()), "ranks": ranks}))
    """, setting="0", kernel_like=True)
    assert run["decision"] == "opted out (THREEAXES_PRESTART=0)"
    assert run["thread"] and run["server"] is None and run["servers"] == []
    assert len(run["servers_after"]) == 1  # launch starts it, as before
    assert {r["ppid"] for r in run["ranks"]} == set(run["servers_after"])


@pytest.mark.slow
def test_a_launch_racing_the_prestart_shares_its_server():
    # Forced on (THREEAXES_PRESTART=1), which the forkserver inherits: only its own
    # guard keeps it from starting a server of its own while it imports threeaxes.
    # Hold the forkserver's lock until both the prestart thread and a launch are waiting
    # for it, then let them race: whichever wins starts the server, the other must use it.
    run = run_child("""
        import threading
        import multiprocessing.forkserver as fs
        import torch, cloudpickle  # so the launch below reaches the lock quickly
        fs._forkserver._lock.acquire()
        import threeaxes
        from threeaxes.launch import launch, prestart
        result = {}
        racer = threading.Thread(target=lambda: result.update(ranks=launch(ppid_of_rank, 2)))
        racer.start()
        time.sleep(1.0)
        prestart_waiting = prestart._thread.is_alive()
        fs._forkserver._lock.release()
        racer.join(120)
        assert prestart.wait(30)
        print(json.dumps({"prestart_waiting": prestart_waiting, "racer_done": not racer.is_alive(),
                          "error": repr(prestart.error), "server": fs._forkserver._forkserver_pid,
                          "servers": forkservers_under(os.getpid()), **result}))
    """, setting="1")
    assert run["prestart_waiting"] and run["racer_done"] and run["error"] == "None"
    assert run["servers"] == [run["server"]]
    assert [r["ppid"] for r in run["ranks"]] == [run["server"]] * 2
    assert [r["decision"] for r in run["ranks"]] == ["inside the forkserver"] * 2


@pytest.mark.slow
def test_a_plain_python_starts_nothing_by_default():
    run = run_child("""
        import threeaxes
        from threeaxes.launch import prestart
        time.sleep(0.5)
        print(json.dumps({"decision": prestart.decision, "servers": forkservers_under(os.getpid()),
                          "heavy": [m for m in ("IPython", "multiprocessing", "torch") if m in sys.modules]}))
    """, setting=None, timeout=60)
    assert run["decision"].startswith("not in a Jupyter kernel")
    assert run["servers"] == []
    assert run["heavy"] == []  # importing threeaxes stays light where it does nothing


@pytest.mark.slow  # a real Jupyter kernel
def test_in_a_real_kernel_the_server_runs_before_the_first_launch(monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.delenv(prestart.ENV_VAR, raising=False)
    cells = [
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "import threeaxes\nfrom threeaxes.launch import prestart",
        "import os, json, multiprocessing.forkserver as fs\n"
        "assert prestart.wait(30)\n"
        "server = fs._forkserver._forkserver_pid\n"
        "from threeaxes.launch import launch\n"
        "ppids = launch(lambda rank, world_size: os.getppid(), 2)\n"
        "print(json.dumps({'decision': prestart.decision, 'server': server, 'ppids': ppids}))",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    text = "".join(o.get("text", "") for o in nb.cells[1].outputs if o.get("name") == "stdout")
    run = json.loads(text.strip().splitlines()[-1])
    assert run["decision"] == "started"
    assert run["server"] is not None and run["ppids"] == [run["server"]] * 2


# ---- a kernel whose notebook never launches ------------------------------------------------

def _notebook(path, *sources):
    import nbformat

    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources]), path)
    return path


def test_a_kernel_whose_notebook_never_launches_starts_no_server(monkeypatch, tmp_path):
    _pretend_kernel(monkeypatch)
    monkeypatch.chdir(tmp_path)
    sizing = _notebook(tmp_path / "sizing.ipynb", "import threeaxes\nfrom threeaxes.cost import memory")
    assert prestart.skip_reason({}) == "sizing.ipynb never launches ranks (THREEAXES_PRESTART=1 starts it anyway)"
    assert prestart.skip_reason({"THREEAXES_PRESTART": "1"}) is None
    # one notebook of the folder that launches is enough, as is the one jupyter-server names
    _notebook(tmp_path / "ranks.ipynb", "from threeaxes.launch import launch")
    assert prestart.skip_reason({}) is None
    assert prestart.skip_reason({"JPY_SESSION_NAME": str(sizing)}).startswith("sizing.ipynb never launches")
    (tmp_path / "ranks.ipynb").write_text("not JSON")     # unreadable: started, as before
    assert prestart.skip_reason({}) is None


def test_the_course_notebooks_that_never_launch_are_those_the_rule_finds():
    # the notebooks that, run top to bottom, never import threeaxes.launch (measured, issue 45)
    found = {p.stem for p in sorted(ROOT.glob("source/*/*.ipynb")) + sorted(ROOT.glob("notebooks/*.ipynb"))
             if not prestart._names_launch(p)}
    assert found == {"drop10-oom-at-step-4000", "drop11-slower-bigger-cluster", "drop13-size-30b-on-32",
                     "drop14-defend-70b-on-64", "calculators", "glossary"}
