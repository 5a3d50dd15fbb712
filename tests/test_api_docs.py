"""The API reference (``docs/api/*.md``) stays true: every page has an example, and its
```python blocks run (a page's blocks in order, in one namespace, under the suite's strict
settings: warnings are errors, rank promotion raises, key reuse is checked); every name its
tables give (``module.name``, relative to ``dpjax``) exists; every module its reference blocks
(``::: dpjax.x``) document imports; and the doctests of the public docstrings that carry
examples pass. Also: the names the local-DP gradient EM took to its own module are still
importable from ``dpjax.algorithms.dp_gem``."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs" / "api").glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
DOTTED = re.compile(r"`((?:[A-Za-z_][A-Za-z0-9_]*\.)+[A-Za-z_][A-Za-z0-9_]*)`")
REFERENCE = re.compile(r"^::: (\S+)", re.MULTILINE)
# modules whose docstrings carry doctests (``>>>``); each must have at least one
DOCTEST_MODULES = ("dpjax.algorithms.ldp_gem", "dpjax.algorithms._gem_core")


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """``(first line, code)`` of every ```python block of ``page``."""
    text = page.read_text()
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in BLOCK.finditer(text)]


def resolve(name: str) -> object:
    """The object ``name`` (``mechanisms.clip_l2``, ``dpjax.fit``, ``accounting.Release.
    from_event``) names: the longest importable module prefix under ``dpjax``, then attributes."""
    parts = name.removeprefix("dpjax.").split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module("dpjax." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    obj = importlib.import_module("dpjax")
    for attr in parts:
        obj = getattr(obj, attr)
    return obj


def named_on(page: Path) -> set[str]:
    """The dotted names in backticks outside the code blocks of ``page`` whose first part is
    ``dpjax`` or one of its modules (``res.ledger`` and the like are left out)."""
    prose = FENCE.sub("", page.read_text())
    modules = {p.stem for p in (ROOT / "dpjax").iterdir()
               if p.suffix == ".py" or (p / "__init__.py").is_file()} | {"dpjax"}
    return {n for n in DOTTED.findall(prose) if n.split(".")[0] in modules}


def test_every_page_has_an_example_and_is_in_the_nav():
    assert len(PAGES) >= 9
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in PAGES:
        assert python_blocks(page), f"{page.name}: no ```python example"
        assert f"api/{page.name}" in nav, f"{page.name} is not in mkdocs.yml's nav"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_the_examples_run(page):
    namespace: dict = {"__name__": f"docs_api_{page.stem}"}
    for line, code in python_blocks(page):
        # padded so that a traceback points at the page's own line
        exec(compile("\n" * (line - 1) + code, str(page.relative_to(ROOT)), "exec"), namespace)


def test_the_names_on_the_pages_exist():
    missing = []
    for page in PAGES:
        for name in sorted(named_on(page)):
            try:
                resolve(name)
            except (AttributeError, ModuleNotFoundError):
                missing.append(f"{page.name}: {name}")
    assert missing == []


def test_the_name_check_has_teeth(tmp_path):
    assert resolve("mechanisms.clip_l2") is importlib.import_module("dpjax.mechanisms").clip_l2
    assert resolve("dpjax.fit") is importlib.import_module("dpjax.base").fit
    with pytest.raises(AttributeError):
        resolve("mechanisms.no_such_mechanism")
    page = tmp_path / "page.md"
    page.write_text("| `mechanisms.clip_l2` | `res.ledger` |\n```python\n`sweep.x`\n```\n")
    assert named_on(page) == {"mechanisms.clip_l2"}


def test_the_reference_blocks_name_modules():
    for page in PAGES:
        for module in REFERENCE.findall(page.read_text()):
            importlib.import_module(module)


@pytest.mark.parametrize("module", DOCTEST_MODULES)
def test_the_doctests_pass(module):
    result = doctest.testmod(importlib.import_module(module),
                             optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{module} has no doctest"
    assert result.failed == 0


def test_calibration_has_a_page_and_a_one_line_repr():
    """dpjax.calibrate, calibrated_fit and Calibration are on an API page (in the nav, with an
    example that runs: test_the_examples_run), and a Calibration prints as one readable line:
    the estimator, the factor, the target, what is delivered and the hyperparameters, not the
    whole ledger."""
    import jax.numpy as jnp
    import numpy as np

    import dpjax
    from dpjax.examples.dp_mean import DP_MEAN, MeanHyperparams

    page = ROOT / "docs" / "api" / "calibrate.md"
    assert page in PAGES
    names = named_on(page)
    assert {"calibrate.calibrate", "calibrate.calibrated_fit", "calibrate.Calibration"} <= names
    hp = MeanHyperparams(*map(np.float32, (0.5, 1e-3, 2.0)))
    cal = dpjax.calibrate(DP_MEAN, hp, data=jnp.zeros((100, 2)), params0=jnp.zeros(2))
    text = repr(cal)
    assert "\n" not in text and len(text) < 300, text
    assert re.fullmatch(r"Calibration\(dp-mean: factor [0-9.]+, target \(0\.5, 0\.001\)-DP, "
                        r"delivered \(0\.[0-9]+, 0\.001\)-DP; hparams MeanHyperparams\("
                        r"epsilon=[0-9.]+, delta=0\.001, clip=2\)\)", text), text
    grid = dpjax.calibrate(DP_MEAN, hp._replace(epsilon=np.array([0.5, 1.0], np.float32)),
                           data=jnp.zeros((100, 2)), params0=jnp.zeros(2))
    assert repr(grid).startswith("Calibration(dp-mean, 2 levels: factor [")
    assert "target [(0.5, 0.001)-DP, (1, 0.001)-DP]" in repr(grid)


def test_the_local_dp_gem_names_stay_importable_from_dp_gem():
    from dpjax.algorithms import dp_gem, ldp_gem

    assert set(ldp_gem.__all__) <= set(dp_gem.__all__)
    for name in [*ldp_gem.__all__, "LDPSRule"]:
        assert getattr(dp_gem, name) is getattr(ldp_gem, name), name
