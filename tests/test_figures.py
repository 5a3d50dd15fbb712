"""Every registered experiment's figure reads the same way (issue 16 item 4): shaded 95% bands,
the non-private curve marked, epsilon on a log axis, the paper's numbers drawn where declared.

The plot functions run on synthetic rows shaped like each experiment's ``--quick`` output
(every setting, level and recorded iteration of the quick configuration, 3 repetitions, random
metric values), so the whole registry takes a few seconds; the styles are checked through the
``gid`` that :mod:`dpjax.plotting` puts on what it draws."""

from __future__ import annotations

import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from dpjax import plotting, results  # noqa: E402
from dpjax.experiments import registry  # noqa: E402
from dpjax.experiments._common import METRICS  # noqa: E402
from dpjax.study import resolve_config  # noqa: E402

REGISTRY = registry()

# Experiments whose figure has a non-private reference curve (role "nonprivate").
NONPRIVATE = {
    "em_fig1", "em_fig2", "em_fig4", "em_rmc", "em_table3", "glm_fig1", "glm_fig2", "glm_real",
    "iv_card", "iv_fig3", "iv_fig4", "iv_fig6", "iv_fig7", "iv_fig8", "iv_fig9",
    "gem_adult", "gem_fig2", "gem_fig6", "gem_fig9", "ldp_iht", "ldp_lower",
}
# Experiments that draw numbers the paper (or its theory) states, and how many claim artists
# at least (the quick configuration may drop some).
CLAIMS = {"em_table3": 3, "iv_fig3": 1, "gem_mean": 2, "gem_slopes": 3}
# --set overrides of the quick configuration, so that the synthetic rows have what the full
# figure draws (the non-private reference, two points per curve)
QUICK_OVERRIDES = {"iv_fig3": {"references": True}, "ldp_wangxu": {"n_grid": (100_000, 300_000)},
                   "ldp_lower": {"n_grid": (100_000, 300_000),
                                 "n_grid_si": (100_000, 300_000)}}
# Plot functions that also compute something slow beside the figure: replaced here by a stub
# (the figure does not depend on it).
SLOW_EXTRAS = {"ldp_wangxu": "audits"}


def synthetic_rows(exp, seed=0, reps=3):
    """Iteration and summary rows shaped like ``dpjax run exp --quick``."""
    config = resolve_config(exp, QUICK_OVERRIDES.get(exp.name), quick=True)
    rng = np.random.default_rng(seed)
    metrics = (*METRICS, *exp.summary_extra)
    iter_rows, final = [], []
    for s in exp.settings(config):
        steps = 1 if s.final_only else s.estimator.num_steps
        for level in s.levels:
            base = {"experiment": exp.name} | dict(s.columns) | {k: float(v)
                                                                 for k, v in level.items()}
            for r in range(reps):
                for t in range(steps + 1):
                    row = base | {"rep": r, "iteration": t}
                    row |= {m: float(rng.uniform(0.05, 1.0)) / (1 + t) for m in metrics}
                    iter_rows.append(row)
                final.append(row | {"iterations": steps})
    keys = list(dict.fromkeys(k for row in final for k in row
                              if k not in {*metrics, "rep", "iteration", "iterations"}))
    summary = results.summarise(final, keys, extra=exp.summary_extra)
    return iter_rows, summary, config


@pytest.fixture
def figures(monkeypatch):
    """``figures()``: the figures drawn since the test began (``plt.close`` is disabled while
    the test runs so they stay open for inspection; they are closed afterwards)."""
    before = set(plt.get_fignums())
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda *a, **k: None)
    yield lambda: [plt.figure(i) for i in plt.get_fignums() if i not in before]
    for i in set(plt.get_fignums()) - before:
        close(i)


def _role_lines(ax, role):
    return [ln for ln in ax.get_lines() if ln.get_gid() == plotting.role_gid(role)]


def _bands(ax):
    return [c for c in ax.collections if isinstance(c, PolyCollection)
            and c.get_gid() == plotting.GID_BAND]


