"""Every committed notebook is clean: no outputs, no execution counts,
kernelspec-only metadata, and the install cell first."""
import json
import subprocess
from pathlib import Path

import pytest

from threeaxes.course import INSTALL_CELL

ROOT = Path(__file__).resolve().parent.parent


def committed_notebooks():
    listed = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=ROOT, capture_output=True, text=True)
    paths = listed.stdout.split() if listed.returncode == 0 else []
    # Outside git (an unpacked archive), fall back to the folders notebooks live in.
    return paths or [str(p.relative_to(ROOT)) for d in ("notebooks", "source", "release")
                     for p in sorted((ROOT / d).rglob("*.ipynb"))]


NOTEBOOKS = committed_notebooks()


def test_there_are_notebooks_to_check():
    assert any(p.startswith("notebooks/") for p in NOTEBOOKS)
    assert any(p.startswith("source/") for p in NOTEBOOKS)
    assert any(p.startswith("release/") for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_notebook_has_no_outputs_and_kernelspec_only_metadata(path):
    nb = json.loads((ROOT / path).read_text())
    assert list(nb["metadata"]) == ["kernelspec"], f"{path}: metadata keys {list(nb['metadata'])}"
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [], f"{path}: cell {i} has outputs"
            assert cell["execution_count"] is None, f"{path}: cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_first_cell_is_the_install_cell(path):
    nb = json.loads((ROOT / path).read_text())
    assert "".join(nb["cells"][0]["source"]) == INSTALL_CELL, (
        f"{path}: the first cell is not threeaxes.course.INSTALL_CELL; run `make release`")
