"""How tests/conftest.py shares the suite out between pytest workers: every file that reads the one
graded class in its xdist group (a reader on another worker would grade the whole class a second
time there), and the long files it runs first still there by those names."""
import ast
import importlib.util
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
# tests/conftest.py by its path: `from conftest import` finds whichever conftest.py pytest imported last
_spec = importlib.util.spec_from_file_location("suite_conftest", TESTS / "conftest.py")
assert _spec is not None and _spec.loader is not None
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
GRADED_CLASS, LONG_FIRST = _conftest.GRADED_CLASS, _conftest.LONG_FIRST


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


def test_the_long_files_run_first_are_test_files_of_the_suite():
    names = {path.name for path in TESTS.rglob("test_*.py")}
    assert not set(LONG_FIRST) - names, f"renamed or gone: {sorted(set(LONG_FIRST) - names)}; mend conftest.LONG_FIRST"
    assert len(set(LONG_FIRST)) == len(LONG_FIRST), "a file is named twice in conftest.LONG_FIRST"
