"""The local-DP sparse regression experiments (spec 001, ``ldp_*``) build valid settings,
reject invalid configurations, and fit slopes correctly (the runs themselves are exercised by
``dpjax run NAME --quick``)."""

import dataclasses
import math

import numpy as np
import pytest

from dpjax.experiments import _ldp_common, ldp_iht, ldp_lower, ldp_nldp, ldp_wangxu
from dpjax.study import ConfigError, resolve_config


def _exp(mod):
    (exp,) = mod.EXPERIMENTS
    return exp


def test_nldp_settings_stream_users_in_chunks_with_three_kinds_of_levels():
    cfg = resolve_config(_exp(ldp_nldp))
    settings = ldp_nldp.settings(cfg)
    n_panel = settings[: len(cfg["n_grid"])]
    assert [s.n for s in n_panel] == list(cfg["n_grid"])  # multiples of the chunk
    # the d and k panels at n_dk; the n panel's (n_dk, d, k) setting is shared, not repeated
    dk = {(s.n, s.columns["d"], s.columns["k"]) for s in settings}
    assert len(dk) == len(settings)
    assert {(cfg["n_dk"], d, cfg["k"]) for d in cfg["d_grid"]} <= dk
    assert {(cfg["n_dk"], cfg["d"], k) for k in cfg["k_grid"]} <= dk
    for s in settings:
        assert s.plan.num_records == s.n and s.plan.block_size <= cfg["chunk"]
        assert s.estimator.num_steps == s.plan.num_blocks and s.final_only
        eps = [lv["epsilon"] for lv in s.levels]
        num_eps = len(cfg["eps_grid"]) if s in n_panel else 1
        assert eps.count(math.inf) == 1 and len(s.levels) == 2 * num_eps + 1
        assert s.truth.shape == (s.columns["d"],)
        assert np.count_nonzero(s.truth) == s.columns["k"]
        lams = [lv["lam"] for lv in s.levels if math.isfinite(lv["epsilon"])]
        assert sorted(lams)[:num_eps] == [0.0] * num_eps
        d = s.columns["d"]
        assert all(lv["r"] == pytest.approx(cfg["c_r"] * math.sqrt(d * math.log(s.n)),
                                            rel=1e-6) for lv in s.levels)
    with pytest.raises(ConfigError, match="eps_grid"):
        resolve_config(_exp(ldp_nldp), {"eps_grid": "0,1"})
    with pytest.raises(ValueError, match="must be <= d"):
        resolve_config(_exp(ldp_nldp), {"k": "9"})
    with pytest.raises(ValueError, match="min\\(d_grid\\)"):
        resolve_config(_exp(ldp_nldp), {"d_grid": "2,4", "k": "3"})


