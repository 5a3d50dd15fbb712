"""The DP gradient EM experiments (spec 002): configurations, settings, the Adult preparation
and the slope fit (no study is run here; `dpjax run NAME --quick` does that)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpjax.experiments import registry
from dpjax.experiments._gem_common import fit_loglog, oracle_tau
from dpjax.study import ConfigError, resolve_config

NAMES = ["gem_fig1", "gem_fig2", "gem_fig3", "gem_fig4", "gem_fig6", "gem_fig7", "gem_fig8",
         "gem_fig9", "gem_fig10", "gem_mean", "gem_slopes", "gem_adult", "gem_local"]


@pytest.mark.parametrize("name", NAMES)
def test_settings_build_with_uniform_level_columns(name):
    exp = registry()[name]
    for quick in (False, True):
        settings = exp.settings(resolve_config(exp, quick=quick))
        assert settings and len({s.key for s in settings}) == len(settings)
        keys = {frozenset(lv) for s in settings for lv in s.levels}
        assert len(keys) == 1  # summary.csv groups every row by the same level columns
        for s in settings:
            s.hparams()  # every hyperparameter field present


def test_config_errors_name_the_setting():
    with pytest.raises(ConfigError, match="model=gmm"):
        resolve_config(registry()["gem_fig7"], {"methods": "dp-em-exact"})
    with pytest.raises(ConfigError, match="eps_grid"):
        resolve_config(registry()["gem_mean"], {"eps_grid": "0.5,2"})


def test_adult_preparation():
    from dpjax.experiments.gem_adult import prepared

    p = prepared(0, "literal")
    y, beta = p["y"].astype(np.float64), p["beta"].astype(np.float64)
    assert p["n"] == 2 * p["n_high"] == 23374 and y.shape == (23374, 6)
    # centred at the midpoint of the class means: the two class means are +-beta*
    assert np.linalg.norm(y.mean(0)) < 1e-5
    assert p["sigma"] == pytest.approx(p["lambda_max"])
    assert prepared(0, "sqrt")["sigma"] == pytest.approx(math.sqrt(p["lambda_max"]))
    assert p["tau"] == pytest.approx(np.max(beta**2) + p["sigma"] ** 2)


def test_fit_loglog_and_oracle_tau():
    x = np.array([1e3, 1e4, 1e5])
    b, se = fit_loglog(x, 2.0 * x**-0.5, 0.01 * x**-0.5)
    assert b == pytest.approx(-0.5, abs=1e-9) and se < 0.01
    truth = np.full(4, 1.5, np.float32)
    assert oracle_tau("gmm", truth, 1.0, 0.1) == pytest.approx(1.5**2 + 1)
    assert oracle_tau("mrm", truth, 1.0, 0.1) == pytest.approx(4 * 9 + 8 * 2.25 + 2)
