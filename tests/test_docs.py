"""The docs cannot drift from the code (issue 29 item 3), and what the README hands on is kept.

- Each paper family's row in docs/index.md (the one family table; the README links it), and its
  page in docs/families/, names every experiment the registry (``dpjax list``) holds for it, and
  none of them calls a family with experiments "in progress" or its experiments "still to
  come".
- Every registered experiment belongs to a family documented here (a new family fails until
  its docs are written); docs/index.md links every family page.
- The copies of code in the docs equal the code: the registry's docstring example and the
  ``_FAMILIES`` line of docs/adding_an_estimator.md, and the example experiment shown there.
- Every duration the docs quote carries its measurement date; the README quotes none (its
  main command's time is in the em_fig1 report).
- The example experiment of docs/adding_an_estimator.md runs (``dpjax run dp_mean``).
- The README is short (at most 6,000 characters), every link in it resolves, its example prints
  the ledger it shows, and CI's test command is read from it; what it held lives on pages of
  the site (the API tour, the command line, the privacy notes, CONTRIBUTING.md); LICENSE and
  CITATION.cff exist and agree with pyproject.toml.
- The "Your own study" page's study runs, from Python and from the command line.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dpjax import registry as estimator_registry
from dpjax.experiments import registry

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
INDEX = ROOT / "docs" / "index.md"
ADDING = ROOT / "docs" / "adding_an_estimator.md"
PAGES = ROOT / "docs" / "families"

# experiment-name prefix -> (the spec number in the tables' "paper (spec)" column, family page)
FAMILIES = {
    "em": ("000", "dp_em.md"),
    "ldp": ("001", "ldp_sparse.md"),
    "gem": ("002", "dp_gem.md"),
    "glm": ("003", "dp_glm.md"),
    "iv": ("004", "dp_iv.md"),
}
# experiments of no paper: the worked example, documented on docs/adding_an_estimator.md
EXAMPLES = {"dp_mean"}
STALE = re.compile(r"in progress|still to come|to come\b|not yet|no reproduction study",
                   re.IGNORECASE)


def _by_family(names) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {p: [] for p in FAMILIES}
    for name in names:
        if name not in EXAMPLES:
            out[name.split("_")[0]].append(name)
    return out


EXPERIMENTS = _by_family(registry())


def family_rows(text: str) -> dict[str, str]:
    """The rows of a Markdown table whose first cell names a spec, ``(000)``: spec -> row."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\|[^|]*\((\d{3})\)[^|]*\|", line)
        if m:
            assert m[1] not in rows, f"two table rows for spec {m[1]}"
            rows[m[1]] = line
    return rows


def named(text: str) -> set[str]:
    """The experiment-like names written in backticks or as a link's text."""
    return set(re.findall(r"[`\[]([a-z]+_[a-z0-9_]+)[`\]]", text))


def test_every_experiment_belongs_to_a_documented_family():
    """A new family's experiments fail here until the family is added to the docs below."""
    for name in registry():
        assert name in EXAMPLES or name.split("_")[0] in FAMILIES, (
            f"experiment {name!r}: no family documents it; add its prefix to FAMILIES "
            "(with its README and docs/index.md rows and its family page)")
    assert all(EXPERIMENTS.values()), "a family without experiments: update FAMILIES"


@pytest.mark.parametrize("doc", [INDEX], ids=lambda p: p.name)
def test_family_rows_list_the_registry_and_are_not_stale(doc):
    rows = family_rows(doc.read_text())
    for prefix, (spec, _) in FAMILIES.items():
        assert spec in rows, f"{doc.name}: no table row for spec {spec}"
        row = rows[spec]
        missing = sorted(set(EXPERIMENTS[prefix]) - named(row))
        assert not missing, f"{doc.name}, spec {spec}: experiments not listed: {missing}"
        unknown = sorted(n for n in named(row) if n.startswith(f"{prefix}_")
                         and n not in EXPERIMENTS[prefix])
        assert not unknown, f"{doc.name}, spec {spec}: not in the registry: {unknown}"
        stale = STALE.search(row)
        assert stale is None, f"{doc.name}, spec {spec}: says {stale[0]!r}, but its " \
                              f"{len(EXPERIMENTS[prefix])} experiments exist"


@pytest.mark.parametrize("prefix", sorted(FAMILIES))
def test_family_pages_list_the_registry_and_are_not_stale(prefix):
    page = PAGES / FAMILIES[prefix][1]
    text = page.read_text()
    missing = sorted(set(EXPERIMENTS[prefix]) - named(text))
    assert not missing, f"{page.name}: experiments not named: {missing}"
    stale = STALE.search(text)
    assert stale is None, f"{page.name}: says {stale[0]!r}"


