"""A model field that only the simulation reads (RMC's ``missing_prob``) does not split a
shared program: settings that differ in it run one compiled algorithm program, each on its own
data (its own model simulates them), with the results of its own kernel."""

import json

import numpy as np
import pytest

from dpjax import study, sweep
from dpjax.algorithms import dp_em, dp_gem, ldp_gem
from dpjax.models import GaussianMixture, RegressionMissingCovariates
from dpjax.models.protocol import algorithm_view
from tests.test_sweep_shared import (
    _assert_every_setting_shares_and_equals_its_own_kernel,
    _experiment_settings,
)

#: em_rmc at small sizes, n = 600 in every panel (p_base = 0.1 joins each p grid)
_SMALL = {"hd_d": 6, "hd_s": 2, "hd_n_grid": (600,), "hd_n_base": 600, "hd_p_grid": (0.0,),
          "ld_d": 3, "ld_n_grid": (600,), "ld_n_base": 600, "eps_grid": (0.5,)}


def test_algorithm_view_resets_only_the_simulation_fields():
    m = RegressionMissingCovariates(0.7, 0.3, sensitivity="paper")
    view = algorithm_view(m)
    assert view == RegressionMissingCovariates(0.7, 0.1, sensitivity="paper")
    assert view.missing_prob == RegressionMissingCovariates().missing_prob
    gmm = GaussianMixture(0.5)  # no simulation-only field: unchanged, the same object
    assert algorithm_view(gmm) is gmm


@pytest.mark.parametrize("build", [
    lambda m: dp_em.hd_dp_em(m, 3, 5, "paper"),
    lambda m: dp_em.ld_dp_em(m, 5),
    lambda m: dp_gem.dp_gem(m, 5),
    lambda m: dp_gem.clipped_gem(m, 5),
    lambda m: ldp_gem.ldp_gem(m, 5, batching="disjoint"),
])
def test_padded_forms_do_not_depend_on_the_missing_probability(build):
    a = build(RegressionMissingCovariates(1.0, 0.0))
    b = build(RegressionMissingCovariates(1.0, 0.3))
    assert a.padded is not None and a.padded == b.padded  # one compiled-program cache key
    # the per-setting kernels keep their own models (their ledgers, checks and steps)
    assert a.ledger != b.ledger


def test_em_rmc_settings_that_differ_in_p_share_programs_and_equal_their_own_kernels():
    # panels (b) and (d) of em_rmc at small sizes: HD-DP-EM at p = 0 and 0.1, LD-DP-EM and
    # gradient EM at p = 0, 0.1, 0.2 and 0.3
    _, sets = _experiment_settings("em_rmc", _SMALL | {"ld_p_grid": (0.0, 0.2, 0.3)})
    assert len(sets) == 10
    progs = _assert_every_setting_shares_and_equals_its_own_kernel(sets)
    # one program per method, not one per (method, p)
    assert len({(sweep.shape_family(s), progs[s.key]) for s in sets}) == 3


def test_the_shared_program_draws_each_settings_data_with_its_own_missing_probability():
    # through the shared program the data are each setting's own: at p = 0.9 most covariates
    # are missing, so the estimate must differ from p = 0's (it would not, were the data drawn
    # with the algorithm's model)
    _, sets = _experiment_settings("em_rmc", _SMALL | {"p_base": 0.0, "hd_p_grid": (0.0,),
                                                       "ld_p_grid": (0.9,)})
    sets = [s for s in sets if s.columns.get("method") == "gradient-em"]
    assert len(sets) == 2
    progs = sweep.plan_programs(sets)
    assert progs[sets[0].key] == progs[sets[1].key]
    out = [sweep.run_setting(s, reps=2, seed=0, num_devices=1, program=progs[s.key])
           for s in sets]
    key = next(k for k in out[0] if not k.startswith(sweep.EVENT_PREFIX))
    assert not np.allclose(np.asarray(out[0][key]), np.asarray(out[1][key]))


def test_an_em_rmc_study_over_p_compiles_one_program_per_method(tmp_path):
    import dpjax.experiments

    exp = dpjax.experiments.registry()["em_rmc"]
    before = sweep.compile_count()
    study.run_experiment(exp, tmp_path, reps=2, seed=0, progress=False, num_devices=1,
                         overrides=_SMALL | {"hd_d": 7, "ld_d": 5, "ld_p_grid": (0.0, 0.2)})
    meta = json.loads((tmp_path / "config.json").read_text())["settings"]
    assert len(meta) == 8  # HD at p = 0, 0.1; LD and gradient EM at p = 0, 0.1, 0.2
    assert len({m["program"] for m in meta}) == 3
    assert sweep.compile_count() == before + 3
    assert sorted(m["compiled"] for m in meta) == [False] * 5 + [True] * 3
