"""The house a newcomer walks (CONTRIBUTING.md, "The map"): one folder per axis, one for
launching, and modules small enough to read in one sitting, anywhere in the project."""
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "threeaxes"
MAX_LINES = 350
# every Python file of the project: the two packages, the hub's config, benchmarks, tests
FOLDERS = ("threeaxes", "autograder", "hub", "benchmarks", "tests")


@cache
def line_counts() -> dict[str, int]:
    files = [p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts]
    files += list(ROOT.glob("*.py"))
    return {p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines()) for p in files}


def test_one_folder_per_axis_and_one_for_launching():
    for folder in ("data_parallel", "tensor_parallel", "pipeline", "sharding", "cost", "launch",
                   "grading", "widgets"):
        assert (PACKAGE / folder / "__init__.py").is_file(), f"threeaxes/{folder}/ is not a package"
    flat = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    # only the small shared modules stay at the top (the layout, toy model, collectives, trace, ...)
    assert not [name for name in flat if name.startswith(("data_parallel", "launch", "_launch", "_prestart"))], flat


def test_the_count_sees_every_package():
    counted = line_counts()
    for module in ("threeaxes/dims.py", "autograder/apps/hub/__init__.py", "tests/repo/test_package_layout.py",
                   "hub/jupyterhub_config.py", "nbgrader_config.py"):
        assert module in counted, module
    assert not any(".venv" in name or "__pycache__" in name for name in counted)


def test_no_module_is_over_350_lines():
    long = {name: n for name, n in sorted(line_counts().items()) if n > MAX_LINES}
    assert not long, f"split these along a seam a reader can name (at most {MAX_LINES} lines): {long}"