def test_the_family_table_lives_once_in_the_index():
    """The README keeps no copy of the family table (it drifted from the index's); it links
    the index, which holds it."""
    text = README.read_text()
    assert family_rows(text) == {}, "README.md: the family table belongs to docs/index.md only"
    assert "(docs/index.md)" in text
    assert STALE.search(text) is None, f"README.md says {STALE.search(text)[0]!r}"


def test_the_index_links_every_family_page():
    text = INDEX.read_text()
    for page in sorted(PAGES.glob("*.md")):
        assert f"(families/{page.name})" in text, f"docs/index.md does not link {page.name}"


def test_the_checks_have_teeth():
    """The checks catch the README of before issue 29 (002 'in progress', no gem_ experiments
    in its row) and a family page that drops an experiment."""
    old = ("| DP (gradient) EM with a heavy-tailed mean (002), in progress | Algorithm 2 and "
           "Algorithm 1. Algorithm 3 and the experiments are still to come | `dp_gem` |")
    row = family_rows(old)["002"]
    assert set(EXPERIMENTS["gem"]) - named(row) and STALE.search(row)
    text = (PAGES / "dp_gem.md").read_text().replace("gem_local", "local")
    assert set(EXPERIMENTS["gem"]) - named(text) == {"gem_local"}
    assert STALE.search("# DP gradient EM (spec 002) -- in progress")


# --------------------------------------------------------------------------------------------
# Copies of code in the docs
# --------------------------------------------------------------------------------------------


def _literal_block(doc: str) -> str:
    """The first ``::`` literal block of a reST docstring, dedented."""
    lines = doc.split("::\n", 1)[1].splitlines()
    body = []
    for line in lines[1:] if not lines[0].strip() else lines:
        if line.strip() and not line.startswith("    "):
            break
        body.append(line)
    return textwrap.dedent("\n".join(body)).strip("\n")


def test_the_registry_docstring_example_is_the_dp_mean_module():
    example = _literal_block(inspect.getdoc(estimator_registry))
    assert "registry.register(registry.Entry(" in example
    assert example in (ROOT / "dpjax" / "examples" / "dp_mean.py").read_text()


def test_the_page_lists_FAMILIES_as_the_registry_does():
    blocks = re.findall(r"```python\n(_FAMILIES = .*?)```", ADDING.read_text(), re.DOTALL)
    assert len(blocks) == 1
    shown = ast.literal_eval(blocks[0].split("=", 1)[1].strip())
    assert shown == estimator_registry._FAMILIES


def test_the_page_shows_the_example_experiment_verbatim():
    """The ``<!-- source: experiments/dp_mean.py -->`` blocks of the page, in order, are the
    module byte for byte (joined by the two blank lines between top-level definitions)."""
    blocks = re.findall(r"^<!-- source: experiments/dp_mean\.py -->\n```python\n(.*?)^```$",
                        ADDING.read_text(), re.MULTILINE | re.DOTALL)
    assert len(blocks) >= 3
    module = (ROOT / "experiments" / "dp_mean.py").read_text()
    assert "\n\n\n".join(b.strip("\n") for b in blocks) + "\n" == module


def test_the_two_release_example_composes_as_the_page_says(capsys):
    """Section 11's block runs; its ledger has the two releases, each read off its own event,
    composed by adding their budgets, never weaker than the (0.5, 0.0005) requested."""
    (code,) = re.findall(r"^<!-- run: two releases -->\n```python\n(.*?)^```$",
                         ADDING.read_text(), re.MULTILINE | re.DOTALL)
    namespace: dict = {"__name__": "__doc__"}
    exec(compile(code, str(ADDING), "exec"), namespace)
    led = namespace["res"].ledger
    assert [r.statistic for r in led.releases] == ["clipped mean (l2 radius C)",
                                                   "mean squared norm (range C^2)"]
    assert led.composition == "basic" and all(r.count == 1 for r in led.releases)
    eps = [e for r in led.releases for e in r.epsilons]
    deltas = [dl for r in led.releases for dl in r.deltas]
    assert led.approx_dp.epsilon == pytest.approx(sum(eps), rel=1e-12)
    assert led.approx_dp.delta == pytest.approx(sum(deltas), rel=1e-12)
    assert sum(deltas) == pytest.approx(0.0005)
    assert 0 < led.approx_dp.epsilon <= 0.5 * (1 + 1e-6)
    assert led.requested == namespace["ApproxDP"](0.5, 0.0005)
    printed = capsys.readouterr().out
    assert printed.count("release x1") == 2 and "composition: basic" in printed
    # the sensitivities are those the page states: 2C/n and C^2/n
    assert [r.sensitivity for r in led.releases] == pytest.approx([8 / 1000, 16 / 1000])


