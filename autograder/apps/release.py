"""Regenerate release/ from source/ (what `make release` runs).

1. Check every drop's grading.json (`autograder.spec`): a fault stops the
   release before anything is written, naming the file and the key.
2. Stamp the install cell (`threeaxes.course.INSTALL_CELL`) right under the
   title of every source and ungraded notebook, so that a notebook opens on its
   title and the repository URL lives in one place.
3. Run `nbgrader generate_assignment` for every assignment folder in source/,
   with a throwaway gradebook so the repository gains no database.
4. Normalise the released notebooks: notebook metadata is the kernelspec and
   the language_info the course's kernel reports, as JupyterLab writes them when
   it opens a notebook (so a student's copy opens unmodified), plus Colab's
   colab.collapsed_sections where a notebook has "Going deeper" sections (Colab
   ignores JupyterLab's fold state; threeaxes.sections.fold_for_colab), and a regeneration
   with the same Python gives byte-identical files (a test checks this).

`python -m autograder.apps.release [--out DIR]` writes to DIR/release instead of
the repository's release/ (the test uses this to compare).
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from autograder import course, spec
from autograder.apps.grade import nbgrader
from threeaxes.course import INSTALL_CELL, is_install_cell
from threeaxes.sections import fold_for_colab

ROOT = course.ROOT


def _kernelspec() -> dict:
    """The kernelspec JupyterLab writes into a notebook it opens with the course's kernel:
    ipykernel's own (name python3, display name "Python 3 (ipykernel)")."""
    from ipykernel.kernelspec import KERNEL_NAME, get_kernel_dict

    spec = get_kernel_dict()
    return {"display_name": spec["display_name"], "language": spec["language"], "name": KERNEL_NAME}


KERNELSPEC = _kernelspec()


def assignments(root: Path = ROOT) -> list[str]:
    return course.drops(root)


def check_grading_data(course_root: Path, names: list[str] | None = None) -> None:
    """Every drop's grading.json read and checked (`autograder.spec`) before anything is
    written: a fault raises SpecError naming the file and the key."""
    for name in names or assignments(course_root):
        path = course.grading_file(name, course_root)
        if not path.is_file():
            raise spec.SpecError(f"source/{name}/{course.GRADING_FILE}: missing; every drop has one "
                                 "(CONTRIBUTING.md, \"The grading data\")")
        spec.load(path)


def write_notebook(path: Path, nb: dict) -> None:
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def install_cell_place(cells: list) -> int:
    """Where the install cell belongs: right under the title (the first cell, when it is a
    markdown cell opening with a level-1 heading), else first."""
    first = cells[0] if cells else None
    titled = first is not None and first["cell_type"] == "markdown" and "".join(first["source"]).startswith("# ")
    return 1 if titled else 0


def stamp_install_cell(path: Path) -> bool:
    """Put the install cell right under the title; True when the file changed."""
    nb = json.loads(path.read_text())
    cell: dict[str, object] = {"cell_type": "code", "execution_count": None, "id": "install-threeaxes",
            "metadata": {}, "outputs": [], "source": INSTALL_CELL.splitlines(keepends=True)}
    others = [c for c in nb["cells"] if not is_install_cell(c)]
    cells = others[:install_cell_place(others)] + [cell] + others[install_cell_place(others):]
    if cells == nb["cells"]:
        return False
    nb["cells"] = cells
    write_notebook(path, nb)
    return True


def language_info() -> dict:
    """What the course's kernel (ipykernel, in this environment) tells JupyterLab about its
    language; JupyterLab writes it into a notebook's metadata when the kernel starts."""
    from ipykernel.ipkernel import IPythonKernel

    return dict(IPythonKernel.language_info)


def normalise(path: Path) -> None:
    nb = json.loads(path.read_text())
    nb["metadata"] = {"kernelspec": KERNELSPEC, "language_info": language_info()}
    fold_for_colab(nb)      # Colab's own folding state, from the "deeper" tags
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    write_notebook(path, nb)


def generate(course_root: Path, out_root: Path, names: list[str] | None = None,
             gradebook: Path | None = None) -> None:
    """Run nbgrader over course_root/source into out_root/release. The assignments are
    recorded in `gradebook` (a course that will autograde them), or in a throwaway one."""
    check_grading_data(course_root, names)
    # every assignment in one nbgrader call (it reads the id "*" as a glob): nbgrader's
    # start-up is paid once rather than once per drop
    with tempfile.TemporaryDirectory() as tmp:
        db = gradebook or Path(tmp) / "gradebook.db"
        for pattern in (names or ["*"]):
            nbgrader(course_root, "generate_assignment", pattern, "--force",
                     f"--CourseDirectory.root={course_root}",
                     f"--CourseDirectory.release_directory={out_root / 'release'}",
                     f"--CourseDirectory.db_url=sqlite:///{db}?timeout=60")
    for name in names or assignments(course_root):
        for nb_path in sorted(course.folder(name, out_root, of="release").rglob("*.ipynb")):
            normalise(nb_path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="assignments to release (default: every one in source/)")
    parser.add_argument("--out", type=Path, default=None,
                        help="write DIR/release instead of the repository's release/")
    args = parser.parse_args(argv)
    names = args.names or assignments()
    try:
        check_grading_data(ROOT, names)
    except spec.SpecError as exc:
        raise SystemExit(f"nothing released: {exc}") from None
    if args.out is None:
        # the named drops' notebooks only (and the ungraded ones when every drop is released)
        stamped = [course.notebook(name) for name in names]
        for nb_path in stamped + ([] if args.names else sorted(course.notebooks().glob("*.ipynb"))):
            if stamp_install_cell(nb_path):
                print(f"stamped the install cell into {nb_path.relative_to(ROOT)}")
            if nb_path.parent.name == "notebooks":
                normalise(nb_path)     # students open these as they are
        for name in names:
            shutil.rmtree(course.folder(name, of="release"), ignore_errors=True)
        generate(ROOT, ROOT, names)
    else:
        generate(ROOT, args.out, names)
    print(f"released: {', '.join(names)}")


if __name__ == "__main__":
    main()
