"""The kernel's copy of the package: each function an exercise forbids ("forbid" in a drop's
grading.json, read by `autograder.spec`) loses its body, which asks the grader instead
(`autograder.judging.oracle`). Its arguments and result cross as data (threeaxes.grading.wire.data; a
pipeline Plan is one of its records), so no forbidden body is anywhere in the kernel.
"""
from __future__ import annotations

import ast
import compileall
import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from autograder.course import PACKAGE
from autograder.spec import Exercise, definition, load_exercises
from threeaxes.grading.own_work import resolve

WITHHELD_MARKER = "WITHHELD"   # a file only the withheld copy holds: the kernel host looks for it
__all__ = ["PACKAGE", "WITHHELD_MARKER", "Exercise", "definition", "load_exercises", "package_for", "resolve",
           "stub_package"]


_STUB = '''{indent}def {name}(*args, **kwargs):
{indent}    """Withheld in this graded run: the grader computes it (threeaxes.grading.wire.oracle)."""
{indent}    from threeaxes.grading.wire.oracle import call as _withheld_call
{indent}    return _withheld_call({path!r}, args, kwargs)
'''
_KEPT_DECORATORS = {"staticmethod", "classmethod"}


def _withhold(source: str, qualnames: set, module: str) -> str:
    """`source` with each function of `qualnames` turned into a stub, lines replaced bottom up."""
    lines = source.splitlines(keepends=True)
    found: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]] = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            elif (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and prefix + node.name in qualnames):
                found.append((node, prefix + node.name))
    visit(ast.parse(source).body, "")
    missing = qualnames - {q for _, q in found}
    if missing:
        raise LookupError(f"{module}: no function {sorted(missing)} to withhold")
    for node, qualname in sorted(found, key=lambda f: -f[0].lineno):
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        indent = " " * node.col_offset
        kept = "".join(f"{indent}@{d.id}\n" for d in node.decorator_list
                       if isinstance(d, ast.Name) and d.id in _KEPT_DECORATORS)
        stub = kept + _STUB.format(indent=indent, name=node.name, path=f"{module}:{qualname}")
        lines[first - 1:node.end_lineno] = [stub]
    return "".join(lines)


def stub_package(paths: set, dest: Path) -> Path:
    """A copy of `threeaxes` in `dest/threeaxes` with the functions `paths` ("module:qualname")
    withheld, compiled (the kernel's copy is read-only: no bytecode written at import)."""
    target = Path(dest) / "threeaxes"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    by_module: dict[str, set] = {}
    for path in paths:
        module, qualname = path.split(":")
        by_module.setdefault(module, set()).add(qualname)
    for module, qualnames in by_module.items():
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None, f"{path} names a module of threeaxes"
        file = target / Path(spec.origin).relative_to(PACKAGE)
        file.write_text(_withhold(file.read_text(), qualnames, module))
    (target / WITHHELD_MARKER).write_text("This copy of threeaxes has the graded exercises' functions withheld.\n")
    compileall.compile_dir(str(target), quiet=1)
    return target


def package_for(paths: set) -> Path:
    """`stub_package(paths)`, built once per set of withheld functions and version of the
    package, and kept (compiling it takes seconds) in a folder of this user's own, which
    every grading process of the machine shares."""
    digest = hashlib.sha256(repr(sorted(paths)).encode() + Path(__file__).read_bytes())
    for file in sorted(PACKAGE.rglob("*.py")):
        digest.update(str(file.relative_to(PACKAGE)).encode() + b"\0" + file.read_bytes())
    cache = Path(tempfile.gettempdir()) / f"threeaxes-withheld-{os.getuid()}"
    cache.mkdir(mode=0o700, exist_ok=True)
    if cache.stat().st_uid != os.getuid() or cache.stat().st_mode & 0o077:
        raise PermissionError(f"{cache} should belong to this user alone")
    done = cache / digest.hexdigest()[:24]
    if not done.is_dir():
        scratch = Path(tempfile.mkdtemp(dir=cache))
        stub_package(paths, scratch)
        try:
            scratch.rename(done)          # atomic: another grading process may have won
        except OSError:
            shutil.rmtree(scratch, ignore_errors=True)
    return done / "threeaxes"