def _width(band):
    """A band's largest height (its upper minus its lower edge at one x), relative to its
    largest value: 0 for a band of no width drawn around a curve."""
    v = band.get_paths()[0].vertices
    heights = [np.ptp(v[v[:, 0] == x, 1]) for x in np.unique(v[:, 0])]
    return max(heights) / np.max(np.abs(v[:, 1]))


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_experiment_figure_style(name, tmp_path, figures, monkeypatch):
    exp = REGISTRY[name]
    if exp.plot is None:
        pytest.skip(f"{name} has no figure")
    if name in SLOW_EXTRAS:
        monkeypatch.setattr(sys.modules[exp.plot.__module__], SLOW_EXTRAS[name],
                            lambda *a, **k: [{"skipped": 1}])
    iter_rows, summary, config = synthetic_rows(exp)
    exp.plot(iter_rows, summary, config, tmp_path / "figure.png")
    assert (tmp_path / "figure.png").stat().st_size > 0
    figs = figures()
    assert figs, f"{name}: no figure drawn"
    axes = [ax for f in figs for ax in f.axes if ax.get_visible()]
    all_bands = nonprivate = claims = 0
    for ax in axes:
        measured = [ln for ln in ax.get_lines() if (ln.get_gid() or "").startswith("role:")
                    and ln.get_transform() == ax.transData and len(ln.get_xdata()) > 1]
        bands = _bands(ax)
        all_bands += len(bands)
        # every measured curve of more than one point has its band, and the band has a width
        # (3 repetitions of random values: a band of no width is a curve drawn from one value
        # per point, e.g. summary means read as raw values)
        assert len(bands) >= len(measured), (name, ax.get_title())
        assert all(_width(b) > 1e-6 for b in bands), (name, ax.get_title())
        nps = _role_lines(ax, "nonprivate")
        for ln in nps:
            assert ln.get_linestyle() == "--", (name, ln.get_label())
            assert "non-private" in ln.get_label().lower(), (name, ln.get_label())
            if len(nps) == 1:
                assert matplotlib.colors.same_color(ln.get_color(), "black"), (name, ln)
        nonprivate += len(nps)
        for ln in _role_lines(ax, "not-dp"):
            assert "not dp" in ln.get_label().lower(), (name, ln.get_label())
        claims += sum(ln.get_gid() == plotting.GID_CLAIM for ln in ax.get_lines())
        if "eps" in ax.get_xlabel().lower():
            assert ax.get_xscale() == "log", (name, ax.get_title())
    assert all_bands > 0, f"{name}: no error bands"
    if name in NONPRIVATE:
        assert nonprivate > 0, f"{name}: the non-private curve is not marked"
    assert claims >= CLAIMS.get(name, 0), f"{name}: the paper's claims are not drawn"


def test_roles_and_claims_in_plot_panels(tmp_path, figures):
    """The defaults of plot_panels: a curve at epsilon = inf is the non-private one; claims
    (points and rates) are drawn; an epsilon axis is logarithmic; bad claims are refused."""
    rng = np.random.default_rng(1)
    rows = [{"epsilon": e, "n": n, "rep": r, "error": float(rng.uniform(0.5, 1.5)) / n}
            for e in (0.5, 1.0, math.inf) for n in (100, 400, 1600) for r in range(4)]
    panels = [
        plotting.Panel("vs n", [plotting.Curve("eps=0.5", {"epsilon": 0.5}),
                                plotting.Curve("eps=inf", {"epsilon": math.inf})], x="n",
                       xlabel="n", logx=True,
                       claims=[plotting.Claim("rate n^-1/2", "Thm 1", slope=-0.5,
                                              through={"epsilon": 0.5})]),
        plotting.Panel("vs eps", [plotting.Curve("n=400", {"n": 400})], x="epsilon",
                       xlabel="epsilon",
                       claims=[plotting.Claim("n=400", "Table 1", x=[0.5, 1.0],
                                              y=[0.002, 0.001])]),
    ]
    plotting.plot_panels(rows, panels, tmp_path / "f.png")
    (fig,) = figures()
    a, b = fig.axes[:2]
    (np_line,) = _role_lines(a, "nonprivate")
    assert np_line.get_linestyle() == "--" and np_line.get_label() == "eps=inf (non-private)"
    assert matplotlib.colors.same_color(np_line.get_color(), "black")
    assert len(_bands(a)) == 2 and len(_bands(b)) == 1
    rate = [ln for ln in a.get_lines() if ln.get_gid() == plotting.GID_CLAIM]
    assert len(rate) == 1 and rate[0].get_label() == "paper, Thm 1: rate n^-1/2"
    x, y = rate[0].get_xdata(), rate[0].get_ydata()
    np.testing.assert_allclose(np.log(y[-1] / y[0]) / np.log(x[-1] / x[0]), -0.5)
    assert b.get_xscale() == "log" and a.get_xscale() == "log"
    # the band is mean +- 1.96 s.e.
    xs, m, se = plotting.curve_stats(rows, {"n": 400}, "epsilon")
    verts = _bands(b)[0].get_paths()[0].vertices
    assert np.isclose(verts[:, 1].max(), (m + 1.96 * se)[np.isfinite(xs)].max())
    assert "1.96 s.e." in " ".join(fig.get_suptitle().split())
    with pytest.raises(ValueError, match="either points"):
        plotting.Claim("x", "Fig. 1")
    with pytest.raises(ValueError, match="role"):
        plotting.Curve("x", {}, role="private")


