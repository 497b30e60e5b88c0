"""The house a newcomer walks (CONTRIBUTING.md, "The map"): one folder per axis, one for
launching, and modules small enough to read in one sitting."""
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "threeaxes"
MAX_LINES = 350


def test_one_folder_per_axis_and_one_for_launching():
    for folder in ("data_parallel", "tensor_parallel", "pipeline", "sharding", "cost", "launch",
                   "grading", "widgets"):
        assert (PACKAGE / folder / "__init__.py").is_file(), f"threeaxes/{folder}/ is not a package"
    flat = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    # only the small shared modules stay at the top (the layout, toy model, collectives, trace, ...)
    assert not [name for name in flat if name.startswith(("data_parallel", "launch", "_launch", "_prestart"))], flat


def test_no_module_is_over_350_lines():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"split these along a seam a reader can name (at most {MAX_LINES} lines): {long}"
