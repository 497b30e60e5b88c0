"""Every committed notebook is clean: no outputs, no execution counts, the
kernelspec (and, where students open it, the language_info JupyterLab would write)
as its only metadata besides Colab's fold state, and the install cell right under its title."""
import json
import subprocess
from pathlib import Path

import pytest

from autograder.apps.release import KERNELSPEC, language_info
from threeaxes.course import INSTALL_CELL
from threeaxes.sections import colab_folded

ROOT = Path(__file__).resolve().parents[2]


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
def test_notebook_has_no_outputs_and_only_the_kernels_metadata(path):
    nb = json.loads((ROOT / path).read_text())
    meta = dict(nb["metadata"])
    # Colab's fold state may be there, and then only as the "deeper" tags make it
    # (tests/repo/test_colab.py requires it where a notebook has optional sections)
    if "colab" in meta:
        assert meta.pop("colab") == {"collapsed_sections": colab_folded(nb)}, (
            f"{path}: colab metadata is not the fold state of its 'deeper' sections; "
            f"run python -m threeaxes.sections {path}")
    if path.startswith("source/"):
        assert list(meta) == ["kernelspec"], f"{path}: metadata keys {list(nb['metadata'])}"
        assert meta["kernelspec"]["name"] == "python3"
    else:   # what a student opens: what JupyterLab writes on opening it is there already
        assert meta == {"kernelspec": KERNELSPEC, "language_info": language_info()}, (
            f"{path}: its metadata is not what JupyterLab would write on opening it; run `make release`")
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [], f"{path}: cell {i} has outputs"
            assert cell["execution_count"] is None, f"{path}: cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_the_notebook_opens_on_its_title_with_the_install_cell_under_it(path):
    cells = json.loads((ROOT / path).read_text())["cells"]
    assert cells[0]["cell_type"] == "markdown" and "".join(cells[0]["source"]).startswith("# "), (
        f"{path}: the first cell is not the title (a markdown cell opening with '# ')")
    assert "".join(cells[1]["source"]) == INSTALL_CELL, (
        f"{path}: the cell under the title is not threeaxes.course.INSTALL_CELL; run `make release`")
