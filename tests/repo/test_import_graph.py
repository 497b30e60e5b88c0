"""Imports go one way: no cycle among the modules of threeaxes/ and autograder/, and
nothing low in either package imports what sits above it (CONTRIBUTING.md has the map).

The graph is read from the source with `ast`, not by importing anything. Every
``import`` and ``from ... import`` counts, at module level and inside functions (and
under ``if TYPE_CHECKING:``), and so does ``importlib.import_module("a.literal")``:

* ``import a.b.c`` is an edge to ``a.b.c`` (or its longest prefix that is one of ours);
* ``from a.b import c`` is an edge to ``a.b.c`` when that is a module of ours (a
  submodule), else to ``a.b`` (a name defined in ``a/b/__init__.py`` or ``a/b.py``);
* relative imports are resolved against the importing module's package first.

A package's ``__init__`` is the module named like the package (``threeaxes.launch``).
Python also runs every parent package's ``__init__`` before a submodule; that is not
an edge. So ``pkg/__init__`` importing ``pkg.sub`` (the usual re-export) is the edge
``pkg -> pkg.sub`` and no cycle, because ``pkg.sub`` importing ``pkg.other`` names
``pkg.other``, not ``pkg``. A real cycle through an ``__init__`` still shows: ``pkg.sub``
doing ``from pkg import name`` (a name the ``__init__`` defines) is the edge
``pkg.sub -> pkg``, and with ``pkg -> pkg.sub`` that is the cycle Python trips on
("partially initialized module").
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("threeaxes", "autograder")

# The bottom: the layout, the toy model, the collectives and the trace, launching
# ranks, the course's constants (and threeaxes/__init__, which starts launch's
# forkserver). They import nothing of threeaxes above them.
BOTTOM = ("threeaxes.dims", "threeaxes.toy", "threeaxes.comms", "threeaxes.trace", "threeaxes.launch",
          "threeaxes.course", "threeaxes.extra_axes", "threeaxes.sections")
# The axes: one folder each. They may import the bottom, the cost model and each other.
AXIS_PACKAGES = ("threeaxes.data_parallel", "threeaxes.tensor_parallel", "threeaxes.pipeline",
                 "threeaxes.sharding", "threeaxes.context_parallel", "threeaxes.expert_parallel")
# The top: what draws, shows and grades. Nothing else in threeaxes imports it.
TOP = ("threeaxes.plots", "threeaxes.display", "threeaxes.widgets", "threeaxes.grading",
       "threeaxes.practice", "threeaxes.practice_beyond", "threeaxes.practice_checks",
       "threeaxes.practice_cards", "threeaxes.progress")

# autograder/, bottom to top, one folder per layer: a module imports its own layer and those
# below, never above.
AUTOGRADER_LAYERS = (
    # the course's data and the small readers everything shares: the layout, grading.json read
    # and checked, per-drop references, stored cases, the drops' minutes, the withheld copy of
    # the package, what a submission's folder may hold, the grading phases' clock
    ("data", ("autograder.course", "autograder.spec", "autograder.spec_checks", "autograder.references",
              "autograder.cases", "autograder.drop_minutes", "autograder.withheld", "autograder.one_notebook",
              "autograder.phases")),
    # the sandboxed kernel: isolation, budgets, the host, its client, forks, the oracle's workers
    ("runtime", ("autograder.runtime",)),
    # judging on top of the runtime: test cells run in the grader, the oracle, the guard, the opening
    ("judging", ("autograder.judging",)),
    # what nbgrader_config.py names, and nbgrader's collect made safe
    ("nbgrader plugins", ("autograder.plugins",)),
    # the commands (python -m autograder.apps.X), which may use each other
    ("commands", ("autograder.apps",)),
)


def autograder_layer(module: str) -> int | None:
    """The index in AUTOGRADER_LAYERS of `module`'s layer; None for one not placed yet."""
    if module == "autograder":
        return 0
    return next((i for i, (_, members) in enumerate(AUTOGRADER_LAYERS) if within(module, members)), None)


def within(module: str, prefixes) -> bool:
    """True if `module` is one of `prefixes` or inside one of them (a submodule)."""
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def in_bottom(module: str) -> bool:
    return module == "threeaxes" or within(module, BOTTOM)


