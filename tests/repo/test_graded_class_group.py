"""Every test file that reads the suite's one graded class is in its xdist group (tests/conftest.py):
a reader on another pytest worker would grade the whole class a second time there."""
import ast
from pathlib import Path

from conftest import GRADED_CLASS

TESTS = Path(__file__).resolve().parent.parent


def _readers() -> set[str]:
    """The test files with a function that takes `graded_class` as a parameter (a test or a fixture)."""
    found = set()
    for path in TESTS.rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and "graded_class" in [a.arg for a in node.args.args]:
                found.add(path.name)
    return found


def test_every_reader_of_the_graded_class_is_in_its_group():
    readers = _readers()
    assert readers, "no test reads graded_class: has it been renamed?"
    assert readers <= set(GRADED_CLASS), f"add {sorted(readers - set(GRADED_CLASS))} to conftest.GRADED_CLASS"
    assert set(GRADED_CLASS) <= readers, f"{sorted(set(GRADED_CLASS) - readers)} no longer read it: take them out"
