"""The cell under the title of every released notebook installs `threeaxes` where it is
missing (Colab, a bare kernel). Run here for real: a fresh virtual environment
that can see the pinned dependencies (pip among them) but not the package, the install
cell executed in it against a local copy of the repository."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from threeaxes.course import INSTALL_CELL, PIP_SPEC, REPO_URL

ROOT = Path(__file__).resolve().parents[2]


def test_install_cell_takes_the_repository_url_from_course_py():
    assert REPO_URL in PIP_SPEC and PIP_SPEC in INSTALL_CELL
    released = sorted((ROOT / "release").glob("*/*.ipynb"))
    assert released
    for nb in released:
        under_title = json.loads(nb.read_text())["cells"][1]
        assert "".join(under_title["source"]) == INSTALL_CELL, nb


@pytest.mark.slow
def test_install_cell_installs_the_package_into_a_fresh_environment(tmp_path):
    repo_copy = tmp_path / "repo"
    shutil.copytree(ROOT, repo_copy, ignore=shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", "*.egg-info", "build", "submitted", "autograded", "feedback",
        ".mypy_cache", ".ruff_cache", ".hypothesis", ".pytest_cache"))   # caches no clone of the repository has
    env = tmp_path / "env"
    # --without-pip: pip, like the dependencies, is seen through the .pth line below (ensurepip
    # would spend seconds installing a pip and an old setuptools that pip then replaces)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    fresh_python = env / "bin" / "python"
    # The fresh environment sees the already-installed dependencies (torch is a
    # multi-GB download) and pip through a .pth line, but not the package itself.
    purelib = subprocess.run([str(fresh_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "course_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    workdir = tmp_path / "kernel-cwd"
    workdir.mkdir()
    run_env = {**os.environ, "THREEAXES_PIP_SPEC": str(repo_copy), "PYTHONPATH": "",
               "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_COMPILE": "1"}   # bytecode: made on import

    missing = subprocess.run([str(fresh_python), "-c", "import threeaxes"], cwd=workdir, env=run_env,
                             capture_output=True, text=True)
    assert missing.returncode != 0, "threeaxes should not be importable before the install cell runs"

    subprocess.run([str(fresh_python), "-c", INSTALL_CELL], cwd=workdir, env=run_env, check=True,
                   timeout=600)

    where = subprocess.run([str(fresh_python), "-c", "import threeaxes.toy, threeaxes; print(threeaxes.__file__)"],
                           cwd=workdir, env=run_env, check=True, capture_output=True, text=True).stdout
    assert Path(where.strip()).is_relative_to(env), where


def _pinned(path: Path) -> dict[str, str]:
    """name -> version of the `name==version` lines of a requirements file (the rest skipped)."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {_canonical(name): version for name, _, version in
            (line.partition("==") for line in lines if "==" in line)}


def _canonical(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


TEST_TOOLS = {"pytest", "pytest-xdist", "hypothesis", "selenium", "nbval", "nbgrader", "ruff"}


def test_make_lab_installs_what_a_student_needs_and_no_test_tool():
    student = _pinned(ROOT / "requirements.txt")
    dev = _pinned(ROOT / "requirements-dev.txt")
    constraints = _pinned(ROOT / "constraints.txt")
    assert not TEST_TOOLS & set(student), sorted(TEST_TOOLS & set(student))
    assert TEST_TOOLS <= set(dev), sorted(TEST_TOOLS - set(dev))
    assert "-r requirements.txt" in (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert student["torch"] == "2.13.0", "torch pinned exactly: a looser pin pulls a multi-GB CUDA build"
    for name, version in {**student, **dev}.items():
        assert constraints.get(name) == version, (
            f"constraints.txt pins {name} at {constraints.get(name)}, not {version}")
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+

    needed = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {_canonical(spec.split(">")[0].split("=")[0].split("<")[0]) for spec in needed}
    assert names <= set(student), f"Colab installs {sorted(names - set(student))}, which make lab leaves out"
    make = (ROOT / "Makefile").read_text()
    lab_rule = make.split("$(LAB_STAMP):", 1)[1].split("\n\n", 1)[0]
    assert "requirements.txt" in lab_rule and "requirements-dev" not in lab_rule, lab_rule
    assert "\nlab: $(LAB_STAMP)" in make
