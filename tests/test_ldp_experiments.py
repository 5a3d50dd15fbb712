"""The local-DP sparse regression experiments (spec 001, ``ldp_*``) build valid settings,
reject invalid configurations, and fit slopes correctly (the runs themselves are exercised by
``dpjax run NAME --quick``)."""

import math

import numpy as np
import pytest

from dpjax.experiments import _ldp_common, ldp_nldp, ldp_wangxu
from dpjax.study import ConfigError, resolve_config


def _exp(mod):
    (exp,) = mod.EXPERIMENTS
    return exp


def test_nldp_settings_stream_users_in_chunks_with_three_kinds_of_levels():
    cfg = resolve_config(_exp(ldp_nldp))
    settings = ldp_nldp.settings(cfg)
    assert [s.n for s in settings] == list(cfg["n_grid"])  # multiples of the chunk
    for s in settings:
        assert s.plan.num_records == s.n and s.plan.block_size <= cfg["chunk"]
        assert s.estimator.num_steps == s.plan.num_blocks and s.final_only
        eps = [lv["epsilon"] for lv in s.levels]
        assert eps.count(math.inf) == 1 and len(s.levels) == 2 * len(cfg["eps_grid"]) + 1
        lams = [lv["lam"] for lv in s.levels if math.isfinite(lv["epsilon"])]
        assert sorted(lams)[: len(cfg["eps_grid"])] == [0.0] * len(cfg["eps_grid"])
        assert all(lv["r"] == pytest.approx(cfg["c_r"] * math.sqrt(cfg["d"] * math.log(s.n)),
                                            rel=1e-6) for lv in s.levels)
    with pytest.raises(ConfigError, match="eps_grid"):
        resolve_config(_exp(ldp_nldp), {"eps_grid": "0,1"})
    with pytest.raises(ValueError, match="k: must be <= d"):
        resolve_config(_exp(ldp_nldp), {"k": "9"})


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