def test_a_derived_rate_is_not_called_the_papers_number(tmp_path, figures):
    """origin="theory": a rate the paper does not print is labelled as theory in the legend and
    the caption, not as the paper's number; a bad origin is refused."""
    rows = [{"n": n, "error": 1.0 / math.sqrt(n), "rep": r} for n in (100, 400) for r in range(3)]
    claim = plotting.Claim("rate n^-1/2", "spec 002 §3.5", slope=-0.5, through={},
                           origin="theory")
    plotting.plot_panels(rows, [plotting.Panel("vs n", [plotting.Curve("alg", {})], x="n",
                                               xlabel="n", logx=True, claims=[claim])],
                         tmp_path / "f.png")
    (fig,) = figures()
    (rate,) = [ln for ln in fig.axes[0].get_lines() if ln.get_gid() == plotting.GID_CLAIM]
    assert rate.get_label() == "theory, spec 002 §3.5: rate n^-1/2"
    caption = " ".join(t.get_text() for t in fig.texts) + " " + fig.get_suptitle()
    assert "theoretical rates" in " ".join(caption.split())
    assert "the paper's numbers" not in " ".join(caption.split())
    with pytest.raises(ValueError, match="origin"):
        plotting.Claim("x", "s", slope=-0.5, through={}, origin="ours")


def _raw_rows(seed=2, reps=5):
    rng = np.random.default_rng(seed)
    return [{"method": m, "n": n, "rep": r, "error": float(rng.uniform(0.5, 1.5)) / n,
             "error_sym": float(rng.uniform(0.5, 1.5)) / n}
            for m in ("a", "b") for n in (100, 400, 1600) for r in range(reps)]


@pytest.mark.parametrize("y", ["error", "mean", "error_sym"])
def test_summary_rows_draw_the_bands_the_caption_promises(tmp_path, figures, y):
    """summary.csv rows (one per point, their mean and se columns) drawn by plot_panels get
    the band of mean +- 1.96 s.e. that the caption announces, the same band as the
    per-repetition rows they summarise; not a band of no width around the means."""
    raw = _raw_rows()
    summary = results.summarise(raw, ["method", "n"], extra=("error_sym",))
    metric = "error_sym" if y == "error_sym" else "error"
    panel = [plotting.Panel("vs n", [plotting.Curve("a", {"method": "a"})], x="n",
                            xlabel="n", logx=True)]
    plotting.plot_panels(raw, panel, tmp_path / "raw.png", y=metric)
    plotting.plot_panels(summary, panel, tmp_path / "summary.png", y=y)
    fig_raw, fig_summary = figures()
    assert "1.96 s.e." in " ".join(fig_summary.get_suptitle().split())
    (band_raw,) = _bands(fig_raw.axes[0])
    (band,) = _bands(fig_summary.axes[0])
    assert _width(band) > 1e-6
    np.testing.assert_allclose(band.get_paths()[0].vertices, band_raw.get_paths()[0].vertices,
                               rtol=1e-12)
    xs, m, se = plotting.curve_stats(summary, {"method": "a"}, "n", y)
    rows_a = sorted((r for r in summary if r["method"] == "a"), key=lambda r: r["n"])
    col = "error_sym_" if y == "error_sym" else ""
    np.testing.assert_array_equal(m, [r[f"{col}mean"] for r in rows_a])
    np.testing.assert_array_equal(se, [r[f"{col}se"] for r in rows_a])
    assert np.all(se > 0)


def test_summary_rows_must_be_one_per_point():
    """A summary row is a mean already: pooling two of them at one x (a where= that selects
    both methods) is refused rather than drawn as a band of no width."""
    summary = results.summarise(_raw_rows(), ["method", "n"])
    with pytest.raises(ValueError, match="one row per x"):
        plotting.curve_stats(summary, {}, "n")


def test_final_rows_is_public_and_keeps_the_last_iteration_of_each_repetition():
    """dpjax.plotting.final_rows (the rows a figure against n or epsilon plots) keeps, for
    every setting, level and repetition, the row of its last iteration; a metric outside
    METRICS is named by metrics=. The experiments' old import is the same function."""
    from dpjax.experiments import _common

    assert "final_rows" in plotting.__all__ and _common.final_rows is plotting.final_rows
    rows = [{"n": n, "epsilon": e, "rep": r, "iteration": t, "error": 10.0 * n + r - t,
             "recall": t / 10}
            for n in (100, 200) for e in (0.5, math.inf) for r in range(3) for t in range(4)]
    final = plotting.final_rows(rows, metrics=("error", "recall"))
    assert len(final) == 2 * 2 * 3
    assert all(r["iteration"] == 3 and r["error"] == 10.0 * r["n"] + r["rep"] - 3
               for r in final)
    # without naming "recall" every iteration's distinct value would be a group of its own
    assert len(plotting.final_rows(rows)) == len(rows)
