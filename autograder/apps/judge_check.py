"""Run a notebook the way grading does and say how each test cell fares.

    python -m autograder.apps.judge_check source/drop05-data-parallel-trace/drop05-data-parallel-trace.ipynb
    python -m autograder.apps.judge_check --no-isolate ...    # no sandbox (quicker to debug)

How grading runs it: CONTRIBUTING.md, "Test cells run in the grader, not in the student's kernel"
(with the drop's withheld functions answered and guarded, autograder/judging/borrowed.py). For a
drop's author: a solved notebook must pass every test cell here, as it does in JupyterLab.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    # imported here, not at the top: ranks the judge launches import this main module
    # again, and nbgrader's import would cost each of them seconds
    import nbformat

    from autograder.judging import borrowed
    from autograder.judging.judge import is_test_cell
    from autograder.judging.oracle import Oracle
    from autograder.plugins.execute import run_notebook
    from autograder.runtime.kernel_session import KernelSession
    from autograder.withheld import package_for

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook")
    parser.add_argument("--no-isolate", action="store_true")
    parser.add_argument("--timeout", type=float, default=90)
    args = parser.parse_args(argv)
    nb = nbformat.read(args.notebook, as_version=4)
    start = time.perf_counter()
    # the drop's withheld functions and its guard, as grading has them (autograder/judging/borrowed.py):
    # an instructor's cell that calls one an open exercise forbids fails here as it does there
    path = Path(args.notebook).resolve()
    instructors = borrowed.instructors_cells_of(path.parent.name, path.stem, Path.cwd())
    guard = borrowed.guard_for(path.parent.name, instructors, Path.cwd())
    with tempfile.TemporaryDirectory(prefix="threeaxes-oracle-") as folder:
        oracle = Oracle(guard.paths, Path(folder)) if guard else None
        try:
            with KernelSession(isolate=not args.no_isolate, timeout=args.timeout,
                               package=package_for(guard.paths) if guard else None,
                               oracle_socket=oracle.socket_path if oracle else None) as kernel:
                print("sandbox:", kernel.sandbox)
                run_notebook(nb, kernel, args.timeout, guard, oracle)
        finally:
            if oracle:
                oracle.close()
    failed = 0
    for cell in nb.cells:
        if cell.cell_type == "code" and not is_test_cell(cell):
            errors = [o for o in cell.outputs if o.output_type == "error"]
            if errors:
                print(f"  (a notebook cell failed: {errors[0].ename}: {errors[0].evalue[:300]})")
        if is_test_cell(cell):
            gid = cell.metadata.nbgrader.grade_id
            errors = [o for o in cell.outputs if o.output_type == "error"]
            results = [o for o in cell.outputs if o.output_type == "execute_result"]
            verdict = (f"FAIL {errors[0].ename}: {errors[0].evalue[:500]}" if errors else
                       f"partial {results[0].data['text/plain']}" if results else "pass")
            failed += bool(errors)
            print(f"{gid}: {verdict}")
    print(f"{time.perf_counter() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
