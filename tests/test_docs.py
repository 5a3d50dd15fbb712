"""The docs cannot drift from the code (issue 29 item 3).

- Each paper family's row in README.md and docs/index.md, and its page in docs/families/,
  names every experiment the registry (``dpjax list``) holds for it, and none of them calls a
  family with experiments "in progress" or its experiments "still to come".
- Every registered experiment belongs to a family documented here (a new family fails until
  its docs are written); docs/index.md links every family page.
- The copies of code in the docs equal the code: the registry's docstring example and the
  ``_FAMILIES`` line of docs/adding_an_estimator.md, and the example experiment shown there.
- Every duration the README quotes carries its measurement date.
- The example experiment of docs/adding_an_estimator.md runs (``dpjax run dp_mean``).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from pathlib import Path

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


@pytest.mark.parametrize("doc", [README, INDEX], ids=lambda p: p.name)
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


@pytest.mark.parametrize("doc", [README, ROOT / "experiments" / "reports" / "em_fig1.md"],
                         ids=lambda p: p.name)
def test_every_quoted_duration_is_dated(doc):
    """A time the README (or the main command's report) quotes is a measurement: the
    paragraph that quotes it says when it was measured."""
    quoted = 0
    for para in _paragraphs(doc.read_text()):
        if DURATION.search(para):
            quoted += 1
            assert DATE.search(para), f"{doc.name}: a duration without its date: {para[:200]!r}"
    assert quoted, f"{doc.name}: the main command's duration is not quoted"
    assert DURATION.search("about 2.5 minutes") and DURATION.search("in 25 s on 2 cores")
    assert not DURATION.search("mean +- 1.96 s.e.") and not DATE.search("2.5 minutes")


def test_the_readme_and_the_report_quote_the_same_measurement():
    """The main command's time in the README is the one of the em_fig1 report."""
    readme = _paragraphs(README.read_text())
    report = (ROOT / "experiments" / "reports" / "em_fig1.md").read_text()
    (main,) = [p for p in readme if "Figure-1 study" in p and DURATION.search(p)]
    for when in DATE.findall(main):
        assert when in report, f"the README's measurement of {when} is not in the report"


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
