"""Shared programs: settings of one shape family that differ in n (and the number of
iterations) run through one compiled algorithm program, on padded, masked data, with the
results of today's per-setting kernel up to float round-off."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base, study, sweep
from dpjax.algorithms import dp_em, dp_glm
from dpjax.experiments._common import ZeroInit
from dpjax.experiments._em_common import BetaError, InitNearTruth
from dpjax.experiments._glm_common import GLMRecord, truth
from dpjax.models import GaussianMixture, sparse_unit_beta
from dpjax.models.glm import GLM, GLMData
from dpjax.models.gmm import GMMData
from dpjax.study import Experiment

GMM = GaussianMixture(0.5)
LOGIT = GLM()
INF = math.inf


def _em_setting(n, d, s=3, eps=(0.5, INF), method="hd-dp-em", final_only=False):
    N0 = dp_em.default_num_iterations(n)
    est = (dp_em.hd_dp_em(GMM, s, N0, "paper") if method == "hd-dp-em"
           else dp_em.ld_dp_em(GMM, N0) if method == "ld-dp-em"
           else dp_em.gradient_em(GMM, N0))
    levels = tuple({"epsilon": e, "delta": 1 / (2 * n), "eta": 0.5, "truncation": 2.0}
                   for e in eps)
    return sweep.Setting(
        key=f"{method},n={n},d={d},s={s},{final_only}", columns={"method": method, "n": n},
        estimator=est, simulate=GMM.simulate, init=InitNearTruth(0.125), record=BetaError(),
        truth=sparse_unit_beta(d, s), plan=sweep.DataPlan(N0, n // N0),
        hparams_type=dp_em.DPEMHyperparams, levels=levels, n=n, final_only=final_only)


def _glm_setting(n, d, T, calibration, eps=(0.5, INF), final_only=False):
    delta = 1 / (2 * n)
    levels = tuple({"epsilon": e, "delta": delta, "eta": 1.0, "truncation": 1.0,
                    "rho": dp_glm.calibrate_rho(e, delta, calibration, T)} for e in eps)
    return sweep.Setting(
        key=f"{calibration},T={T},n={n},d={d},{final_only}", columns={"n": n, "T": T},
        estimator=dp_glm.noisy_gd(LOGIT, T, calibration, 4.0), simulate=LOGIT.simulate,
        init=ZeroInit(), record=GLMRecord(), truth=truth(0, d), plan=sweep.DataPlan(1, n),
        hparams_type=dp_glm.GLMHyperparams, levels=levels, n=n, final_only=final_only)


def _per_setting(setting, reps, seed):
    """Today's results: the setting's own kernel (make_kernel)."""
    f = sweep.study_function(setting, reps=reps, seed=seed, num_devices=1)
    return jax.tree_util.tree_map(np.asarray, f(setting.hparams()))


def _assert_close(shared, own):
    assert set(shared) == set(own)
    for k in own:
        assert shared[k].shape == own[k].shape, k
        np.testing.assert_allclose(shared[k], own[k], rtol=2e-5, atol=2e-6, err_msg=k)


# --------------------------------------------------------------------------------------------
# One program for settings that differ in n
# --------------------------------------------------------------------------------------------


def test_settings_that_differ_only_in_n_compile_one_program(tmp_path):
    d = 23  # a dimension no other test uses: the program is compiled here
    ns = (300, 400, 500)

    def settings(c):
        return [_em_setting(n, d) for n in c["n_grid"]]

    exp = Experiment(name="shared", title="t", defaults={"n_grid": ns}, settings=settings,
                     reps=3, quick_reps=2)
    before = sweep.compile_count()
    study.run_experiment(exp, tmp_path, reps=3, seed=0, progress=False, num_devices=1)
    assert sweep.compile_count() == before + 1  # one algorithm program for the three n
    meta = json.loads((tmp_path / "config.json").read_text())["settings"]
    assert len({m["program"] for m in meta}) == 1
    assert [m["compiled"] for m in meta] == [True, False, False]
    assert "hd-dp-em/gmm" in meta[0]["program"]


def test_without_grouping_each_size_is_its_own_program():
    """The grouping is what shares: run alone, each n has its own padded sizes."""
    d = 27
    before = sweep.compile_count()
    for n in (300, 400):
        sweep.run_setting(_em_setting(n, d), reps=2, seed=0, num_devices=1)
    assert sweep.compile_count() == before + 2


def test_plan_programs_buckets_geometrically():
    # rows n0 = floor(n / ceil(log n)): 300 -> 50, 400 -> 57, 500 -> 71, 2000 -> 250
    sets = [_em_setting(n, 20) for n in (300, 400, 500, 2000)]
    sets.append(_em_setting(400, 20, eps=(0.5, 1.0, 2.0, INF)))  # 4 levels
    sets[-1] = sets[-1].__class__(**{**sets[-1].__dict__, "key": "four-levels"})
    sets.append(_em_setting(400, 20, s=4))  # another sparsity: another family
    progs = sweep.plan_programs(sets)
    small = [progs[s.key] for s in sets[:3]] + [progs["four-levels"]]
    assert len(set(small)) == 1
    assert small[0] == sweep.Program(steps=7, rows=71, levels=2)  # the largest rows and steps
    assert progs[sets[3].key] == sweep.Program(steps=8, rows=250, levels=2)  # 250 > 2 x 71
    assert progs[sets[5].key] != small[0]
    for s in sets:  # padding never more than doubles a setting's rows
        assert progs[s.key].rows <= 2 * sweep._data_rows(s)


def test_estimators_without_a_padded_form_keep_their_own_program():
    st = _em_setting(300, 20, method="gradient-em", eps=(INF,))
    assert st.estimator.padded is None and sweep.plan_programs([st]) == {}
    info = {}
    out = sweep.run_setting(st, reps=2, seed=0, num_devices=1, programs=info)
    assert "[setting " in info["program"]
    _assert_close(out, _per_setting(st, 2, 0))


def test_a_setting_too_large_to_pad_keeps_its_own_program(monkeypatch):
    monkeypatch.setattr(sweep, "SHARED_MAX_REP_BYTES", 1000)
    st = _em_setting(300, 20)
    assert sweep.plan_programs([st]) == {}
    info = {}
    sweep.run_setting(st, reps=2, seed=0, num_devices=1, programs=info)
    assert "[setting " in info["program"]


# --------------------------------------------------------------------------------------------
# Masked results equal today's per-setting kernel
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["hd-dp-em", "ld-dp-em"])
def test_dp_em_in_a_shared_program_equals_its_own_kernel(method):
    # n = 300 and 500 in one bucket: 300 runs padded (rows 50 of 71, steps 6 of 7)
    sets = [_em_setting(n, 21, method=method, eps=(0.5, 1.5, INF)) for n in (300, 500)]
    sets.append(_em_setting(300, 21, method=method, final_only=True))
    progs = sweep.plan_programs(sets)
    assert progs[sets[0].key] == progs[sets[1].key]
    assert progs[sets[0].key].rows > sweep._data_rows(sets[0])
    for st in sets:
        shared = sweep.run_setting(st, reps=3, seed=5, num_devices=1, program=progs[st.key])
        _assert_close(shared, _per_setting(st, 3, 5))


@pytest.mark.parametrize("calibration", ["paper", "gaussian"])
def test_noisy_gd_in_a_shared_program_equals_its_own_kernel(calibration):
    # n and T differ: 300 records and T = 10 run padded to 400 rows and 12 steps; three
    # levels run in groups of two (the last filled with a copy)
    sets = [_glm_setting(300, 5, 10, calibration, eps=(0.5, 1.0, INF)),
            _glm_setting(400, 5, 12, calibration),
            _glm_setting(300, 5, 10, calibration, final_only=True)]
    progs = sweep.plan_programs(sets)
    assert progs[sets[0].key] == progs[sets[1].key] == sweep.Program(12, 400, 2)
    for st in sets:
        shared = sweep.run_setting(st, reps=3, seed=2, num_devices=1, program=progs[st.key])
        _assert_close(shared, _per_setting(st, 3, 2))


def test_a_shared_program_over_several_devices_equals_one_device():
    assert len(jax.devices()) == 4  # conftest forces 4 CPU devices
    sets = [_em_setting(n, 21) for n in (300, 500)]
    prog = sweep.plan_programs(sets)[sets[0].key]
    one = sweep.run_setting(sets[0], reps=5, seed=1, num_devices=1, program=prog)
    two = sweep.run_setting(sets[0], reps=5, seed=1, chunk_size=4, num_devices=2, program=prog)
    np.testing.assert_array_equal(two["error"], one["error"])


# --------------------------------------------------------------------------------------------
# The mask masks: padded rows change nothing, whatever they hold
# --------------------------------------------------------------------------------------------


def _adversarial(rows, cols):
    vals = np.array([1e30, -1e30, np.nan, np.inf, 3.0], np.float32)
    return np.resize(vals, (rows, cols)) if cols else np.resize(vals, (rows,))


def _sizes(real, pad, steps):
    return base.Sizes(jnp.arange(real + pad) < real, jnp.float32(real), jnp.int32(steps))


@pytest.mark.parametrize("method", ["hd-dp-em", "ld-dp-em"])
def test_padded_rows_change_nothing_in_dp_em(method):
    d, n0, pad = 12, 40, 9
    est = (dp_em.hd_dp_em(GMM, 2, 4, "paper") if method == "hd-dp-em"
           else dp_em.ld_dp_em(GMM, 4))
    beta = jnp.asarray(sparse_unit_beta(d, 2))
    batch = GMM.simulate(jax.random.key(0), n0, beta)
    padded = GMMData(jnp.concatenate([batch.y, jnp.asarray(_adversarial(pad, d))]))
    hp = dp_em.DPEMHyperparams(*map(jnp.float32, (0.7, 1 / 400, 0.5, 2.0)))
    state = est.init(0.9 * beta)
    want, info_w = est.step(jax.random.key(1), state, batch, hp)
    got, info_g = est.padded.step(jax.random.key(1), state, padded, hp, _sizes(n0, pad, 4))
    np.testing.assert_allclose(got.beta, want.beta, rtol=1e-6, atol=1e-7)
    assert np.isfinite(np.asarray(got.beta)).all()
    for a, b in zip(jax.tree_util.tree_leaves(info_g.events),
                    jax.tree_util.tree_leaves(info_w.events)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("calibration", ["paper", "gaussian"])
def test_padded_rows_change_nothing_in_noisy_gd(calibration):
    d, n, pad, T = 6, 50, 7, 10
    est = dp_glm.noisy_gd(LOGIT, T, calibration, 4.0)
    beta = jnp.asarray(truth(0, d))
    data = LOGIT.simulate(jax.random.key(0), n, beta)
    padded = GLMData(jnp.concatenate([data.x, jnp.asarray(_adversarial(pad, d))]),
                     jnp.concatenate([data.y, jnp.asarray(_adversarial(pad, 0))]))
    rho = dp_glm.calibrate_rho(0.7, 1 / (2 * n), calibration, T)
    hp = dp_glm.GLMHyperparams(*map(jnp.float32, (0.7, 1 / (2 * n), 1.0, 1.0, rho)))
    state = est.init(0.5 * beta)
    want, info_w = est.step(jax.random.key(1), state, data, hp)
    got, info_g = est.padded.step(jax.random.key(1), state, padded, hp, _sizes(n, pad, T))
    np.testing.assert_allclose(got.beta, want.beta, rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree_util.tree_leaves(info_g.events),
                    jax.tree_util.tree_leaves(info_w.events)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
