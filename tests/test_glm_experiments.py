"""The DP GLM experiment modules build valid settings and reject invalid configurations (the
runs themselves are exercised by `dpjax run NAME --quick`)."""

import math

import pytest

from dpjax.experiments import glm_fig1, glm_fig2, glm_real
from dpjax.study import ConfigError, resolve_config


def _exp(mod):
    (exp,) = mod.EXPERIMENTS
    return exp


def test_fig1_settings_cover_every_panel_with_both_calibrations():
    cfg = resolve_config(_exp(glm_fig1))
    settings = glm_fig1.settings(cfg)
    keys = {s.key for s in settings}
    assert len(keys) == len(settings)
    for d in cfg["d_grid"]:
        for method in ("alg1-paper", "alg1-gaussian"):
            assert f"{method},T=50,n=40000,d={d}" in keys
    base = [s for s in settings if s.key == "alg1-paper,T=50,n=40000,d=20"][0]
    assert {lv["epsilon"] for lv in base.levels} == {0.2, 0.5, 0.8, math.inf}
    assert all(lv["delta"] == 1 / 80000 for lv in base.levels)
    gauss = [s for s in settings if s.key == "alg1-gaussian,T=50,n=40000,d=20"][0]
    assert all(lv["rho"] > 0 and math.isfinite(lv["rho"]) for lv in gauss.levels)
    assert any("unsplit" in k for k in keys)
    with pytest.raises(ConfigError, match="T_grid"):
        resolve_config(_exp(glm_fig1), {"T": "30"})


def test_fig2_settings_follow_the_paper():
    cfg = resolve_config(_exp(glm_fig2))
    settings = glm_fig2.settings(cfg)
    by_key = {s.key: s for s in settings}
    assert {"alg5,n=20000,d=10000,s=10", "alg5,n=80000,d=10000,s=10",
            "alg5,n=40000,d=10000,s=40"} <= set(by_key)
    s40 = by_key["alg5,n=40000,d=10000,s=40"]
    assert s40.columns["s_alg"] == 80 and (s40.truth[:40] != 0).all()
    assert (s40.truth[40:] == 0).all()
    # the budget-unsplit curve: every step at (eps_base, 1/(2n)), a level of the base setting
    base = by_key["alg5,n=40000,d=10000,s=10"]
    T = cfg["T"]
    assert [(lv["epsilon"], lv["delta"]) for lv in base.levels] == [
        (0.2, 1 / 80000), (0.5, 1 / 80000), (0.8, 1 / 80000), (math.inf, 1 / 80000),
        (T * 0.5, T / 80000)]
    assert len(settings) == 5 and base.estimator.name.startswith("alg5-noisy-iht/")
    off = glm_fig2.settings(resolve_config(_exp(glm_fig2), {"unsplit": "false"}))
    assert sum(len(s.levels) for s in off) == sum(len(s.levels) for s in settings) - 1
    with pytest.raises(ConfigError, match="multiple of 4"):
        resolve_config(_exp(glm_fig2), {"d": "1001"})
    with pytest.raises(ConfigError, match="--set n_base=20: .* 50/\\(2 x 20\\) >= 1"):
        resolve_config(_exp(glm_fig2), {"n_base": "20", "n_grid": "20"})
    assert resolve_config(_exp(glm_fig2), {"n_base": "20", "n_grid": "20", "unsplit": "false"})


def test_real_data_config_and_loader():
    x, y = glm_real.load("breast_cancer")
    assert x.shape == (569, 30) and set(y.tolist()) == {0.0, 1.0}
    with pytest.raises(ConfigError, match="dataset"):
        resolve_config(_exp(glm_real), {"dataset": "swarm"})


def test_real_data_runs_through_the_sweep_with_a_split_per_repetition(tmp_path):
    """glm_real is a sweep study: each repetition's public split comes from its key and is
    shared by every setting (at epsilon = inf the two delta rules give the same answer), the
    repetitions differ, and config.json carries ledgers composed from the runs' events."""
    import json
    import math

    from dpjax import results
    from dpjax.study import run_experiment

    run_experiment(_exp(glm_real), tmp_path, reps=2, quick=True, progress=False,
                   overrides={"s_grid": "5", "T": "5"})
    rows = results.read_csv(tmp_path / "results.csv")
    free = {(r["delta_rule"], r["rep"]): r["error"] for r in rows if math.isinf(r["epsilon"])}
    assert free[("1/(2n)", 0)] == free[("1/n^2", 0)] and free[("1/(2n)", 1)] == free[("1/n^2", 1)]
    assert free[("1/(2n)", 0)] != free[("1/(2n)", 1)]  # a new split per repetition
    assert all(0.0 <= r["error"] <= 1.0 for r in rows)
    cfg = json.loads((tmp_path / "config.json").read_text())
    led = cfg["settings"][0]["levels"][0]["ledger"]
    assert led["composition"] == "basic" and led["is_private"]


def test_fig2_curves_select_one_level_each(monkeypatch):
    """Every curve of glm_fig2's figure reads exactly one level's rows, also where eps_grid
    holds T * eps_base, the total epsilon of the budget-unsplit curve (told apart by delta)."""
    cfg = resolve_config(_exp(glm_fig2), {"eps_grid": "0.2,25"})
    rows = [{"method": "alg5", "n": s.columns["n"], "s": s.columns["s"], "epsilon": lv["epsilon"],
             "delta": lv["delta"], "iteration": 0, "log_sq_error": 1.0}
            for s in glm_fig2.settings(cfg) for lv in s.levels]
    assert sum(r["epsilon"] == 25 for r in rows) == 2  # (25, 1/(2n)) and (25, T/(2n))
    panels = []
    monkeypatch.setattr(glm_fig2, "plot_panels", lambda _rows, ps, *a, **k: panels.extend(ps))
    glm_fig2.plot(rows, None, cfg, "unused.png")
    from dpjax.plotting import _match

    curves = [c for p in panels for c in p.curves]
    assert len(curves) == 6 + 6 + 4
    assert all(sum(_match(r, c.where) for r in rows) == 1 for c in curves)
