"""Where the course's files are: the one module that knows the repository's layout.

A course root (this repository, or a copy a test builds) holds `source/<drop>/` (the
instructor's `<drop>.ipynb` and `grading.json`), `release/<drop>/` (the students' copies,
generated) and nbgrader's `submitted/`, `autograded/` and `feedback/<student>/<drop>/`.
Every function takes the root, this repository by default.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "threeaxes"
CASES = PACKAGE / "grading" / "cases"          # the visible checks' stored cases, dropNN.json
SAMPLES = ROOT / "autograder" / "samples"      # sample submissions, answers typed in
TEMPLATES = ROOT / "autograder" / "templates"  # the feedback page's templates
GRADING_FILE = "grading.json"
SIDES = ("source", "release", "submitted", "autograded", "feedback")


def side(name: str, root: Path = ROOT) -> Path:
    """root/<name>: one of SIDES."""
    if name not in SIDES:
        raise ValueError(f"{name!r} is no folder of a course; choose one of {SIDES}")
    return Path(root) / name


def source(root: Path = ROOT) -> Path:
    return side("source", root)


def release(root: Path = ROOT) -> Path:
    return side("release", root)


def notebooks(root: Path = ROOT) -> Path:
    """root/notebooks/: the ungraded notebooks (the start page, the calculators, the practice set)."""
    return Path(root) / "notebooks"


def drops(root: Path = ROOT, of: str = "source") -> list[str]:
    """The drops' folder names in root/<of>/, in order (hidden folders left out)."""
    folder = side(of, root)
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def graded_drops(root: Path = ROOT) -> list[str]:
    """The drops of source/ that have grading data."""
    return [name for name in drops(root) if grading_file(name, root).is_file()]


def folder(drop: str, root: Path = ROOT, of: str = "source") -> Path:
    """root/<of>/<drop>/."""
    return side(of, root) / drop


def notebook(drop: str, root: Path = ROOT, of: str = "source") -> Path:
    """A drop's notebook: root/<of>/<drop>/<drop>.ipynb."""
    return folder(drop, root, of) / f"{drop}.ipynb"


def students(drop: str, student: str, root: Path = ROOT, of: str = "submitted") -> Path:
    """A student's folder of a drop on nbgrader's side: root/<of>/<student>/<drop>/."""
    if of in ("source", "release"):
        raise ValueError(f"{of}/ holds no student's folders; choose submitted, autograded or feedback")
    return side(of, root) / student / drop


def notebook_in(drop_folder: Path) -> Path:
    """The notebook of a drop's folder, wherever that folder lies: <folder>/<folder name>.ipynb."""
    return Path(drop_folder) / f"{Path(drop_folder).name}.ipynb"


def grading_file(drop: str, root: Path = ROOT) -> Path:
    """root/source/<drop>/grading.json (read it with `autograder.spec.load`)."""
    return folder(drop, root) / GRADING_FILE


def drop_named(prefix: str, root: Path = ROOT) -> str:
    """The drop whose folder name starts with `prefix` ("drop06" -> "drop06-tensor-parallel-trace")."""
    found = [name for name in drops(root) if name.startswith(prefix)]
    if len(found) != 1:
        raise LookupError(f"{prefix!r} names {len(found)} drops in {source(root)}: {found}; "
                          "give the dropNN prefix of exactly one")
    return found[0]


def shown(path: Path, root: Path = ROOT) -> str:
    """`path` as a message shows it: relative to the course root where it lies inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return str(path)
