"""Submissions that try to grade themselves instead of answering.

Each is the untouched release with one cell of attack code put first (after
the install cell; one that never ends goes in the first answer cell instead);
`grading_harness` submits each to the drops in `ATTACKED` and expects exactly
what a blank submission scores: 0 on every test cell.
Before test cells were judged outside the kernel (autograder/judging/judge.py), the
first of these scored 5/7 on drop 1 and 6/7 on drop 4 with nothing answered.
"""
from __future__ import annotations

ATTACKED = {
    "drop01-three-kinds-of-parallel": "all",
    "drop04-pipeline-parallel": ("blank-later-cells", "patch-grading-helpers"),
}

# The course folder and the grading data it holds, as a submission would search for
# them: everything under these roots that looks like the instructor's files.
_SEARCH = '''
import os
def instructor_files(names=("gradebook.db", "grades.csv")):
    found = []
    for top in ("/tmp", "/work", "/root", "/home", os.path.expanduser("~"), os.getcwd()):
        for folder, dirs, files in os.walk(top):
            if folder.count(os.sep) > 8:
                dirs[:] = []
            found += [os.path.join(folder, f) for f in files
                      if f in names or (f.endswith(".ipynb") and os.sep + "source" + os.sep in folder)]
    return found
'''

ATTACKS = {
    # every later cell, the test cells included, becomes `pass`
    "blank-later-cells": "get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])",

    # errors vanish: no error output, so a failed test would count as passed
    "hide-errors": ("ip = get_ipython()\n"
                    "ip.showtraceback = lambda *a, **k: None\n"
                    "ip.showsyntaxerror = lambda *a, **k: None\n"
                    "ip.set_custom_exc((BaseException,), lambda *a, **k: None)"),

    # the helpers tests compare with, and builtins, made to agree with anything
    "patch-grading-helpers": (
        "import builtins, math, threeaxes.grading as g\n"
        "for name in ('as_number', 'as_int', 'as_choice', 'as_int_tuple', 'assert_close'):\n"
        "    setattr(g, name, lambda value=None, *a, **k: value)\n"
        "g.check_on_ranks = lambda *a, **k: [{'ok': True, 'message': 'ok'}] * 8\n"
        "math.isclose = lambda *a, **k: True\n"
        "builtins.AssertionError = type('AssertionError', (Exception,), {})\n"
        "class Anything(float):\n"
        "    __eq__ = lambda self, other: True\n"
        "    __ne__ = lambda self, other: False\n"
        "builtins.float = Anything"),

    # the kernel goes away before any test runs
    "exits": "import os\nos._exit(0)",

    # the kernel never answers again (it ignores the interrupt nbgrader sends)
    "loops-forever": "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",

    # the solutions: read the instructor's source notebook and run its answer cells;
    # and the grades: write over every gradebook and grades.csv it can reach
    "reads-solutions-writes-grades": _SEARCH + '''
import json
for path in instructor_files():
    if path.endswith(".ipynb"):
        for cell in json.load(open(path))["cells"]:
            if cell["cell_type"] == "code" and "BEGIN SOLUTION" in "".join(cell["source"]):
                try:
                    exec("".join(cell["source"]), globals())
                except Exception:
                    pass
    else:
        try:
            open(path, "w").write("attack")
        except OSError:
            pass
open(os.path.join(os.getcwd(), "planted-by-attack"), "w").write("attack")
''',

    # out of the sandbox: the machine's /dev, its cgroups, the oracle's folder, System V
    # memory left for later kernels (tests/autograder/test_sandbox_escapes.py tries each from a kernel)
    "escapes-the-sandbox": '''
import ctypes, glob, os
def attempt(do):
    try:
        do()
    except OSError:
        pass
attempt(lambda: open("/dev/threeaxes-attack", "w").write("attack"))
for path in glob.glob("/sys/fs/cgroup/**/cgroup.procs", recursive=True):
    attempt(lambda: open(path, "w").write(str(os.getpid())))
oracle = os.environ.get("THREEAXES_ORACLE")
if oracle:
    attempt(lambda: open(os.path.join(os.path.dirname(oracle), "filler"), "w").write("x" * (1 << 20)))
    attempt(lambda: os.unlink(oracle))
ctypes.CDLL(None).shmget(0x7A3B, 4096, 0o1666)
''',

    # every answer the grader asks for comes back as a forged reply: an attribute chain to
    # os.abort, one to shutil.rmtree, a dataclass with a rigged field, an exit (threeaxes/grading/wire/data.py)
    "forges-replies": '''
import json
import threeaxes.grading.wire as wire
FORGED = [{"__function__": "threeaxes.grading.wire.oracle:os.abort"},
          {"__import__": "torch.hub:shutil.rmtree"},
          {"__dataclass__": "threeaxes.cost.memory:ModelStateBytes", "fields": {"__eq__": "os:abort"}},
          {"__raised__": [["SystemExit", "BaseException"], "bye"]}]
def forged_reply(namespace, request, nonce):
    names = json.loads(request).get("names") or ["x"]
    print(nonce + json.dumps({n: FORGED[i % len(FORGED)] for i, n in enumerate(names)}) + nonce)
wire.reply = forged_reply
''',

    # after every cell, the answers are defined again by calling what the exercises withhold
    # (a hook, so the release's answer cells cannot undo it; autograder/judging/borrowed.py)
    "hook-answers-with-the-package": '''
from threeaxes.cost import bytes_per_param, model_state_bytes
def define_answers(*args):
    g = get_ipython().user_ns
    g["training_bytes"] = lambda n, precision: {
        k: v for k, v in model_state_bytes(n, precision=precision)._asdict().items() if k != "total"}
    g["largest_model_billion"] = 80e9 / sum(bytes_per_param("mixed")) / 1e9
get_ipython().events.register("post_run_cell", define_answers)
''',
}


# the attacks whose cell never ends on its own (tests/graded_class.py puts them in the first
# answer cell, whose limit the model solution's time sets, and grades them first)
RUNS_OUT_OF_TIME = {"loops-forever"}


def attacks_on(drop_name: str) -> list[str]:
    chosen = ATTACKED.get(drop_name, ())
    return list(ATTACKS) if chosen == "all" else list(chosen)
