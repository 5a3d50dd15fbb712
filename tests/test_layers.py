"""The layering rule of docs/architecture.md, checked on the source: no module imports from a
layer above it (function-level imports included), no modules import each other in a cycle (at
any depth, package ``__init__`` files included), and the page's import table says what each
module really imports (so the page cannot drift from the code)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"

# Bottom to top. A module may import from its own group and from lower layers only; an import
# between two groups of one layer must be listed in SAME_LAYER with its reason.
LAYERS = [
    {"_float_sampler", "_compiles", "_memory"},
    {"_validate", "_cpu_prng", "_gaussian_curve"},
    {"discrete_noise", "_pld"},
    {"mechanisms"},
    {"accounting", "local_randomizers", "robust_mean"},
    {"models", "accountant"},
    {"base", "registry"},
    {"algorithms", "examples"},
    {"audit", "tune", "calibrate", "sweep", "results", "config", "plotting", "auto"},
    {"study", "demo", "sklearn"},
    {"reproduce"},
    {"cli", "experiments", "_sources"},
]
SAME_LAYER = {
    ("cli", "experiments"): "dpjax run NAME finds the experiment",
    ("cli", "_sources"): "dpjax run FILE.py / pkg.mod:NAME finds a user's experiment",
    ("_sources", "experiments"): "a bundled name wins over a user's experiment of that name",
}
# Imported everywhere and left out of the page's table (it says so).
UNLISTED = {"_validate", "_cpu_prng"}


def _group(module: str) -> str:
    """``dpjax.models.glm`` -> ``models``; ``dpjax.experiments.em_fig1`` -> ``experiments``."""
    parts = module.split(".")
    assert parts[0] == "dpjax", module
    return parts[1] if len(parts) > 1 else "dpjax"


def _sources() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "dpjax").rglob("*.py")):
        out[".".join(path.relative_to(ROOT).with_suffix("").parts)] = path
    for path in sorted((ROOT / "experiments").glob("*.py")):
        out["dpjax.experiments." + path.stem] = path
    return {m.removesuffix(".__init__"): p for m, p in out.items()}


def imported_modules(source: str, module: str, known: set[str]) -> set[str]:
    """Every dpjax module ``source`` imports, at any depth (``from dpjax import x`` names the
    module ``dpjax.x`` where that is a module, else the package). ``module`` is not a package
    ``__init__`` (those are left out of the check)."""
    package = module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return {m for m in found if m == "dpjax" or m.startswith("dpjax.")}


def edges() -> dict[str, set[str]]:
    """Group -> the groups its modules import (package inits left out: ``dpjax/__init__``
    imports the public modules for convenience, ``models``/``algorithms`` their own modules)."""
    sources = _sources()
    known = set(sources)
    out: dict[str, set[str]] = {}
    for module, path in sources.items():
        if path.name == "__init__.py":
            continue
        deps = imported_modules(path.read_text(), module, known)
        out.setdefault(_group(module), set()).update(_group(d) for d in deps)
    return {g: deps - {g} for g, deps in out.items()}


def _layer(group: str) -> int:
    for i, layer in enumerate(LAYERS):
        if group in layer:
            return i
    raise AssertionError(f"dpjax.{group} has no layer: add it to LAYERS here and to the import "
                         "table of docs/architecture.md")


def violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for group, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if dep == "dpjax":
                bad.append(f"{group} imports the dpjax package itself (import the module)")
            elif _layer(dep) > _layer(group) or (
                    _layer(dep) == _layer(group) and (group, dep) not in SAME_LAYER):
                bad.append(f"{group} (layer {_layer(group)}) imports {dep} "
                           f"(layer {_layer(dep)})")
    return bad


def test_no_module_imports_from_a_layer_above_it():
    graph = edges()
    assert {"mechanisms", "accounting", "models", "algorithms", "sweep", "study", "cli",
            "experiments"} <= set(graph)
    assert violations(graph) == []


def test_the_layer_check_has_teeth():
    graph = edges()
    assert violations({**graph, "mechanisms": graph["mechanisms"] | {"accounting"}})
    assert violations({**graph, "models": {"algorithms"}})
    assert violations({**graph, "sweep": {"audit"}})  # same layer, not listed
    assert violations({**graph, "results": {"dpjax"}})
    with pytest.raises(AssertionError, match="no layer"):
        violations({**graph, "new_module": {"mechanisms"}})
    # function-level and relative imports count
    known = {"dpjax.models", "dpjax.models.glm", "dpjax.algorithms", "dpjax.algorithms.dp_em"}
    src = "def f():\n    from dpjax.algorithms import dp_em\n"
    assert imported_modules(src, "dpjax.models.glm", known) == {"dpjax.algorithms.dp_em"}
    src = "from ..algorithms import dp_em\nfrom . import glm\n"
    assert imported_modules(src, "dpjax.models.gmm", known) == {
        "dpjax.algorithms.dp_em", "dpjax.models.glm"}


def module_graph() -> dict[str, set[str]]:
    """Module -> the dpjax modules it imports, at any depth (package ``__init__`` files are
    modules here too: importing a package runs them)."""
    sources = _sources()
    known = set(sources)
    return {module: imported_modules(path.read_text(), module, known) & known
            for module, path in sources.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that import each other, directly or through others: every strongly
    connected component of ``graph`` with more than one module, or a module that imports
    itself (each sorted; iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, deps = work[-1]
            dep = next(deps, None)
            if dep is not None:
                if dep not in index:
                    index[dep] = low[dep] = len(index)
                    stack.append(dep)
                    on_stack.add(dep)
                    work.append((dep, iter(sorted(graph.get(dep, ())))))
                elif dep in on_stack:
                    low[node] = min(low[node], index[dep])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    cycles.append(sorted(component))
    return sorted(cycles)


def test_no_import_cycle():
    assert import_cycles(module_graph()) == [], "modules that import each other"


def test_the_cycle_check_has_teeth():
    graph = module_graph()
    assert {"dpjax.mechanisms", "dpjax.discrete_noise", "dpjax.audit.cases"} <= set(graph)
    # the cycle this test was written against: discrete_noise importing mechanisms back, at
    # function level
    known = set(graph)
    src = "def event():\n    from dpjax.mechanisms import PrivacyEvent\n"
    back = imported_modules(src, "dpjax.discrete_noise", known)
    assert back == {"dpjax.mechanisms"}
    cycles = import_cycles({**graph, "dpjax.discrete_noise": graph["dpjax.discrete_noise"] | back})
    assert any({"dpjax.discrete_noise", "dpjax.mechanisms", "dpjax.mechanisms.secure"} <= set(c)
               for c in cycles)
    # a longer cycle inside a package, and a module importing itself
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"a"}, "b": set()}) == [["a"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def _doc_table() -> dict[str, set[str]]:
    """The page's import table: row name (``models`` for ``models.*``) -> the names it gives."""
    text = DOC.read_text()
    start = text.index("| module | imports from dpjax |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        first, second = line.strip("|").split("|", 1)
        names = set(re.findall(r"`([^`]+)`", second))
        for name in re.findall(r"`([^`]+)`", first):
            rows[name.removesuffix(".*").removesuffix("/*")] = names
    return rows


def doc_mismatches(table: dict[str, set[str]], graph: dict[str, set[str]]) -> list[str]:
    bad = [f"no row for {g}" for g in sorted(set(graph) - set(table))]
    for group, deps in sorted(graph.items()):
        if group == "experiments" or group not in table:
            continue  # experiments: "any of the above"
        unlisted = sorted(deps - UNLISTED - table[group])
        stale = sorted({g for g in table[group] if g in graph} - deps - UNLISTED)
        bad += [f"{group} imports {unlisted}, not in its row"] * bool(unlisted)
        bad += [f"{group}'s row names {stale}, not imported"] * bool(stale)
    return bad


def test_the_architecture_page_lists_every_import():
    assert doc_mismatches(_doc_table(), edges()) == [], "update docs/architecture.md's table"


def test_the_page_check_has_teeth():
    table, graph = _doc_table(), edges()
    assert table["base"] == {"mechanisms", "secure_noise", "accounting", "secure=True", "_pld"}
    assert doc_mismatches(table, {**graph, "sweep": {"base", "results"}})  # unlisted
    assert doc_mismatches(table, {**graph, "study": {"sweep", "results"}})  # stale: config
    assert doc_mismatches({k: v for k, v in table.items() if k != "tune"}, graph)  # no row


def function_level_imports(source: str, module: str, known: set[str]) -> set[str]:
    """The dpjax modules ``source`` imports inside a function or method."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    found |= imported_modules(ast.unparse(inner), module, known)
    return found


def test_the_mechanisms_modules_import_each_other_at_the_top():
    """The mechanisms package is split by responsibility with every import at module level,
    so its import graph (checked above for cycles) is the whole story; so is the ledger's use
    of it (``accounting``)."""
    sources = _sources()
    known = set(sources)
    split = sorted(m for m in sources if m.startswith("dpjax.mechanisms."))
    assert {"dpjax.mechanisms.statistics", "dpjax.mechanisms.secure",
            "dpjax.mechanisms.calibration"} <= set(split)
    for module in split + ["dpjax.accounting"]:
        assert function_level_imports(sources[module].read_text(), module, known) == set(), module
    # teeth: the import the secure path used to make inside secure_noise
    src = "def secure_noise():\n    if True:\n        from dpjax import discrete_noise\n"
    assert function_level_imports(src, "dpjax.mechanisms.secure", known) == {
        "dpjax.discrete_noise"}
    assert (ROOT / "dpjax" / "mechanisms.py").exists() is False
