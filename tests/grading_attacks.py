"""Submissions that try to grade themselves instead of answering.

Each is the untouched release with one cell of attack code put first (after
the install cell); `grading_harness` submits each to the drops in `ATTACKED`
and expects exactly what a blank submission scores: 0 on every test cell.
Before test cells were judged outside the kernel (autograder/judge.py), the
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
}


def attacks_on(drop_name: str) -> list[str]:
    chosen = ATTACKED.get(drop_name, ())
    return list(ATTACKS) if chosen == "all" else list(chosen)