def test_the_page_explains_every_column_of_the_audit_table():
    """Section 10's table of columns names exactly the columns ``python -m dpjax.audit --table``
    prints (its header is :func:`dpjax.audit.format_table`'s), in order."""
    from dpjax.audit import format_table

    header = format_table([]).splitlines()[0]
    printed = [c.strip() for c in header.strip("|").split("|")]
    section = ADDING.read_text().split("## 10. ", 1)[1].split("\n## ", 1)[0]
    section = re.sub(r"```.*?```", "", section, flags=re.DOTALL)  # not the example output
    rows = re.findall(r"^\| ([^|]+?) \| .+ \|$", section, re.MULTILINE)
    assert rows[0] == "column"
    assert rows[1:] == printed


# --------------------------------------------------------------------------------------------
# Durations
# --------------------------------------------------------------------------------------------

DURATION = re.compile(r"\b\d+(?:\.\d+)?\s*(?:minutes?|min|seconds?|hours?|h|s(?!\.e\.))\b")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def _paragraphs(text: str) -> list[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # code blocks quote no timings
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


REPORT = ROOT / "experiments" / "reports" / "em_fig1.md"
# the pages that took over the README's text, which quoted timings with their dates
MOVED = {
    "concepts": ROOT / "docs" / "concepts.md",
    "command_line": ROOT / "docs" / "command_line.md",
    "privacy": ROOT / "docs" / "privacy.md",
    "contributing": ROOT / "CONTRIBUTING.md",
}
OWN_STUDY = ROOT / "docs" / "own_study.md"


@pytest.mark.parametrize("doc", [REPORT, MOVED["contributing"]], ids=lambda p: p.name)
def test_every_quoted_duration_is_dated(doc):
    """A time the main command's report (or the development guide) quotes is a measurement:
    the paragraph that quotes it says when it was measured."""
    quoted = 0
    for para in _paragraphs(doc.read_text()):
        if DURATION.search(para):
            quoted += 1
            assert DATE.search(para), f"{doc.name}: a duration without its date: {para[:200]!r}"
    assert quoted, f"{doc.name}: quotes no measured duration"
    assert DURATION.search("about 2.5 minutes") and DURATION.search("in 25 s on 2 cores")
    assert not DURATION.search("mean +- 1.96 s.e.") and not DATE.search("2.5 minutes")


@pytest.mark.parametrize("doc", [*MOVED.values(), OWN_STUDY, INDEX],
                         ids=lambda p: p.name)
def test_the_pages_date_every_duration_they_quote(doc):
    for para in _paragraphs(doc.read_text()):
        if DURATION.search(para):
            assert DATE.search(para), f"{doc.name}: a duration without its date: {para[:200]!r}"


def test_the_readme_quotes_no_timing_and_points_to_the_report_that_does():
    """Timings live in the reports and benchmarks/README.md: the README quotes none, and the
    paragraph of its main command links the em_fig1 report, which quotes the main command's
    measurement (from a fresh clone, install included) with its date."""
    text = README.read_text()
    timed = [p for p in _paragraphs(text) if DURATION.search(p)]
    assert not timed, f"README.md quotes a timing: {timed[0][:200]!r}"
    before = text.split("<!-- main-command -->", 1)[0]
    assert "(experiments/reports/em_fig1.md)" in _paragraphs(before)[-1]
    (main,) = [p for p in _paragraphs(REPORT.read_text()) if "fresh clone" in p]
    assert DURATION.search(main) and DATE.search(main)


# --------------------------------------------------------------------------------------------
# The README: short, every link resolves, its example true, the rest moved to the site
# --------------------------------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_is_short():
    assert len(README.read_text()) <= 6000, f"README.md: {len(README.read_text())} characters"


def test_every_readme_link_resolves():
    links = LINK.findall(README.read_text())
    assert len(links) >= 10
    for link in links:
        if re.match(r"[a-z]+:", link):  # a URL
            continue
        path = link.split("#", 1)[0]
        assert (ROOT / path).exists(), f"README.md links {link}, which does not exist"


def test_the_readme_links_the_pages_that_hold_what_it_moved():
    text = README.read_text()
    for page in ["docs/index.md", "docs/own_study.md", "docs/concepts.md",
                 "docs/command_line.md", "docs/privacy.md", "CONTRIBUTING.md", "LICENSE",
                 "CITATION.cff"]:
        assert f"({page})" in text, f"README.md does not link {page}"


def test_ci_reads_the_test_command_from_the_readme():
    """``.ci/run`` extracts the block after ``<!-- test-command -->`` with awk: run that very
    line on the README and get the one command, which builds the site strictly and tests."""
    import shutil
    import subprocess

    if shutil.which("awk") is None:
        pytest.skip("no awk on this machine")
    (line,) = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines()
               if ln.startswith("cmd=$(awk ")]
    program = line.removeprefix("cmd=$(awk ").removesuffix(" README.md)")
    out = subprocess.run(["awk", program.strip("'"), str(README)], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out.count("\n") == 0, out
    assert "mkdocs build --strict" in out and "python -m pytest" in out
    assert out.startswith("python3 -m venv .venv") and 'pip install -e ".[dev]"' in out


def test_the_readme_example_prints_the_ledger_it_shows(capsys):
    (code,) = re.findall(r"^<!-- readme-example -->\n```python\n(.*?)^```$",
                         README.read_text(), re.MULTILINE | re.DOTALL)
    (shown,) = re.findall(r"^<!-- readme-output -->\n```text\n(.*?)^```$",
                          README.read_text(), re.MULTILINE | re.DOTALL)
    exec(compile(code, str(README), "exec"), {"__name__": "__doc__"})
    printed = capsys.readouterr().out.splitlines()
    shown = shown.splitlines()
    assert printed[1:] == shown[1:], "the README's ledger is not the one its example prints"
    got, want = (np.array(line.strip("[]").split(), float) for line in (printed[0], shown[0]))
    np.testing.assert_allclose(got, want, atol=0.011)


def test_the_moved_text_lives_on_pages_of_the_site():
    """What the README held is on pages the strict site build checks (each is in mkdocs.yml's
    nav; CONTRIBUTING.md is served by docs/hooks.py as contributing.md)."""
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in ["concepts.md", "command_line.md", "privacy.md", "own_study.md",
                 "contributing.md"]:
        assert f": {page}\n" in nav, f"mkdocs.yml's nav lacks {page}"
    held = {
        "concepts": ["BoundedStatistic", "Release.from_event", "base.run", "fold_in(data_key, r)",
                     "sweep.PerRepetition", "sweep.study_function", "dpjax.tune",
                     "Clopper-Pearson", "local_mechanism"],
        "command_line": ["results.csv", "iterations.csv", "summary.csv", "config.json",
                         "figure.png", "--no-compile-cache", "dpjax run --all", "--compare-only",
                         "--cpu-devices", "jax.distributed.initialize", "dpjax demo"],
        "privacy": ["replace-one", "PrivacyBudgetError", "secure=True", "Mironov",
                    "One delta policy", 'on_invalid="clip"', "sanitize",
                    "tests/test_adversarial.py", "TracedFitError"],
        "contributing": ["-m quick", "test_conformance.py -k", "production_compiler", "-m slow",
                         ".ci/run", "benchmarks/README.md"],
    }
    for page, phrases in held.items():
        text = MOVED[page].read_text()
        missing = [p for p in phrases if p not in text]
        assert not missing, f"{MOVED[page].name} lacks {missing}"


def test_the_privacy_page_says_what_the_default_path_assumes():
    text = MOVED["privacy"].read_text()
    top = text.split("\n## ", 2)[1]  # the first section
    assert top.startswith("What the default noise path assumes")
    for phrase in ["idealised mechanism", "[-5.42, 5.22]", "P(Z > 5.2201 - Delta/sigma)",
                   "secure=True", "(audits.md#what-the-default-noise-path-assumes)"]:
        assert phrase in top, f"docs/privacy.md's first section lacks {phrase!r}"
    # the table's lower bounds on the true delta (Gaussian calibrated at delta = 1e-6)
    from scipy.optimize import brentq
    from scipy.stats import norm

    row = re.search(r"^\s*\| true delta at least \|(.*)\|$", top, re.MULTILINE)[1]
    shown = [float(v) for v in row.split("|")]
    for eps, bound in zip([3, 5, 8, 20], shown):
        mu = brentq(lambda m, e=eps: norm.cdf(-e / m + m / 2)
                    - math.exp(e) * norm.cdf(-e / m - m / 2) - 1e-6, 1e-3, 60)
        assert norm.sf(5.2201 - mu) == pytest.approx(bound, rel=0.05)


def test_license_and_citation_agree_with_pyproject():
    import yaml

    pyproject = (ROOT / "pyproject.toml").read_text()
    meta = {"version": re.search(r'^version = "([^"]+)"$', pyproject, re.MULTILINE)[1]}
    assert re.search(r'^license = \{ text = "Apache-2.0" \}$', pyproject, re.MULTILINE)
    lic = (ROOT / "LICENSE").read_text()
    assert "Apache License" in lic and "Version 2.0, January 2004" in lic
    assert "END OF TERMS AND CONDITIONS" in lic
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    for key in ["cff-version", "message", "title", "authors", "version", "license",
                "date-released"]:
        assert key in cff, f"CITATION.cff lacks {key}"
    assert cff["cff-version"] == "1.2.0"
    assert str(cff["version"]) == meta["version"]
    assert cff["license"] == "Apache-2.0"
    assert cff["authors"] == [{"name": "The dpjax developers"}]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", str(cff["date-released"]))
    assert meta["version"] in README.read_text()  # the README's BibTeX entry


# --------------------------------------------------------------------------------------------
# Links that work on GitHub and in the site
# --------------------------------------------------------------------------------------------


def test_the_index_links_resolve_in_the_repository():
    """docs/index.md links the experiments' index and the benchmarks by their paths in the
    repository (what GitHub shows); docs/hooks.py serves those files in the site and points
    the links there, so both work (the strict build checks the site's)."""
    text = INDEX.read_text()
    assert "(../experiments/README.md)" in text and "(../benchmarks/README.md)" in text
    for link in LINK.findall(text):
        if re.match(r"[a-z]+:", link):
            continue
        path = link.split("#", 1)[0]
        assert (INDEX.parent / path).exists(), f"docs/index.md links {link}: no such file"


def test_the_hook_points_repository_links_to_the_site():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    hooks._SITE.update({"experiments/README.md": "experiments/index.md",
                        "benchmarks/README.md": "benchmarks.md",
                        "CONTRIBUTING.md": "contributing.md",
                        "experiments/reports/em_fig1.md": "experiments/reports/em_fig1.md"})
    md = ("[a](../experiments/README.md) [b](../benchmarks/README.md#x) [c](install.md) "
          "[d](https://example.org/a.md) [e](../experiments/reports/em_fig1.md) "
          "[f](../nowhere.md) [g](#top)")
    assert hooks.rewrite_links(md, "docs/index.md", "index.md") == (
        "[a](experiments/index.md) [b](benchmarks.md#x) [c](install.md) "
        "[d](https://example.org/a.md) [e](experiments/reports/em_fig1.md) "
        "[f](../nowhere.md) [g](#top)")
    assert hooks.rewrite_links("[a](docs/architecture.md) [b](benchmarks/README.md)",
                               "CONTRIBUTING.md", "contributing.md") == (
        "[a](architecture.md) [b](benchmarks.md)")
    assert hooks.rewrite_links("[r](reports/em_fig1.md)", "experiments/README.md",
                               "experiments/index.md") == "[r](reports/em_fig1.md)"


# --------------------------------------------------------------------------------------------
# The example experiment runs
# --------------------------------------------------------------------------------------------


def test_the_example_experiment_runs_from_the_command_line(tmp_path, capsys):
    """``dpjax run dp_mean`` at a tiny size writes the results files, a summary row per level
    (the non-private one included) and the figure; ``dpjax plot`` redraws it."""
    from dpjax import cli

    out = tmp_path / "dp_mean"
    assert cli.main(["run", "dp_mean", "--out", str(out), "--quick", "--reps", "2",
                     "--set", "n=40", "--set", "eps_grid=0.5,1", "--no-progress"]) == 0
    summary = (out / "summary.csv").read_text().splitlines()
    assert summary[0].startswith("experiment,method,n,d,clip,delta,epsilon,mean,se")
    assert [line.split(",")[6] for line in summary[1:]] == ["0.5", "1.0", "inf"]
    meta = json.loads((out / "config.json").read_text())
    assert meta["config"]["n"] == 40
    assert (out / "figure.png").stat().st_size > 0
    (out / "figure.png").unlink()
    assert cli.main(["plot", "dp_mean", "--out", str(out)]) == 0
    assert (out / "figure.png").stat().st_size > 0
    capsys.readouterr()


# --------------------------------------------------------------------------------------------
# The "Your own study" page's study runs
# --------------------------------------------------------------------------------------------


def _own_study_blocks(tag: str) -> list[str]:
    return re.findall(rf"^<!-- {re.escape(tag)} -->\n```python\n(.*?)^```$",
                      OWN_STUDY.read_text(), re.MULTILINE | re.DOTALL)


def _write_study(tmp_path, monkeypatch, *, figure: bool) -> Path:
    """The page's ``my_study.py`` (with the figure's block appended if ``figure``) in
    ``tmp_path``, importable as ``my_study`` for this test only."""
    (study,) = _own_study_blocks("study: my_study.py")
    (plot,) = _own_study_blocks("study: my_study.py, appended")
    path = tmp_path / "my_study.py"
    path.write_text(study + ("\n\n" + plot if figure else ""))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_study", raising=False)
    return path


def test_the_own_study_page_links_and_is_linked():
    assert "(own_study.md)" in INDEX.read_text().split("## Where to go", 1)[1]
    assert "(docs/own_study.md)" in README.read_text()
    (study,) = _own_study_blocks("study: my_study.py")
    assert len(study.splitlines()) <= 50, "the page's study file is meant to be short"


def test_the_own_study_runs_from_python(tmp_path, monkeypatch):
    """The page's file at its quick size: two estimators side by side at n = 1000, each at
    epsilon = 1 and its non-private limit; the page's figure block draws it, and
    ``study.replot`` redraws it from the files."""
    _write_study(tmp_path, monkeypatch, figure=True)
    import my_study

    from dpjax.study import replot, run_experiment

    out = tmp_path / "results"
    study = run_experiment(my_study.my_study, out, quick=True, reps=2, progress=False)
    got = {(r["method"], r["n"], r["epsilon"]) for r in study.summary}
    assert got == {(m, 1000, e) for m in ("noisy-gd", "noisy-iht") for e in (1.0, math.inf)}
    by = {(r["method"], r["epsilon"]): r["mean"] for r in study.summary}
    for m in ("noisy-gd", "noisy-iht"):  # the noise costs accuracy at n = 1000
        assert by[m, 1.0] > by[m, math.inf]
    meta = json.loads((out / "config.json").read_text())
    assert meta["config"]["n_grid"] == [1000] and meta["config"]["eta"] == 4.0
    levels = meta["settings"][0]["levels"]
    assert [lv["ledger"]["is_private"] for lv in levels] == [True, False]
    (out / "figure.png").unlink()
    assert replot(my_study.my_study, out) == out / "figure.png"
    assert (out / "figure.png").stat().st_size > 0


def test_the_own_study_gradient_block_matches_finite_differences(tmp_path, monkeypatch,
                                                                 capsys):
    _write_study(tmp_path, monkeypatch, figure=False)
    (code,) = _own_study_blocks("run: own study gradient")
    namespace: dict = {"__name__": "__doc__"}
    exec(compile(code, str(OWN_STUDY), "exec"), namespace)
    grad, fd = float(namespace["grad"]), float(namespace["fd"])
    assert np.isfinite(grad) and grad != 0
    assert grad == pytest.approx(fd, rel=0.05, abs=1e-3)
    assert "d/d eta" in capsys.readouterr().out


def test_the_own_study_runs_from_the_command_line(tmp_path, monkeypatch, capsys):
    """``dpjax run my_study.py`` as the page shows it: ``--help`` lists the settings, a quick
    run writes the files, a rerun with more repetitions reuses the finished ones and says so,
    and ``dpjax plot --out`` finds the file again from ``config.json``."""
    from dpjax import cli

    path = _write_study(tmp_path, monkeypatch, figure=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", str(path), "--help"])
    assert exc.value.code == 0
    assert "n_grid" in capsys.readouterr().out
    out = tmp_path / "results"
    args = ["run", str(path), "--out", str(out), "--quick", "--no-progress"]
    assert cli.main([*args, "--reps", "2"]) == 0
    assert (out / "summary.csv").is_file() and (out / "figure.png").is_file()
    capsys.readouterr()
    assert cli.main([*args, "--reps", "3"]) == 0
    assert "reused" in capsys.readouterr().err
    (out / "figure.png").unlink()
    assert cli.main(["plot", "--out", str(out)]) == 0
    assert (out / "figure.png").stat().st_size > 0