def test_wangxu_settings_pair_the_two_radii_on_the_same_data():
    cfg = resolve_config(_exp(ldp_wangxu))
    settings = ldp_wangxu.settings(cfg)
    assert len(settings) == 2 * len(cfg["n_grid"])
    for n, a, b in zip(cfg["n_grid"], settings[::2], settings[1::2]):
        assert a.columns["method"] == "rectified" and b.columns["method"] == (
            "wang_xu_2021_literal")
        assert a.plan == b.plan and a.n == b.n and a.levels == b.levels
        T = math.ceil(cfg["c_t"] * math.log(n))
        assert a.estimator.num_steps == a.plan.num_blocks == T and a.n == T * (n // T)
    with pytest.raises(ConfigError, match="audit_eps"):
        resolve_config(_exp(ldp_wangxu), {"audit_eps": "2"})


def test_fit_slope_recovers_a_power_law_and_its_interval():
    x = np.array([1e5, 1e6, 1e7, 1e8])
    rng = np.random.default_rng(0)
    m = 3.0 * x ** -0.5 * np.exp(rng.normal(0, 0.01, x.size))
    s, lo, hi = _ldp_common.fit_slope(x, m, 0.01 * m)
    assert lo < -0.5 < hi and s == pytest.approx(-0.5, abs=0.03)
    s2, lo2, hi2 = _ldp_common.fit_slope(x[:2], m[:2], 0.01 * m[:2])
    assert math.isnan(lo2) and s2 == pytest.approx(-0.5, abs=0.05)


def test_iht_settings_stream_each_round_in_chunks_and_cover_the_panels():
    cfg = resolve_config(_exp(ldp_iht))
    settings = ldp_iht.settings(cfg)
    by = {(s.columns["panel"], s.columns["method"], s.columns["k"]): s for s in settings}
    for s in settings:
        assert s.plan.num_records == s.n and s.plan.block_size <= max(cfg["chunk"], 10**6)
        assert s.estimator.num_steps == s.plan.num_blocks and s.final_only
        if s.columns["method"] != "alg1":
            T = s.columns["T"]
            assert s.plan.num_blocks % T == 0 and s.columns["group"] * T == s.n
            assert s.columns["k_prime"] == min(cfg["c_k"] * s.columns["k"], cfg["d"])
            assert all(lv["r"] > 0 and lv["delta"] == 0 for lv in s.levels)
    n_panel = [s for s in settings if s.columns["panel"] == "n"]
    assert {s.columns["method"] for s in n_panel} == {"alg1", "alg2", "alg4"}
    assert len([s for s in n_panel if s.columns["method"] == "alg1"]) == len(
        cfg["n_grid"]) + len(cfg["alg1_extra_n"])
    assert {k for (p, _, k) in by if p == "k"} == set(cfg["k_grid"]) - {cfg["k"]}
    alg4 = next(s for s in n_panel if s.columns["method"] == "alg4")
    gamma = float(np.linalg.eigvalsh(ldp_iht.M.toeplitz(cfg["d"], cfg["rho"]))[-1])
    assert alg4.levels[0]["eta"] == pytest.approx(2 / (3 * gamma))
    # the noise scale follows (e^eps + 1)/(e^eps - 1) and 1/sqrt(n)
    a = ldp_iht.noise_scale(cfg, 2, 4_000_000, 2, 1.0)
    b = ldp_iht.noise_scale(cfg, 2, 1_000_000, 2, 1.0)
    ratio = math.sqrt(4) * math.log(1_000_000) / math.log(4_000_000)  # tau^2 grows with log n
    assert b / a == pytest.approx(ratio, rel=1e-3)
    with pytest.raises(ValueError, match="k_grid"):
        resolve_config(_exp(ldp_iht), {"k_grid": "1,20"})


def test_iht_panels_and_methods_select_settings():
    """``--set panels=n methods=alg2`` keeps Algorithm 2's n panel alone (the benchmark
    harness's setting); a selection with no setting is rejected."""
    cfg = resolve_config(_exp(ldp_iht), {"panels": "n", "methods": "alg2", "n_grid": "1000000"})
    (s,) = ldp_iht.settings(cfg)
    assert (s.columns["panel"], s.columns["method"]) == ("n", "alg2")
    assert [lv["epsilon"] for lv in s.levels] == [*cfg["eps_grid"], math.inf]
    cfg = resolve_config(_exp(ldp_iht), {"panels": "k,eps", "methods": "alg4"})
    assert {(s.columns["panel"], s.columns["method"]) for s in ldp_iht.settings(cfg)} == {
        ("k", "alg4")}
    with pytest.raises((ValueError, ConfigError), match="no setting to run"):
        resolve_config(_exp(ldp_iht), {"panels": "eps", "methods": "alg1,alg4"})


@pytest.mark.parametrize("methods", ["alg2", "alg4", "alg2,alg4", "alg1,alg2"])
def test_iht_method_selections_pass_the_level_check(methods):
    """The benchmark harness's ``--set panels=n methods=alg2`` runs: Algorithm 1's level keys
    (delta, r, lam: columns of every row) are not refused as read by no estimator when Alg 1
    is left out, and a typo still is."""
    from dpjax.study import _check_levels

    exp = _exp(ldp_iht)
    cfg = resolve_config(exp, {"panels": "n", "methods": methods, "n_grid": "100000"})
    settings = ldp_iht.settings(cfg)
    _check_levels(exp, settings)
    bad = [dataclasses.replace(s, levels=tuple(lv | {"etaa": 1.0} for lv in s.levels))
           for s in settings]
    with pytest.raises(ConfigError, match="etaa"):
        _check_levels(exp, bad)


def test_lower_settings_draw_the_priors_and_flag_only_below_the_curve():
    cfg = resolve_config(_exp(ldp_lower))
    settings = ldp_lower.settings(cfg)
    methods = {s.columns["method"] for s in settings}
    assert methods == set(ldp_lower.NLDP_METHODS) | set(ldp_lower.SI_METHODS)
    for s in settings:
        assert s.draw_truth is not None and s.draw_truth.draw.kind == s.columns["bound"]
        assert {lv["epsilon"] for lv in s.levels} == {*cfg["eps_grid"], math.inf}
    with pytest.raises(ValueError, match="nu_si"):
        resolve_config(_exp(ldp_lower), {"nu_si": "0.2"})
    lb = ldp_lower.curve("si", 1e6, cfg, 1.0)
    rows = [{"method": "alg2", "bound": "si", "n": 1e6, "epsilon": 1.0, "mean": m, "se": se,
             "trivial_mean": 0.3} for m, se in ((0.5 * lb, 0.1 * lb), (0.5 * lb, 0.3 * lb),
                                                 (2 * lb, 0.1 * lb))]
    assert [f["below"] for f in ldp_lower.flags(rows, cfg)] == [True, False, False]
