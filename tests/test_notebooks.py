"""Every notebook in notebooks/ executes without error (its cells assert their own results),
is committed without outputs, and uses dpjax's public API only."""

import ast
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# one notebook per estimator family (issue 16), plus the quickstart and the tuning recipe
EXPECTED = {"quickstart", "dp_em", "dp_glm", "dp_iv", "dp_gem", "ldp_sparse", "tuning"}
# NamedTuple's public methods start with an underscore; they are not private API
NAMEDTUPLE_API = {"_replace", "_fields", "_asdict", "_make"}


def _code(path):
    nb = nbformat.read(path, as_version=4)
    return nb, [c for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors


def test_every_family_has_a_notebook():
    assert {p.stem for p in NOTEBOOKS} >= EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_stripped(path):
    _, cells = _code(path)
    assert cells
    dirty = [i for i, c in enumerate(cells) if c.get("outputs") or c.get("execution_count")]
    assert not dirty, f"{path.name}: code cells {dirty} carry outputs; strip them before committing"


def _private_uses(source):
    """Imports of private modules or names, the experiments package, and private attributes."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
            bad += [f"from {node.module} import {a.name}" for a in node.names
                    if a.name.startswith("_")]
        elif (isinstance(node, ast.Attribute) and node.attr.startswith("_")
              and not node.attr.startswith("__") and node.attr not in NAMEDTUPLE_API):
            bad.append(f".{node.attr}")
            continue
        else:
            continue
        for m in modules:
            parts = m.split(".")
            if parts[0] == "dpjax" and (any(p.startswith("_") for p in parts)
                                        or parts[1:2] == ["experiments"]):
                bad.append(m)
    return bad


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_public_api_only(path):
    _, cells = _code(path)
    bad = [u for c in cells for u in _private_uses(c.source)]
    assert not bad, f"{path.name} uses private or experiment code: {bad}"


def test_the_public_api_check_has_teeth():
    assert _private_uses("from dpjax.experiments._em_common import BetaError")
    assert _private_uses("import dpjax._validate")
    assert _private_uses("from dpjax.base import _fit_run")
    assert _private_uses("x = dp_em._build(model)")
    assert not _private_uses("from dpjax.algorithms import dp_em\nh = hp._replace(eta=1.0)")