def modules_under(root: Path, packages=PACKAGES) -> dict[str, tuple[Path, bool]]:
    """Every module of `packages` under `root`: dotted name -> (file, is a package)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def imports_of(name: str, path: Path, is_package: bool, known) -> set[str]:
    """The modules of `known` that module `name` imports anywhere in its source."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()

    def longest_known(dotted):
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in known:
                return ".".join(parts[:end])
        return None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [longest_known(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known
                       else longest_known(source) for alias in node.names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            targets = [longest_known(node.args[0].value)]
        else:
            continue
        found.update(t for t in targets if t is not None)
    found.discard(name)
    return found


def import_graph(root: Path = ROOT, packages=PACKAGES) -> dict[str, set[str]]:
    known = modules_under(root, packages)
    return {name: imports_of(name, path, is_package, known) for name, (path, is_package) in known.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per knot of mutually importing modules, as a path that comes back to
    where it starts: ["a", "b", "a"]. Empty if the graph has none. (Tarjan's strongly
    connected components, then the shortest way round each from its first module.)"""
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for component in components:
        start = min(component)
        if len(component) == 1 and start not in graph.get(start, ()):
            continue   # a module alone, not importing itself
        paths, seen = [[start]], set()
        while paths:   # breadth first: the shortest way back to start
            path = paths.pop(0)
            for w in sorted(graph.get(path[-1], ())):
                if w == start:
                    cycles.append(path + [start])
                    paths = []
                    break
                if w in component and w not in seen:
                    seen.add(w)
                    paths.append(path + [w])
    return sorted(cycles)


def named(cycles) -> str:
    return "; ".join(" -> ".join(cycle) for cycle in cycles)


# -- the tools prove they can fail ----------------------------------------------------------

def test_the_cycle_finder_finds_a_hand_made_cycle_and_names_it():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}, "f": {"f"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["f", "f"]]
    assert named(find_cycles(graph)) == "a -> b -> c -> a; f -> f"
    assert find_cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []   # a diamond is no cycle


def test_the_reader_resolves_relative_in_function_and_submodule_imports(tmp_path):
    files = {
        "pkg/__init__.py": "from pkg import sub\nfrom .sub import helper\n",   # re-exports: no cycle
        "pkg/sub.py": "def helper():\n    from . import other\n    return other\n",  # in a function
        "pkg/other.py": "from .sub import helper\n",                           # ... and back: a cycle
        "pkg/deep/__init__.py": "",
        "pkg/deep/leaf.py": ("import importlib\nimport pkg.deep\nfrom ..sub import helper\n"
                             "importlib.import_module('pkg.other')\n"),
        "pkg/late.py": "from pkg import helper\nimport pkg.deep.leaf as leaf\n",  # helper: a name of pkg
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": {"pkg.sub"}, "pkg.sub": {"pkg.other"}, "pkg.other": {"pkg.sub"},
                     "pkg.deep": set(), "pkg.deep.leaf": {"pkg.deep", "pkg.other", "pkg.sub"},
                     "pkg.late": {"pkg", "pkg.deep.leaf"}}
    assert named(find_cycles(graph)) == "pkg.other -> pkg.sub -> pkg.other"


# -- the package -----------------------------------------------------------------------------

def test_no_import_cycle_in_threeaxes_or_autograder():
    graph = import_graph()
    assert len(graph) > 80 and "threeaxes.launch.worker" in graph and "autograder.judging.judge" in graph
    cycles = find_cycles(graph)
    assert not cycles, f"import cycles (a module importing, however indirectly, itself): {named(cycles)}"


def test_the_axes_do_not_import_the_drawings():
    graph = import_graph()
    drawing = {m for m in graph if within(m, ("threeaxes.plots", "threeaxes.display", "threeaxes.widgets"))}
    below = AXIS_PACKAGES + ("threeaxes.cost",)
    offending = sorted(f"{m} imports {', '.join(sorted(graph[m] & drawing))}"
                       for m in graph if within(m, below) and graph[m] & drawing)
    assert not offending, ("the axes and the cost model return data; the caller (a notebook, a widget) "
                           f"draws it with threeaxes.plots: {offending}")


def test_imports_go_one_way_bottom_axes_top_autograder():
    graph = import_graph()
    ours = [m for m in graph if m.startswith("threeaxes")]
    wrong = []
    for module in ours:
        for target in sorted(graph[module]):
            if target.startswith("autograder"):
                wrong.append(f"{module} -> {target} (autograder sits above the package)")
            elif in_bottom(module) and not in_bottom(target):
                wrong.append(f"{module} -> {target} (the bottom imports only the bottom)")
            elif within(target, TOP) and not within(module, TOP):
                wrong.append(f"{module} -> {target} (plots, display, widgets, grading sit on top)")
    assert not wrong, "imports that go up: " + "; ".join(wrong)


def test_one_name_per_idea():
    """`AXES` is the mesh order (dims.py) and `VARIANTS` the data-parallel step modes
    (data_parallel/compare.py); drop 11's choices are `AXES_BY_STRIDE`, drop 14's job
    changes `JOB_CHANGES`. Each is bound at module level in one module only."""
    where = {"AXES": [], "VARIANTS": []}
    for name, (path, _) in modules_under(ROOT, ("threeaxes",)).items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id in where:
                    where[target.id].append(name)
    assert where == {"AXES": ["threeaxes.dims"], "VARIANTS": ["threeaxes.data_parallel.compare"]}, where


def test_every_autograder_module_has_a_layer():
    unplaced = sorted(m for m in import_graph() if m.startswith("autograder") and autograder_layer(m) is None)
    assert not unplaced, (f"put these in AUTOGRADER_LAYERS (tests/repo/test_import_graph.py) and in CONTRIBUTING's "
                          f"map: {unplaced}")


def autograder_upward_imports(graph) -> list[str]:
    """Each import of an autograder module from a layer above its own, named with both layers."""
    wrong = []
    for module in sorted(m for m in graph if m.startswith("autograder")):
        here = autograder_layer(module)
        for target in sorted(t for t in graph[module] if t.startswith("autograder")):
            there = autograder_layer(target)
            if here is not None and there is not None and there > here:
                wrong.append(f"{module} ({AUTOGRADER_LAYERS[here][0]}) -> {target} ({AUTOGRADER_LAYERS[there][0]})")
    return wrong


def test_autograder_imports_go_one_way_data_runtime_judging_plugins_commands():
    wrong = autograder_upward_imports(import_graph())
    assert not wrong, "autograder imports that go up: " + "; ".join(wrong)


def test_the_layer_check_catches_an_import_that_goes_up(tmp_path):
    for folder in ("autograder", "autograder/runtime", "autograder/apps"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "autograder/runtime/sandbox.py").write_text("from autograder.apps import grade\n")  # up
    (tmp_path / "autograder/apps/grade.py").write_text("import autograder.runtime.sandbox\n")         # down
    (tmp_path / "autograder/runtime/kernel_host.py").write_text("import autograder.runtime.sandbox\n")  # same
    graph = import_graph(tmp_path, ("autograder",))
    assert autograder_upward_imports(graph) == [
        "autograder.runtime.sandbox (runtime) -> autograder.apps.grade (commands)"]
