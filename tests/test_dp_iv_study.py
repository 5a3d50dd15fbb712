"""DP-2S-GD through the sweep engine: the error falls in n and in rho (Monte Carlo, with
standard errors), one compile per shape, the experiments' display columns, the Card data, and
the summary's extra metrics."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base, results, sweep
from dpjax.accounting import zcdp_to_approx_dp
from dpjax.algorithms import dp_iv
from dpjax.experiments._iv_common import INF, IVRecord, ZeroInit, level, parameters, tracked
from dpjax.models.iv import IVData, LinearIV
from dpjax.sweep import DataPlan, Setting

MODEL = LinearIV(p=2, q=2, r=2)
T = 10


def _setting(n, rhos):
    prm, truth = parameters(MODEL, 3)
    steps = dp_iv.paper_step_sizes(prm.theta, n)
    est = dp_iv.dp_2s_gd(T)
    g = dp_iv.clipping_threshold(n, 2, T)
    levels = tuple(level(est, n, rho1=r, rho2=r, eta=steps.eta, alpha=steps.alpha, gamma1=g,
                         gamma2=g) for r in rhos)
    return Setting(key=f"test-iv,n={n}", columns={"method": est.name, "n": n},
                   estimator=tracked(est), simulate=MODEL.simulate, init=ZeroInit(2, 2),
                   record=IVRecord(2), truth=truth, plan=DataPlan(1, n),
                   hparams_type=dp_iv.DPIVHyperparams, levels=levels, n=n)


def test_error_decreases_in_n_and_rho_within_monte_carlo_error():
    reps, rhos = 40, (0.05, 5.0)
    out = {}
    for n in (300, 3000):
        s = _setting(n, rhos)
        before = sweep.compile_count()
        res = sweep.run_setting(s, reps=reps, seed=11, num_devices=1)
        assert sweep.compile_count() == before + 1  # one compile per shape ...
        res2 = sweep.run_setting(s, reps=reps, seed=12, num_devices=1,
                                 levels=[dict(lv, rho1=lv["rho1"] * 2) for lv in s.levels])
        assert sweep.compile_count() == before + 1  # ... not per privacy level
        assert not np.allclose(res["error"], res2["error"])
        out[n] = res["error"][:, :, -1]  # (reps, levels) final error
    mean = {k: v.mean(0) for k, v in out.items()}
    se = {k: v.std(0, ddof=1) / math.sqrt(reps) for k, v in out.items()}

    def smaller(a_mean, a_se, b_mean, b_se):  # a < b by more than 3 standard errors
        return b_mean - a_mean > 3 * math.hypot(a_se, b_se)

    for li in range(2):  # in n, at each rho
        assert smaller(mean[3000][li], se[3000][li], mean[300][li], se[300][li])
    for n in (300, 3000):  # in rho, at each n
        assert smaller(mean[n][1], se[n][1], mean[n][0], se[n][0])


def test_level_display_columns_come_from_the_ledger_of_the_events():
    est = dp_iv.dp_2s_gd(20, "paper")
    lv = level(est, 1000, rho1=1.0, rho2=1.0, eta=0.5, alpha=0.1, gamma1=30.0, gamma2=30.0)
    assert lv["rho"] == 2.0 and lv["rho_delivered"] == pytest.approx(1.0)  # paper: rho/2
    assert lv["epsilon"] == pytest.approx(zcdp_to_approx_dp(1.0, 1e-5).epsilon)
    assert lv["epsilon_bs"] == pytest.approx(1.0 + 2 * math.sqrt(math.log(1e5)))
    tight = level(dp_iv.dp_2s_gd(20, "tight"), 1000, rho1=1.0, rho2=1.0, eta=0.5, alpha=0.1,
                  gamma1=30.0, gamma2=30.0)
    assert tight["rho_delivered"] == pytest.approx(2.0)
    default = level(dp_iv.dp_2s_gd(20), 1000, rho1=1.0, rho2=1.0, eta=0.5, alpha=0.1,
                    gamma1=30.0, gamma2=30.0)
    assert default["rho_delivered"] == pytest.approx(2.0)  # the default spends the request
    alg3 = level(dp_iv.dp_2s_gd_beta_only(20), 1000, rho1=INF, rho2=1.0, eta=0.5, alpha=0.1,
                 gamma2=30.0)
    # Algorithm 3: its first stage is a non-private release, so the run is not DP; its beta
    # events carry the true sensitivity, n^2 x the paper-calibrated rho2/2 (vacuous).
    assert alg3["rho"] == 1.0 and math.isinf(alg3["rho_delivered"])
    assert math.isinf(alg3["epsilon"])
    est3 = dp_iv.dp_2s_gd_beta_only(20)
    hp3 = dp_iv.make_hparams(INF, 1.0, 0.5, 0.1, INF, 30.0)
    zero = IVData(jnp.ones((1000, 1)), jnp.zeros((1000, 1)), jnp.zeros((1000,)))
    led3 = est3.ledger(1000, hp3, base.probe_events(est3, zero, (jnp.zeros((1, 1)),
                                                                 jnp.zeros((1,))), hp3))
    assert sum(b.rho for b in led3.releases[1].budgets()) == pytest.approx(1000**2 * 0.5,
                                                                          rel=1e-6)
    assert math.isinf(level(dp_iv.two_stage_gd(20), 1000, rho1=INF, rho2=INF, eta=0.5,
                            alpha=0.1)["epsilon"])


def test_card_data_match_the_paper_and_linearmodels():
    from linearmodels.datasets import card
    from linearmodels.iv import IV2SLS

    from dpjax.experiments.iv_card import COLUMNS, INSTRUMENTS, card_data

    data = card_data()
    assert data.n == 2191  # complete cases incl. KWW (spec 004 §5.2)
    np.testing.assert_allclose(data.z.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(data.z.std(0), 1.0, atol=1e-12)
    df = card.load()[list(COLUMNS)].dropna()
    ref = IV2SLS(df["lwage"], np.ones(len(df)), df[["educ"]], df[list(INSTRUMENTS)]).fit()
    assert data.beta_hat[0] == pytest.approx(float(ref.params["educ"]), rel=1e-10)
    assert data.beta_hat[0] == pytest.approx(0.07441, abs=1e-5)
    beta_jax = dp_iv.fit_2sls((data.z, data.x, data.y)).estimate
    assert beta_jax[0] == pytest.approx(data.beta_hat[0], rel=1e-4)


def test_summarise_extra_metrics():
    rows = [{"g": 1, "error": e, "estimate": v} for e, v in [(1.0, 2.0), (3.0, 4.0), (5.0, 9.0)]]
    (row,) = results.summarise(rows, ["g"], extra=("estimate",))
    assert row["mean"] == 3.0 and row["count"] == 3
    assert row["estimate_mean"] == 5.0
    assert row["estimate_sd"] == pytest.approx(np.std([2.0, 4.0, 9.0], ddof=1))
    assert row["estimate_se"] == pytest.approx(row["estimate_sd"] / math.sqrt(3))
    assert "estimate_mean" not in results.summarise(rows, ["g"])[0]


@pytest.mark.parametrize("name", ["iv_fig3", "iv_fig4", "iv_fig6", "iv_fig7", "iv_fig8",
                                  "iv_fig9", "iv_card"])
def test_experiment_settings_build_with_uniform_columns(name):
    from dpjax.experiments import registry
    from dpjax.study import resolve_config

    exp = registry()[name]
    for quick in (False, True):
        settings = exp.settings(resolve_config(exp, quick=quick))
        level_keys = {frozenset(lv) for s in settings for lv in s.levels}
        column_keys = {frozenset(s.columns) for s in settings}
        assert len(level_keys) == 1 and len(column_keys) == 1  # summary.csv groups on these
        assert {"epsilon", "delta", "rho1", "rho2"} <= next(iter(level_keys))
        assert {"method", "n", "d", "s"} <= next(iter(column_keys))
        assert len({s.key for s in settings}) == len(settings)
        for s in settings:
            assert s.estimator.batching == "full" and s.plan.num_blocks == 1


def test_an_iv_experiment_runs_end_to_end(tmp_path):
    from dpjax.experiments import registry
    from dpjax.study import run_experiment

    exp = registry()["iv_fig8"]
    out = run_experiment(exp, tmp_path, reps=3, quick=True, progress=False,
                         overrides={"n": "300", "num_gammas": "2", "T": "3"})
    assert (tmp_path / "figure.png").stat().st_size > 0
    rows = results.read_csv(tmp_path / "summary.csv")
    assert {r["gamma1"] for r in rows} >= {1.0, 1000.0} and all(r["count"] == 3 for r in rows)
    assert {"epsilon", "delta", "clip2_mean"} <= set(rows[0])
    led = out.config["settings"][0]["levels"][0]["ledger"]
    assert led["composition"] == "zcdp" and led["guarantee"]["rho"] == pytest.approx(5.0)


def test_an_iv_study_takes_delta_and_records_it_in_the_ledger(tmp_path):
    """delta is a setting of every IV experiment: it reaches the hyperparameters, the ledger's
    (epsilon, delta) conversion in config.json and the results columns."""
    import json

    from dpjax import accounting
    from dpjax.experiments import registry
    from dpjax.study import ConfigError, run_experiment

    exp = registry()["iv_fig8"]
    small = {"n": "300", "num_gammas": "2", "T": "3"}
    run_experiment(exp, tmp_path, reps=2, quick=True, progress=False,
                   overrides=small | {"delta": "1e-3"})
    cfg = json.loads((tmp_path / "config.json").read_text())
    levels = [lv for s in cfg["settings"] for lv in s["levels"]]
    private = [lv for lv in levels if lv["ledger"]["is_private"]]
    assert private
    for lv in levels:
        assert lv["hparams"]["delta"] == 1e-3
    for lv in private:
        led = lv["ledger"]
        assert led["approx_dp"]["delta"] == 1e-3
        rho = led["guarantee"]["rho"]
        assert led["approx_dp"]["epsilon"] == pytest.approx(
            accounting.zcdp_to_approx_dp(rho, 1e-3).epsilon)
    assert {r["delta"] for r in results.read_csv(tmp_path / "summary.csv")} == {1e-3}
    with pytest.raises(ConfigError, match="delta"):
        run_experiment(exp, tmp_path / "bad", reps=1, quick=True, progress=False,
                       overrides=small | {"delta": "1.5"})


def test_final_rows_keep_one_row_per_setting_level_and_repetition(tmp_path):
    """Every recorded metric is left out of final_rows' grouping: a metric that changes between
    iterations (here error_of_2sls, 0 before the first step) must not split a run in two."""
    from dpjax.experiments import registry
    from dpjax.experiments._common import final_rows
    from dpjax.study import run_experiment

    out = run_experiment(registry()["iv_fig9"], tmp_path, reps=2, quick=True, progress=False,
                         overrides={"n_grid": "500", "T_grid": "10"})
    final = final_rows(out.iteration_rows)
    assert len(final) == len(out.rows) == 2
    assert all(r["iteration"] == 1 for r in final)
    assert {r["error"] for r in final} == {r["error"] for r in out.rows}


def test_an_iv_study_takes_a_given_first_stage_theta(tmp_path):
    """--set theta_file: the simulation uses the given Theta (the IV error depends strongly on
    it), config.json records the file, and a wrong shape is one clear error."""
    import json

    from dpjax.config import ConfigError
    from dpjax.experiments import registry
    from dpjax.study import run_experiment

    exp = registry()["iv_fig8"]
    small = {"n": "300", "num_gammas": "2", "T": "3"}
    theta = tmp_path / "theta.npy"
    np.save(theta, (4.0 * np.eye(5) + 0.1).astype(np.float32))
    a = run_experiment(exp, tmp_path / "a", reps=2, quick=True, progress=False,
                       overrides=small | {"theta_file": str(theta)})
    b = run_experiment(exp, tmp_path / "b", reps=2, quick=True, progress=False,
                       overrides=small)
    assert [r["error"] for r in a.rows] != [r["error"] for r in b.rows]
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["config"]["theta_file"] == str(theta)
    np.save(theta, np.eye(3, dtype=np.float32))
    with pytest.raises(ConfigError, match=r"theta_file: Theta must be a real array of shape"):
        run_experiment(exp, tmp_path / "c", reps=1, quick=True, progress=False,
                       overrides=small | {"theta_file": str(theta)})
    assert not (tmp_path / "c").exists()
