"""Shared programs: settings of one shape family that differ in n (and the number of
iterations) run through one compiled algorithm program, on padded, masked data, with the
results of today's per-setting kernel up to float round-off."""

import dataclasses
import functools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base, study, sweep
from dpjax.algorithms import dp_em, dp_gem, dp_glm
from dpjax.experiments._common import ZeroInit
from dpjax.experiments._em_common import BetaError, InitNearTruth
from dpjax.experiments._glm_common import GLMRecord, truth
from dpjax.mechanisms import bounded_mean_from_sum
from dpjax.models import (
    GaussianMixture,
    MixtureOfRegressions,
    RegressionMissingCovariates,
    sparse_unit_beta,
)
from dpjax.models.glm import GLM, GLMData
from dpjax.models.gmm import GMMData
from dpjax.models.mor import MoRData
from dpjax.models.rmc import RMCData
from dpjax.study import Experiment

GMM = GaussianMixture(0.5)
MOR = MixtureOfRegressions(0.5)
RMC = RegressionMissingCovariates(1.0, 0.2)
LOGIT = GLM()
INF = math.inf


def _em_setting(n, d, s=3, eps=(0.5, INF), method="hd-dp-em", final_only=False, model=GMM):
    N0 = dp_em.default_num_iterations(n)
    est = (dp_em.hd_dp_em(model, s, N0, "paper") if method == "hd-dp-em"
           else dp_em.ld_dp_em(model, N0) if method == "ld-dp-em"
           else dp_em.gradient_em(model, N0, sample_splitting=False))
    levels = tuple({"epsilon": e, "delta": 1 / (2 * n), "eta": 0.5, "truncation": 2.0}
                   for e in eps)
    return sweep.Setting(
        key=f"{method},n={n},d={d},s={s},{final_only},{model.name}",
        columns={"method": method, "n": n}, estimator=est, simulate=model.simulate,
        init=InitNearTruth(0.125), record=BetaError(),
        truth=sparse_unit_beta(d, s), plan=sweep.DataPlan(N0, n // N0),
        hparams_type=dp_em.DPEMHyperparams, levels=levels, n=n, final_only=final_only)


def _gem_setting(n, d, T, eps=(0.5, 1.0), key=""):
    levels = tuple({"epsilon": e, "delta": 1 / (2 * n), "eta": 1.0, "tau": 0.01, "zeta": 0.05,
                    "s": 0.0} for e in eps)
    return sweep.Setting(
        key=f"dp-gem,n={n},d={d},T={T}{key}", columns={"method": "dp-gem", "n": n},
        estimator=dp_gem.dp_gem(GMM, T), simulate=GMM.simulate, init=InitNearTruth(0.125),
        record=BetaError(), truth=sparse_unit_beta(d, d), plan=sweep.DataPlan(1, n),
        hparams_type=dp_gem.DPGEMHyperparams, levels=levels, n=n)


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
    # one algorithm program for the three n: compiled by the first setting, reused by the others
    assert sweep.compile_count() == before + 1
    meta = json.loads((tmp_path / "config.json").read_text())["settings"]
    assert len({m["program"] for m in meta}) == 1
    assert [m["compiled"] for m in meta] == [True, False, False]
    assert "hd-dp-em/gmm" in meta[0]["program"]


def test_without_grouping_each_setting_runs_its_own_kernel():
    """The grouping is what shares: run alone (no program), each n has its own kernel, and a
    setting alone in its bucket is left out of the plan."""
    d = 27
    before = sweep.compile_count()
    programs = set()
    for n in (300, 400):
        info = {}
        sweep.run_setting(_em_setting(n, d), reps=2, seed=0, num_devices=1, programs=info)
        assert "[setting " in info["program"]
        assert info["compiled"]  # its own kernel, compiled for it (see the test above)
        programs.add(info["program"])
    assert len(programs) == 2
    assert sweep.compile_count() == before + 2
    assert sweep.plan_programs([_em_setting(300, d), _em_setting(2000, d)]) == {}


def test_plan_programs_buckets_geometrically():
    # rows n0 = floor(n / ceil(log n)): 300 -> 50, 400 -> 57, 500 -> 71, 2000 -> 250
    sets = [_em_setting(n, 20) for n in (300, 400, 500, 2000)]
    sets.append(_em_setting(400, 20, eps=(0.5, 1.0, 2.0, INF)))  # 4 levels
    sets[-1] = sets[-1].__class__(**{**sets[-1].__dict__, "key": "four-levels"})
    sets.append(_em_setting(400, 20, method="ld-dp-em"))  # another family
    sets.append(_em_setting(2500, 20))  # rows 312: shares with n = 2000, not with the rest
    sets.append(_em_setting(400, 20, s=4))  # another sparsity: the same family, at runtime
    progs = sweep.plan_programs(sets)
    small = [progs[s.key] for s in sets[:3]] + [progs["four-levels"], progs[sets[7].key]]
    assert len(set(small)) == 1
    # the largest rows, steps and sparsity
    assert small[0] == sweep.Program(steps=7, rows=71, levels=2, s_max=4)
    assert progs[sets[3].key] == progs[sets[6].key] == sweep.Program(steps=8, rows=312,
                                                                      levels=2, s_max=3)
    assert sets[5].key not in progs  # another family, alone in it: its own kernel
    for s in progs:  # padding never more than doubles a setting's rows
        st = next(x for x in sets if x.key == s)
        assert progs[s].rows <= 2 * sweep._data_rows(st)


def test_estimators_without_a_padded_form_keep_their_own_program():
    sets = [_em_setting(n, 20) for n in (300, 400)]
    sets = [dataclasses.replace(st, estimator=st.estimator._replace(padded=None))
            for st in sets]
    assert sweep.plan_programs(sets) == {}
    st = sets[0]
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


@pytest.mark.parametrize("method,model", [("hd-dp-em", GMM), ("ld-dp-em", GMM),
                                          ("hd-dp-em", MOR), ("hd-dp-em", RMC)])
def test_dp_em_in_a_shared_program_equals_its_own_kernel(method, model):
    # n = 300 and 500 in one bucket: 300 runs padded (rows 50 of 71, steps 6 of 7)
    sets = [_em_setting(n, 21, method=method, eps=(0.5, 1.5, INF), model=model)
            for n in (300, 500)]
    sets += [_em_setting(n, 21, method=method, final_only=True, model=model)
             for n in (300, 500)]
    progs = sweep.plan_programs(sets)
    assert progs[sets[0].key] == progs[sets[1].key]
    assert progs[sets[0].key].rows > sweep._data_rows(sets[0])
    for st in sets:
        shared = sweep.run_setting(st, reps=3, seed=5, num_devices=1, program=progs[st.key])
        _assert_close(shared, _per_setting(st, 3, 5))


def test_gradient_em_on_all_data_in_a_shared_program_equals_its_own_kernel():
    # the non-private twin of em_fig2: every step on all n records (full batching)
    sets = [_em_setting(n, 21, method="gradient-em", eps=(INF,)) for n in (300, 500)]
    assert sets[0].estimator.batching == "full"
    progs = sweep.plan_programs(sets)
    assert progs[sets[0].key] == progs[sets[1].key]
    for st in sets:
        shared = sweep.run_setting(st, reps=3, seed=5, num_devices=1, program=progs[st.key])
        _assert_close(shared, _per_setting(st, 3, 5))


def test_dp_gem_in_a_shared_program_equals_its_own_kernel():
    # n and T differ (s and rho are functions of both)
    sets = [_gem_setting(300, 4, 6), _gem_setting(500, 4, 8)]
    progs = sweep.plan_programs(sets)
    assert progs[sets[0].key] == progs[sets[1].key] == sweep.Program(8, 500, 2)
    for st in sets:
        shared = sweep.run_setting(st, reps=3, seed=4, num_devices=1, program=progs[st.key])
        _assert_close(shared, _per_setting(st, 3, 4))


@pytest.mark.parametrize("calibration", ["paper", "gaussian"])
def test_noisy_gd_in_a_shared_program_equals_its_own_kernel(calibration):
    # n and T differ: 300 records and T = 10 run padded to 400 rows and 12 steps; three
    # levels run in groups of two (the last filled with a copy)
    sets = [_glm_setting(300, 5, 10, calibration, eps=(0.5, 1.0, INF)),
            _glm_setting(400, 5, 12, calibration),
            _glm_setting(300, 5, 10, calibration, final_only=True),
            _glm_setting(400, 5, 12, calibration, final_only=True)]
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


def _sizes(real, pad, steps, s=None, s_max=None):
    """Sizes of ``real`` rows padded by ``pad``; ``s``: a runtime sparsity, bound ``s_max``
    (default ``s``)."""
    slots = None if s is None else jnp.arange(s if s_max is None else s_max) < s
    return base.Sizes(jnp.arange(real + pad) < real, jnp.float32(real), jnp.int32(steps), slots)


@pytest.mark.parametrize("batching", ["full", "disjoint"])
def test_run_padded_runs_only_the_settings_steps_and_branches_on_nothing(batching):
    """The padded loop runs the setting's own steps and no others, by a while loop with a
    runtime bound: no conditional per step. (A ``lax.scan`` with a ``lax.cond`` per step
    made XLA's CPU backend run iv_fig9's padded 2S-GD 4x slower than its own kernel; the
    jaxpr check fails on that form, the counts on a loop that ignores ``num_steps``.)"""
    max_steps, steps, rows = 12, 5, 4

    def step(key, state, data, hp, sizes):  # data: the data set, or step t's batch: (rows,)
        return state + jnp.sum(jnp.where(sizes.mask, data, 0.0)) * hp, ()

    padded = base.Padded("count", lambda p: p, step, batching)
    data = (jnp.ones((max_steps, rows)) if batching == "disjoint" else jnp.ones((rows,)))
    sizes = _sizes(3, rows - 3, steps)

    def f(key, data, sizes):
        return base.run_padded(padded, key, data, jnp.float32(0.0), jnp.float32(1.0), sizes,
                               max_steps, record=lambda s, info: s)

    final, trace = jax.jit(f)(jax.random.key(0), data, sizes)
    assert float(final) == 3.0 * steps  # each of the 5 steps adds the 3 real rows, no more
    np.testing.assert_array_equal(np.asarray(trace)[:steps], 3.0 * np.arange(1, steps + 1))
    np.testing.assert_array_equal(np.asarray(trace)[steps:], 0.0)  # never run
    text = str(jax.make_jaxpr(f)(jax.random.key(0), data, sizes))
    assert "while[" in text
    assert "cond[" not in text and "scan[" not in text


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
    sizes = _sizes(n0, pad, 4, 2 if method == "hd-dp-em" else None)
    got, info_g = est.padded.step(jax.random.key(1), state, padded, hp, sizes)
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


@pytest.mark.parametrize("method", ["dp-gem", "gradient-em"])
def test_padded_rows_change_nothing_in_dp_gem_and_gradient_em(method):
    d, n, pad, T = 5, 60, 9, 6
    est = dp_gem.dp_gem(GMM, T) if method == "dp-gem" else dp_em.gradient_em(GMM, T, False)
    beta = jnp.asarray(sparse_unit_beta(d, d))
    data = GMM.simulate(jax.random.key(0), n, beta)
    padded = GMMData(jnp.concatenate([data.y, jnp.asarray(_adversarial(pad, d))]))
    if method == "dp-gem":
        hp = dp_gem.DPGEMHyperparams(*map(jnp.float32, (0.7, 1 / (2 * n), 1.0, 0.01, 0.05,
                                                        0.0)))
    else:
        hp = dp_em.DPEMHyperparams(*map(jnp.float32, (INF, 1 / (2 * n), 0.5, INF)))
    state = est.init(0.8 * beta)
    want, info_w = est.step(jax.random.key(1), state, data, hp)
    got, info_g = est.padded.step(jax.random.key(1), state, padded, hp, _sizes(n, pad, T))
    np.testing.assert_allclose(got.beta, want.beta, rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree_util.tree_leaves(info_g.events),
                    jax.tree_util.tree_leaves(info_w.events)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("model", [MOR, RMC])
@pytest.mark.parametrize("stat", ["truncated_gradient", "gradient", "per_sample_gradients"])
def test_padded_rows_change_nothing_in_the_mixture_of_regressions_and_missing_covariates(
        model, stat):
    d, n, pad = 6, 40, 9
    beta = jnp.asarray(sparse_unit_beta(d, 2))
    data = model.simulate(jax.random.key(0), n, beta)
    junk = jnp.asarray(_adversarial(pad, d))
    if model is MOR:
        padded = MoRData(jnp.concatenate([data.x, junk]),
                         jnp.concatenate([data.y, jnp.asarray(_adversarial(pad, 0))]))
    else:
        padded = RMCData(jnp.concatenate([data.x, junk]), jnp.concatenate([data.z, junk]),
                         jnp.concatenate([data.y, jnp.asarray(_adversarial(pad, 0))]))
    mask = jnp.arange(n + pad) < n
    if stat == "truncated_gradient":
        want = model.truncated_gradient(0.9 * beta, data, 2.0)
        got = model.truncated_gradient(0.9 * beta, padded, 2.0, mask=mask, count=jnp.float32(n))
        np.testing.assert_allclose(got.sensitivity, want.sensitivity, rtol=1e-6)
        got, want = got.value, want.value
    elif stat == "gradient":
        want = model.gradient(0.9 * beta, data)
        got = model.gradient(0.9 * beta, padded, mask=mask, count=jnp.float32(n))
    else:
        want = model.per_sample_gradients(0.9 * beta, data)
        got = model.per_sample_gradients(0.9 * beta, padded, mask=mask)
        np.testing.assert_array_equal(got[n:], 0.0)
        got = got[:n]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------
# The families converted later: every setting of one experiment, shared against its own kernel
# --------------------------------------------------------------------------------------------


def _experiment_settings(name, overrides):
    import dpjax.experiments

    exp = dpjax.experiments.registry()[name]
    config = study.resolve_config(exp, overrides)
    return exp, study._study_settings(exp, config)


def _assert_every_setting_shares_and_equals_its_own_kernel(settings, reps=2, seed=3):
    progs = sweep.plan_programs(settings)
    assert set(progs) == {s.key for s in settings}  # every setting runs a shared program
    assert len(set(progs.values())) < len(settings)
    for st in settings:
        shared = sweep.run_setting(st, reps=reps, seed=seed, num_devices=1,
                                   program=progs[st.key])
        _assert_close(shared, _per_setting(st, reps, seed))
    return progs


def test_dp_iv_settings_of_iv_fig3_share_programs_and_equal_their_own_kernels():
    # DP-2S-GD (paper calibration) and non-private 2S-GD, n = 300 and 500: 300 runs padded
    _, sets = _experiment_settings("iv_fig3", {"dims": (3,), "n_grid": (300, 500), "T": 6,
                                               "clip_consts": (1.0,)})
    assert len(sets) == 4
    progs = _assert_every_setting_shares_and_equals_its_own_kernel(sets)
    # one block of 256 and a rest (under two blocks the rows are not rounded up)
    assert progs["dp,d=3,n=300"] == progs["dp,d=3,n=500"] == sweep.Program(6, 500, 3)


def test_dp_iv_settings_an_order_of_magnitude_apart_in_n_share_one_program():
    """DP-2S-GD adds up its records in blocks of 256 up to the count, so iv_fig3's settings
    from n = 150 to 3000 share one program per method (the geometric buckets needed three) and
    each equals its own kernel; n = 100 (a whole block is over twice its rows) keeps its own.
    The full iv_fig3 plans one program per (dimension, method): 4 for its 24 settings."""
    _, sets = _experiment_settings("iv_fig3", {"dims": (3,), "n_grid": (100, 150, 1000, 3000),
                                               "T": 4, "clip_consts": (1.0,)})
    plan = sweep.plan_programs(sets)
    assert {k for k in (s.key for s in sets) if k not in plan} == {"dp,d=3,n=100",
                                                                    "gd,d=3,n=100"}
    shared = [s for s in sets if s.key in plan]
    assert {plan[s.key] for s in shared} == {sweep.Program(4, 3072, 3), sweep.Program(4, 3072, 1)}
    for st in shared:
        if st.key.endswith("n=3000"):
            continue  # the bucket's largest: its padding is none
        _assert_close(sweep.run_setting(st, reps=2, seed=3, num_devices=1, program=plan[st.key]),
                      _per_setting(st, 2, 3))
    _, full = _experiment_settings("iv_fig3", {})
    plan = sweep.plan_programs(full)
    assert set(plan) == {s.key for s in full} and len(full) == 24
    assert len(set((sweep.shape_family(s), plan[s.key]) for s in full)) == 4


def test_dp_iv_horizons_share_one_program_and_equal_their_own_kernels():
    # iv_fig6's study over horizons T (final iterate only): Algorithms 1 and 3 (beta only),
    # every T through one program per method
    _, sets = _experiment_settings("iv_fig6", {"T_grid": (4, 9), "n": 200})
    _assert_every_setting_shares_and_equals_its_own_kernel(sets)


@pytest.mark.parametrize("calibration", ["tight", "paper"])
def test_dp_iv_study_compiles_one_program_for_every_n(tmp_path, calibration):
    import dpjax.experiments

    exp = dpjax.experiments.registry()["iv_fig3"]
    before = sweep.compile_count()
    study.run_experiment(exp, tmp_path, reps=2, seed=0, progress=False, num_devices=1,
                         overrides={"dims": (2,), "n_grid": (300, 400, 500), "T": 7,
                                    "clip_consts": (1.0,), "references": False,
                                    "calibration": calibration})
    assert sweep.compile_count() == before + 1  # three n, one algorithm program
    meta = json.loads((tmp_path / "config.json").read_text())["settings"]
    assert [m["compiled"] for m in meta] == [True, False, False]
    assert len({m["program"] for m in meta}) == 1


@pytest.mark.parametrize("variant", ["dp", "beta-only", "none"])
def test_padded_rows_change_nothing_in_dp_iv(variant):
    from dpjax.algorithms import dp_iv
    from dpjax.models.iv import IVData, LinearIV

    model, n, pad, T = LinearIV(2, 3, 2), 50, 7, 5
    truth = model.pack(model.draw_parameters(jax.random.key(0)))
    data = model.simulate(jax.random.key(1), n, truth)
    padded = IVData(*(jnp.concatenate([x, jnp.asarray(_adversarial(pad, x.shape[1] if x.ndim
                                                                   > 1 else 0))])
                      for x in data))
    est = dp_iv._build(variant, "tight", T)
    hp = dp_iv.DPIVHyperparams(*map(jnp.float32, (0.7, 0.4, 0.1, 0.05, 3.0, 2.0, 1e-5)))
    state = dp_iv.DPIVState(0.5 * jnp.ones((3, 2)), jnp.asarray([0.3, -0.2]))
    want, info_w = est.step(jax.random.key(2), state, data, hp)
    got, info_g = est.padded.step(jax.random.key(2), state, padded, hp, _sizes(n, pad, T))
    for a, b in zip(jax.tree_util.tree_leaves((got, info_g)),
                    jax.tree_util.tree_leaves((want, info_w))):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    if variant == "dp":  # the clip fractions are of the records (some are clipped)
        assert 0 < float(info_g.clip_frac2) < 1


@pytest.mark.parametrize("variant", ["dp", "beta-only", "none"])
def test_padded_rows_change_nothing_in_dp_iv_over_row_blocks(variant):
    """DP-IV's padded step with blocks of 16 rows (the loop runs): adversarial padded rows in
    the last block that holds records and in blocks past it change nothing, and the clip
    fractions are of the records."""
    from dpjax.algorithms import dp_iv
    from dpjax.models.iv import IVData, LinearIV

    model, n, m, T, block = LinearIV(2, 3, 2), 50, 96, 5, 16
    truth = model.pack(model.draw_parameters(jax.random.key(0)))
    data = model.simulate(jax.random.key(1), n, truth)
    padded = IVData(*(jnp.concatenate([x, jnp.asarray(_adversarial(m - n, x.shape[1] if x.ndim
                                                                   > 1 else 0))])
                      for x in data))
    est = dp_iv._build(variant, "tight", T)
    form = dp_iv._padded(variant, "tight", row_block=block)
    assert form.row_block == block and est.padded.row_block == dp_iv.ROW_BLOCK
    hp = dp_iv.DPIVHyperparams(*map(jnp.float32, (0.7, 0.4, 0.1, 0.05, 3.0, 2.0, 1e-5)))
    state = dp_iv.DPIVState(0.5 * jnp.ones((3, 2)), jnp.asarray([0.3, -0.2]))
    want, info_w = est.step(jax.random.key(2), state, data, hp)
    got, info_g = jax.jit(form.step)(jax.random.key(2), state, padded, hp, _sizes(n, m - n, T))
    for a, b in zip(jax.tree_util.tree_leaves((got, info_g)),
                    jax.tree_util.tree_leaves((want, info_w))):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    if variant == "dp":
        assert 0 < float(info_g.clip_frac2) < 1


def test_noisy_iht_settings_of_glm_fig2_share_programs_and_equal_their_own_kernels():
    # Algorithm 5 on the 8-bit grid design (row blocks of 32), n = 300 and 400; the
    # budget-unsplit level too
    _, sets = _experiment_settings("glm_fig2", {"d": 32, "s_grid": (2,), "s_base": 2,
                                                "n_grid": (300, 400), "n_base": 400, "T": 5})
    assert len(sets) == 2
    progs = _assert_every_setting_shares_and_equals_its_own_kernel(sets)
    assert progs[sets[0].key] == sweep.Program(5, 400, 2, s_max=4)  # s = 2 s* = 4 at runtime


def test_noisy_iht_settings_that_differ_in_n_and_t_compile_one_program(tmp_path):
    import dpjax.experiments

    exp = dpjax.experiments.registry()["glm_fig2"]
    before = sweep.compile_count()
    study.run_experiment(exp, tmp_path, reps=2, seed=0, progress=False, num_devices=1,
                         overrides={"d": 28, "s_grid": (2,), "s_base": 2, "unsplit": False,
                                    "n_grid": (300, 400, 500), "n_base": 500, "T": 4})
    assert sweep.compile_count() == before + 1
    meta = json.loads((tmp_path / "config.json").read_text())["settings"]
    assert [m["compiled"] for m in meta] == [True, False, False]


@pytest.mark.parametrize("split", [True, False])
def test_padded_rows_change_nothing_in_noisy_iht(split):
    d, n, pad, T, s = 8, 50, 7, 6, 3
    # the unsplit figure reproduction takes a per-step calibration ('pld' calibrates a run)
    est = dp_glm.noisy_iht(LOGIT, s, T, split_budget=split,
                           calibration="pld" if split else "tight")
    beta = jnp.asarray(truth(0, d, 2))
    data = LOGIT.simulate(jax.random.key(0), n, beta)
    padded = GLMData(jnp.concatenate([data.x, jnp.asarray(_adversarial(pad, d))]),
                     jnp.concatenate([data.y, jnp.asarray(_adversarial(pad, 0))]))
    hp = dp_glm.GLMHyperparams(*map(jnp.float32, (0.9, 1 / (2 * n), 1.0, 1.0, 0.0)))
    state = est.init(0.5 * beta)
    want, info_w = est.step(jax.random.key(1), state, data, hp)
    got, info_g = est.padded.step(jax.random.key(1), state, padded, hp, _sizes(n, pad, T, s))
    np.testing.assert_allclose(got.beta, want.beta, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(info_g.support, info_w.support)
    for a, b in zip(jax.tree_util.tree_leaves(info_g.events),
                    jax.tree_util.tree_leaves(info_w.events)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_clipped_gem_and_dp_em_exact_of_gem_fig2_share_programs_and_equal_their_own_kernels():
    # Algorithms 1 (clipped) and 3 (exact M-step) beside Algorithm 2, n = 300 and 500
    _, sets = _experiment_settings("gem_fig2", {
        "methods": ("clipped-gem", "dp-em-exact"), "n_grid": (300,), "n_base": 500,
        "d_grid": (3,), "d_base": 3, "eps_grid": (0.5, 1.0), "T": 4})
    assert sorted(s.key.split(",")[0] for s in sets) == ["clipped-gem"] * 2 + ["dp-em-exact"] * 2
    progs = _assert_every_setting_shares_and_equals_its_own_kernel(sets)
    assert len(set(progs.values())) == 2  # one per method (the levels differ)


@pytest.mark.parametrize("method", ["clipped-gem", "dp-em-exact"])
def test_clipped_gem_and_dp_em_exact_compile_one_program_for_every_n_and_t(tmp_path, method):
    sets = []
    for n, T in ((300, 5), (400, 6), (500, 6)):
        st = _gem_setting(n, 6, T, key=method)
        if method == "clipped-gem":
            levels = tuple({"epsilon": e, "delta": 1 / (2 * n), "eta": 1.0, "clip": 1.0}
                           for e in (0.5, 1.0))
            st = dataclasses.replace(st, estimator=dp_gem.clipped_gem(GMM, T, "paper"),
                                     hparams_type=dp_gem.ClippedGEMHyperparams, levels=levels)
        else:
            levels = tuple({k: v for k, v in lv.items() if k != "eta"} for lv in st.levels)
            st = dataclasses.replace(st, estimator=dp_gem.dp_exact_em(GMM, T),
                                     hparams_type=dp_gem.DPEMExactHyperparams, levels=levels)
        sets.append(st)
    exp = Experiment(name="shared-gem", title="t", defaults={}, settings=lambda c: sets,
                     reps=2, quick_reps=2)
    before = sweep.compile_count()
    study.run_experiment(exp, tmp_path, reps=2, seed=0, progress=False, num_devices=1)
    assert sweep.compile_count() == before + 1
    meta = json.loads((tmp_path / "config.json").read_text())["settings"]
    assert [m["compiled"] for m in meta] == [True, False, False]


@pytest.mark.parametrize("method", ["clipped-gem", "dp-em-exact"])
def test_padded_rows_change_nothing_in_clipped_gem_and_dp_em_exact(method):
    d, n, pad, T = 5, 60, 9, 6
    beta = jnp.asarray(sparse_unit_beta(d, d))
    data = GMM.simulate(jax.random.key(0), n, beta)
    padded = GMMData(jnp.concatenate([data.y, jnp.asarray(_adversarial(pad, d))]))
    if method == "clipped-gem":
        est = dp_gem.clipped_gem(GMM, T)
        hp = dp_gem.ClippedGEMHyperparams(*map(jnp.float32, (0.7, 1 / (2 * n), 1.0, 0.5)))
    else:
        est = dp_gem.dp_exact_em(GMM, T)
        hp = dp_gem.DPEMExactHyperparams(*map(jnp.float32, (0.7, 1 / (2 * n), 0.01, 0.05,
                                                            0.0)))
    state = est.init(0.8 * beta)
    want, info_w = est.step(jax.random.key(1), state, data, hp)
    got, info_g = est.padded.step(jax.random.key(1), state, padded, hp, _sizes(n, pad, T))
    np.testing.assert_allclose(got.beta, want.beta, rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree_util.tree_leaves(info_g),
                    jax.tree_util.tree_leaves(info_w)):
        np.testing.assert_allclose(a, b, rtol=1e-5)


# --------------------------------------------------------------------------------------------
# Steps that add up their records block by block: one program for every n, work by n
# --------------------------------------------------------------------------------------------


def test_fold_rows_adds_only_the_blocks_that_hold_records():
    m, block = 40, 8
    x = jnp.asarray(np.random.default_rng(0).normal(size=(m, 3)), jnp.float32)

    def fn(rows, mask):  # the block's masked sum, and 1 per block run
        return jnp.sum(jnp.where(mask[:, None], rows, 0.0), axis=0), jnp.ones((), jnp.int32)

    run = jax.jit(lambda x, mask: base.fold_rows(fn, x, mask, block))
    for count, blocks in ((1, 1), (8, 1), (9, 2), (17, 3), (40, 5)):
        total, ran = run(x, jnp.arange(m) < count)
        np.testing.assert_allclose(total, np.asarray(x)[:count].sum(0), rtol=1e-5, atol=1e-6)
        assert int(ran) == blocks  # ceil(count / block): the blocks past the last record never run
    # one block or none: fn itself, no loop
    total, ran = base.fold_rows(fn, x, jnp.arange(m) < 5, None)
    assert int(ran) == 1 and np.allclose(total, np.asarray(x)[:5].sum(0), atol=1e-6)
    with pytest.raises(ValueError, match="block"):
        base.fold_rows(fn, x, jnp.arange(m) < 5, 0)
    # 30 rows: 3 whole blocks and 6 more, always added (at a setting's own sizes)
    for count, blocks in ((5, 2), (30, 4)):
        total, ran = run(x[:30], jnp.arange(30) < count)
        np.testing.assert_allclose(total, np.asarray(x)[:count].sum(0), rtol=1e-5, atol=1e-6)
        assert int(ran) == blocks


def test_rows_worked_and_padded_rows():
    assert sweep.padded_rows(10000, 4096) == 12288 and sweep.padded_rows(3000, 4096) == 3000
    assert sweep.padded_rows(10000, None) == 10000
    assert sweep.padded_rows(6000, 4096) == 6000  # one block and a rest: not rounded to two
    assert sweep.rows_worked(5000, 303104, 4096) == 8192  # its own two blocks
    assert sweep.rows_worked(300000, 303104, 4096) == 303104
    assert sweep.rows_worked(3000, 3500, 4096) == 3500  # one block: all rows
    assert sweep.rows_worked(3000, 12288, None) == 12288
    # rows past the whole blocks are added for every setting
    assert sweep.rows_worked(444, 666, 512) == 666 and sweep.rows_worked(600, 1300, 512) == 1300
    assert sweep.rows_worked(600, 2324, 512) == 1024 + 276


def test_a_setting_joins_a_row_block_bucket_only_where_its_padded_data_are_cheap(monkeypatch):
    """A row-block form works on its own blocks in any bucket, but its data are padded to the
    bucket's rows: past twice its own, only up to SHARED_FREE_PAD_BYTES a repetition."""
    sets = [_gem_setting(n, 3, 3, eps=(0.5, 1.0)) for n in (5000, 45000)]
    assert len(set(sweep.plan_programs(sets).values())) == 1  # 45056 rows x 3 x 4 B: 0.5 MB
    monkeypatch.setattr(sweep, "SHARED_FREE_PAD_BYTES", 100_000)
    assert sweep.plan_programs(sets) == {}  # n = 5000 padded 9x, its 0.5 MB over the limit


def test_gem_settings_an_order_of_magnitude_apart_in_n_share_one_program():
    """Algorithm 2 adds up its scores in blocks of 4096 records up to the count, so settings
    with n 3x and 9x apart (which the geometric buckets kept apart) share one program and each
    equals its own kernel; a setting under half a block keeps its own kernel."""
    ns = (1500, 5000, 15000, 45000)
    sets = [_gem_setting(n, 3, 3, eps=(0.5, 1.0)) for n in ns]
    plan = sweep.plan_programs(sets)
    assert sets[0].key not in plan  # 1500 rows would work on a whole block of 4096: over 2x
    prog = {plan[s.key] for s in sets[1:]}
    assert prog == {sweep.Program(3, 45056, 2)}  # 45000 rows padded to 11 whole blocks
    for st in sets[1:]:
        _assert_close(sweep.run_setting(st, reps=2, seed=3, num_devices=1, program=plan[st.key]),
                      _per_setting(st, 2, 3))
    # at its own sizes (5000 rows: one whole block and 904 more), as the fingerprint traces it
    st = sets[1]
    _assert_close(sweep.run_setting(st, reps=2, seed=3, num_devices=1,
                                    program=sweep.own_program(st)), _per_setting(st, 2, 3))
    assert sweep.program_fingerprint(st)["program"]


@pytest.mark.parametrize("method", ["dp-gem", "clipped-gem", "dp-em-exact", "dp-gem-split"])
def test_padded_rows_change_nothing_in_gem_steps_over_row_blocks(method):
    """The padded GEM steps with blocks of 16 rows (the loop runs): adversarial padded rows,
    in the last block that holds records and in blocks past it, change nothing."""
    d, n, T, block = 4, 50, 5, 16
    m = 96  # 6 blocks; the records fill 3 blocks and 2 rows of a 4th
    beta = jnp.asarray(sparse_unit_beta(d, d))
    data = GMM.simulate(jax.random.key(0), n, beta)
    padded_data = GMMData(jnp.concatenate([data.y, jnp.asarray(_adversarial(m - n, d))]))
    if method == "clipped-gem":
        est = dp_gem.clipped_gem(GMM, T)
        form = dp_gem._padded_clipped(GMM, "gaussian", row_block=block)
        hp = dp_gem.ClippedGEMHyperparams(*map(jnp.float32, (0.7, 1 / (2 * n), 1.0, 0.5)))
    elif method == "dp-em-exact":
        est = dp_gem.dp_exact_em(GMM, T)
        form = dp_gem._padded_robust(GMM, "sigma_consistent", False, "gaussian", True,
                                     row_block=block)
        hp = dp_gem.DPEMExactHyperparams(*map(jnp.float32, (0.7, 1 / (2 * n), 0.01, 0.05,
                                                            0.0)))
    else:
        split = method == "dp-gem-split"
        est = dp_gem.dp_gem(GMM, T, sample_split=split)
        form = dp_gem._padded_robust(GMM, "sigma_consistent", split, "gaussian", False,
                                     row_block=block)
        hp = dp_gem.DPGEMHyperparams(*map(jnp.float32, (0.7, 1 / (2 * n), 1.0, 0.01, 0.05,
                                                        0.0)))
    assert form.row_block == block
    state = est.init(0.8 * beta)
    want, info_w = est.step(jax.random.key(1), state, data, hp)
    got, info_g = jax.jit(form.step)(jax.random.key(1), state, padded_data, hp,
                                     _sizes(n, m - n, T))
    np.testing.assert_allclose(got.beta, want.beta, rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree_util.tree_leaves(info_g), jax.tree_util.tree_leaves(info_w)):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def _padded_em_data(model, data, pad):
    """``data`` with ``pad`` adversarial rows after its records."""
    d = data.y.shape[1] if model is GMM else data.x.shape[1]
    junk = jnp.asarray(_adversarial(pad, d))
    if model is GMM:
        return GMMData(jnp.concatenate([data.y, junk]))
    tail = jnp.asarray(_adversarial(pad, 0))
    if model is MOR:
        return MoRData(jnp.concatenate([data.x, junk]), jnp.concatenate([data.y, tail]))
    return RMCData(jnp.concatenate([data.x, junk]), jnp.concatenate([data.z, junk]),
                   jnp.concatenate([data.y, tail]))


@pytest.mark.parametrize("model", [GMM, MOR, RMC])
@pytest.mark.parametrize("privatiser", ["noisy-ht", "gaussian", "top-s", "none"])
def test_padded_rows_change_nothing_in_dp_em_steps_over_row_blocks(model, privatiser):
    """The padded DP-EM steps (hd-dp-em, ld-dp-em, truncated EM, gradient EM) on the three
    models with blocks of 16 rows (the loop runs; 6 whole blocks, the records fill 3 and 2
    rows of a 4th): adversarial padded rows, in the last block that holds records and past it,
    change nothing, and the released statistic's sensitivity is the unpadded one's."""
    d, n, m, T, block = 6, 50, 96, 4, 16
    assert model.blockwise
    beta = jnp.asarray(sparse_unit_beta(d, 2))
    data = model.simulate(jax.random.key(0), n, beta)
    padded = _padded_em_data(model, data, m - n)
    sparse = privatiser in ("noisy-ht", "top-s")
    own = dp_em._make_step(model, privatiser, 2 if sparse else None, "paper")
    form = dp_em._make_step(model, privatiser, None, "paper", row_block=block)
    hp = dp_em.DPEMHyperparams(*map(jnp.float32, (0.7, 1 / 400, 0.5, 2.0)))
    state = dp_em.DPEMState(0.9 * beta)
    want, info_w = own(jax.random.key(1), state, data, hp)
    sizes = _sizes(n, m - n, T, 2 if sparse else None)
    got, info_g = jax.jit(form)(jax.random.key(1), state, padded, hp, sizes)
    np.testing.assert_allclose(got.beta, want.beta, rtol=1e-5, atol=1e-6)
    assert np.isfinite(np.asarray(got.beta)).all()
    for a, b in zip(jax.tree_util.tree_leaves(info_g), jax.tree_util.tree_leaves(info_w)):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_fold_affine_counts_the_record_free_part_once():
    """``base.fold_affine``: a statistic ``sum(records) / count - beta`` added up over
    blocks equals it on all rows, value and sensitivity (the sensitivity is not summed over
    blocks, the ``- beta`` not subtracted once per block); an array too."""
    x = jnp.asarray(np.random.default_rng(0).normal(size=(40, 3)), jnp.float32)
    beta = jnp.asarray([0.5, -1.0, 2.0])

    def stat(rows, mask):
        total = jnp.sum(jnp.where(mask[:, None], rows, 0.0), axis=0)
        return bounded_mean_from_sum(total, 30.0, 2.0, "linf").shift(-beta)

    whole = stat(x, jnp.arange(40) < 30)
    got = jax.jit(lambda x: base.fold_affine(stat, x, jnp.arange(40) < 30, 8))(x)
    np.testing.assert_allclose(got.value, whole.value, rtol=1e-6, atol=1e-6)
    assert float(got.sensitivity) == pytest.approx(float(whole.sensitivity)) == 2.0 / 30
    arr = jax.jit(lambda x: base.fold_affine(lambda r, mk: stat(r, mk).value, x,
                                                jnp.arange(40) < 30, 8))(x)
    np.testing.assert_allclose(arr, whole.value, rtol=1e-6, atol=1e-6)


def test_dp_em_settings_an_order_of_magnitude_apart_share_one_program():
    """Gradient EM adds up its records in blocks of 4096 up to the count, so em_fig2's
    settings with n = 5000 and 25000 (all rows; 3x and 5x apart, which the geometric buckets
    kept apart) share one program, each equal to its own kernel; so do em_rmc's ld-dp-em
    batches of 4545 to 15384 rows. The full em_fig2 plans 16 programs for its 27 settings (the
    geometric buckets: 18; ld-dp-em's batches of 555 to 2272 rows are under one block)."""
    _, sets = _experiment_settings("em_fig2", {"n_grid": (5000, 25000), "d_grid": (4,),
                                               "d_base": 4, "n_base": 5000})
    sets = [s for s in sets if s.key.startswith("gradient-em")]
    plan = sweep.plan_programs(sets)
    assert set(plan) == {s.key for s in sets} and len(set(plan.values())) == 1
    small = min(sets, key=sweep._data_rows)
    assert plan[small.key].rows > 2 * sweep._data_rows(small)  # padded 5x, works 8192 rows
    _assert_close(sweep.run_setting(small, reps=2, seed=3, num_devices=1,
                                    program=plan[small.key]), _per_setting(small, 2, 3))
    _, full = _experiment_settings("em_fig2", {})
    plan = sweep.plan_programs(full)
    programs = {(sweep.shape_family(s), plan[s.key]) if s.key in plan else s.key for s in full}
    assert len(full) == 27 and len(programs) == 16
    _, rmc = _experiment_settings("em_rmc", {})
    plan = sweep.plan_programs(rmc)
    ld = [s for s in rmc if s.key.startswith("ld-dp-em") and sweep._data_rows(s) >= 4096]
    assert len(ld) == 6 and len({plan[s.key] for s in ld}) == 1


@pytest.mark.parametrize("method", ["wang2020", "thm2"])
def test_padded_heavy_tailed_mean_over_row_blocks_equals_its_own_step(method, monkeypatch):
    """gem_mean's central estimators padded past their records, added up in blocks of 16
    rows (the loop runs): adversarial padded rows change nothing, the release (value, noise
    scale, event) is the unpadded one's."""
    from dpjax.experiments import gem_mean

    monkeypatch.setattr(gem_mean, "ROW_BLOCK", 16)
    n, m = 50, 96
    x = gem_mean.HeavyTailed("student_t", 3.0)(jax.random.key(0), n, np.array([1.0]))
    padded = jnp.concatenate([x, jnp.asarray(_adversarial(m - n, 0))])
    hp = gem_mean.MeanHyperparams(*map(jnp.float32, (0.5, 1 / n, 4.0, 0.05)))
    state = gem_mean.MeanState(jnp.zeros((1,)))
    want, info_w = gem_mean._step(method, jax.random.key(1), state, x, hp)
    got, info_g = jax.jit(functools.partial(gem_mean._padded_step, method))(
        jax.random.key(1), state, padded, hp, _sizes(n, m - n, 1))
    for a, b in zip(jax.tree_util.tree_leaves((got, info_g)),
                    jax.tree_util.tree_leaves((want, info_w))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_gem_mean_central_settings_share_one_program_and_equal_their_own_kernels():
    """Every n of a central heavy-tailed mean estimator shares one program (blocks of 1024
    records up to the count), each equal to its own kernel; the local one keeps its own
    programs (its per-user noise follows the rows); the full gem_mean plans 7 programs for
    its 15 settings."""
    _, sets = _experiment_settings("gem_mean", {"n_grid": (600, 3000), "n_base": 3000,
                                                "eps_grid": (0.5,)})
    plan = sweep.plan_programs(sets)
    assert {s.key for s in sets if s.key not in plan} == {"local,n=600", "local,n=3000"}
    for st in sets:
        if st.key in plan:
            _assert_close(sweep.run_setting(st, reps=3, seed=3, num_devices=1,
                                            program=plan[st.key]), _per_setting(st, 3, 3))
    _, full = _experiment_settings("gem_mean", {})
    plan = sweep.plan_programs(full)
    assert len(full) == 15
    programs = {(s.key.split(",")[0], plan[s.key]) if s.key in plan else s.key for s in full}
    assert len(programs) == 7  # wang2020 and thm2 one each, local five


def test_ldp_gem_settings_share_programs_and_equal_their_own_kernels():
    # gem_local's local-DP gradient EM (disjoint user groups), n = 300 and 500, T = 4 and 5:
    # groups of 75 and 100 users; n = 300's run padded to 100 rows and 5 steps
    from dpjax.experiments._gem_common import GemConfig, gem_level, method_setting

    c = GemConfig().to_dict()
    sets = [method_setting("ldp-gem", "gmm", n, 3,
                           [gem_level(e, n, 1.0, c) for e in (0.5, 2.0, INF)], c, T)
            for n, T in ((300, 4), (500, 5))]
    progs = _assert_every_setting_shares_and_equals_its_own_kernel(sets)
    assert progs[sets[0].key] == sweep.Program(5, 100, 3)


def test_padded_rows_change_nothing_in_ldp_gem():
    from dpjax.algorithms import ldp_gem

    d, m, pad, T = 4, 40, 9, 6
    est = ldp_gem.ldp_gem(GMM, T, batching="disjoint")
    beta = jnp.asarray(sparse_unit_beta(d, d))
    data = GMM.simulate(jax.random.key(0), m, beta)
    padded = GMMData(jnp.concatenate([data.y, jnp.asarray(_adversarial(pad, d))]))
    hp = ldp_gem.LDPGEMHyperparams(*map(jnp.float32, (1.5, 1e-5, 1.0, 1.0, 0.05, 0.0)))
    state = est.init(0.8 * beta)
    want, info_w = est.step(jax.random.key(1), state, data, hp)
    got, info_g = est.padded.step(jax.random.key(1), state, padded, hp, _sizes(m, pad, T))
    for a, b in zip(jax.tree_util.tree_leaves((got, info_g)),
                    jax.tree_util.tree_leaves((want, info_w))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_nldp_settings_of_ldp_nldp_share_one_program_and_equal_their_own_kernels():
    # Algorithm 1 of the local-DP sparse regression (aggregate noise), in chunks of 1000
    # users: n = 1000 (1 chunk), 1500 (1 chunk of 1500) and 3000 (3 chunks); the others run
    # padded to 1500 rows and 3 steps; final iterate only
    _, sets = _experiment_settings("ldp_nldp", {
        "chunk": 1000, "n_grid": (1000, 1500, 3000), "n_dk": 3000, "d_grid": (4,),
        "k_grid": (2,)})
    assert [s.estimator.num_steps for s in sets] == [1, 1, 3]
    progs = _assert_every_setting_shares_and_equals_its_own_kernel(sets)
    assert set(progs.values()) == {sweep.Program(3, 1500, 5)}


def test_plan_programs_leaves_out_a_setting_too_long_to_pad_and_keeps_the_rest(monkeypatch):
    # rows the same, steps 1, 3 and 30: the 30-step setting's padded data pass the limit;
    # the others share a program of their own longest steps (3), not 30
    _, sets = _experiment_settings("ldp_nldp", {
        "chunk": 1000, "n_grid": (1000, 3000, 30000), "n_dk": 3000, "d_grid": (4,),
        "k_grid": (2,)})
    row = 5 * 4  # x (4 floats) and y
    monkeypatch.setattr(sweep, "SHARED_MAX_REP_BYTES", row * 1000 * 10)
    progs = sweep.plan_programs(sets)
    assert sets[2].key not in progs
    assert progs[sets[0].key] == progs[sets[1].key] == sweep.Program(3, 1000, 5)


def test_a_shared_setting_chunks_for_its_padded_data():
    _, sets = _experiment_settings("ldp_nldp", {
        "chunk": 1000, "n_grid": (1000, 3000), "n_dk": 3000, "d_grid": (4,), "k_grid": (2,)})
    st, prog = sets[0], sweep.plan_programs(sets)[sets[0].key]
    budget = 3 * (sweep.rep_bytes(st) + sweep._rep_data_bytes(st, prog))
    assert sweep.auto_chunk(st, 100, budget) > sweep.auto_chunk(st, 100, budget, program=prog)
    assert sweep.auto_chunk(st, 100, budget, program=prog) == 3


def test_padded_rows_change_nothing_in_nldp():
    from dpjax.algorithms import ldp_sparse as L

    d, m, pad = 4, 60, 9
    est = L.nldp(3)
    x = jax.random.normal(jax.random.key(0), (m, d))
    y = x @ jnp.asarray([0.5, 0.5, 0.0, 0.0]) + 0.5 * jax.random.normal(jax.random.key(1), (m,))
    padded = (jnp.concatenate([x, jnp.asarray(_adversarial(pad, d))]),
              jnp.concatenate([y, jnp.asarray(_adversarial(pad, 0))]))
    hp = L.nldp_hparams(10 * m, d, 1.0, 1e-5)
    hp = L.NLDPHyperparams(*map(jnp.float32, hp))
    state = est.init(jnp.zeros(d))
    state = state._replace(count=jnp.int32(120))  # a later chunk: the running means weigh it
    want, info_w = est.step(jax.random.key(2), state, (x, y), hp)
    got, info_g = est.padded.step(jax.random.key(2), state, padded, hp, _sizes(m, pad, 3))
    for a, b in zip(jax.tree_util.tree_leaves((got, info_g)),
                    jax.tree_util.tree_leaves((want, info_w))):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_a_real_data_study_plans_its_programs():
    # the Card data's simulator hands out its 2191 records and refuses any other number: the
    # shape family reads a record's shapes off a block at the setting's own size
    _, sets = _experiment_settings("iv_card", {})
    assert all(s.estimator.padded is not None for s in sets)
    with pytest.raises(ValueError, match="2191"):
        sets[0].simulate(jax.random.key(0), 1, sets[0].example_truth())
    fams = {sweep.shape_family(s) for s in sets}
    assert None not in fams
    sweep.plan_programs(sets)  # no error (the three settings differ in their padded forms)


# --------------------------------------------------------------------------------------------
# The sparsity at runtime: settings that differ in s (and n) share one program (issue 47)
# --------------------------------------------------------------------------------------------


def _quick_settings(name, overrides):
    import dpjax.experiments

    exp = dpjax.experiments.registry()[name]
    config = study.resolve_config(exp, overrides, quick=True)
    return study._merge_repeated_levels(study._study_settings(exp, config))


def _assert_shared_equals_own(settings, reps=2, seed=3):
    """Every setting through the program the study plans for it (one at its own sizes where
    the plan leaves it alone), against its own kernel; returns the plan."""
    progs = sweep.plan_programs(settings)
    for st in settings:
        prog = progs.get(st.key, sweep.own_program(st))
        shared = sweep.run_setting(st, reps=reps, seed=seed, num_devices=1, program=prog)
        _assert_close(shared, _per_setting(st, reps, seed))
    return progs


def test_em_table3_settings_of_every_s_hat_share_programs_and_equal_their_own_kernels():
    # the quick config with the paper's three s_hat: Alg 3 (N0 = 50, and N0 = ceil(log n)) and
    # the non-private truncated EM of Wang et al. on all data, each a program for s_hat = 5,
    # 10 and 15 (today 9 programs)
    sets = _quick_settings("em_table3", {"s_hat_grid": (5, 10, 15)})
    assert len(sets) == 9
    progs = _assert_shared_equals_own(sets)
    assert set(progs) == {s.key for s in sets}
    assert len(set(progs.values())) == 3
    assert {p.s_max for p in progs.values()} == {15}


def test_glm_fig2_quick_settings_share_programs_and_equal_their_own_kernels():
    # Algorithm 5 at s = 20, 40 and 80 (n = 4000) and n = 8000: one program at s_max = 80;
    # n = 2000 (rows under half of 8000) runs at its own sizes
    sets = _quick_settings("glm_fig2", {})
    progs = _assert_shared_equals_own(sets)
    assert len(set(progs.values())) == 1 and len(progs) == 4
    assert next(iter(progs.values())).s_max == 80


def test_settings_that_differ_only_in_s_compile_one_program_with_their_own_ledgers(tmp_path):
    d = 31  # a dimension no other test uses: the program is compiled here
    sets = [_em_setting(400, d, s=s) for s in (2, 3, 4)]
    exp = Experiment(name="shared-s", title="t", defaults={}, settings=lambda c: sets,
                     reps=2, quick_reps=2)
    before = sweep.compile_count()
    study.run_experiment(exp, tmp_path, reps=2, seed=0, progress=False, num_devices=1)
    assert sweep.compile_count() == before + 1  # three s, one algorithm program
    meta = json.loads((tmp_path / "config.json").read_text())["settings"]
    assert [m["compiled"] for m in meta] == [True, False, False]
    assert len({m["program"] for m in meta}) == 1 and "s_max=4" in meta[0]["program"]
    # the ledger is each setting's own: its releases select s coordinates, not s_max
    for st, m in zip(sets, meta):
        s = st.estimator.padded.sparsity
        for lv, level in zip(st.levels, m["levels"]):
            (release,) = level["ledger"]["releases"]
            assert release["s"] == s
            if math.isfinite(lv["epsilon"]):
                want = sweep.probe_ledger(st, st.levels.index(lv)).to_dict()
                assert level["ledger"]["guarantee"] == want["guarantee"]


@pytest.mark.parametrize("method", ["hd-dp-em", "truncated-em"])
def test_padded_dp_em_with_a_runtime_s_equals_the_static_step(method):
    d, n0, s, s_max = 12, 40, 2, 5
    est = (dp_em.hd_dp_em(GMM, s, 4, "paper") if method == "hd-dp-em"
           else dp_em.truncated_em(GMM, s, 4, sample_splitting=False))
    beta = jnp.asarray(sparse_unit_beta(d, 2))
    batch = GMM.simulate(jax.random.key(0), n0, beta)
    hp = dp_em.DPEMHyperparams(*map(jnp.float32, (0.7, 1 / 400, 0.5,
                                                  2.0 if method == "hd-dp-em" else INF)))
    state = est.init(0.9 * beta)
    want, info_w = est.step(jax.random.key(1), state, batch, hp)
    got, info_g = jax.jit(est.padded.step)(jax.random.key(1), state, batch, hp,
                                           _sizes(n0, 0, 4, s, s_max))
    np.testing.assert_allclose(got.beta, want.beta, rtol=1e-6, atol=1e-7)
    assert int((np.asarray(got.beta) != 0).sum()) == s
    np.testing.assert_array_equal(info_g.support[:s], info_w.support)
    np.testing.assert_array_equal(info_g.support[s:], d)
    for a, b in zip(jax.tree_util.tree_leaves(info_g.events),
                    jax.tree_util.tree_leaves(info_w.events)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    with pytest.raises(ValueError, match="slots"):  # sizes without the sparsity: refused
        est.padded.step(jax.random.key(1), state, batch, hp, _sizes(n0, 0, 4))


def test_padded_noisy_iht_start_keeps_the_runtime_s_largest_entries():
    est = dp_glm.noisy_iht(LOGIT, 2, 5)
    beta0 = jnp.asarray([0.1, -3.0, 0.0, 2.0, 0.5, -1.0])
    sizes = _sizes(10, 0, 5, 2, 4)
    np.testing.assert_array_equal(est.padded.init(beta0, sizes).beta, est.init(beta0).beta)
    assert int((np.asarray(est.padded.init(beta0, sizes).beta) != 0).sum()) == 2


def test_a_program_bound_below_a_settings_s_is_refused():
    st = _em_setting(300, 20, s=4)
    with pytest.raises(ValueError, match=r"program.s_max must be at least .* s = 4"):
        sweep.run_setting(st, reps=1, seed=0, num_devices=1,
                          program=sweep.Program(6, 50, 2, s_max=3))
    ld = _em_setting(300, 20, method="ld-dp-em")
    with pytest.raises(ValueError, match="takes no runtime sparsity"):
        sweep.run_setting(ld, reps=1, seed=0, num_devices=1,
                          program=sweep.Program(6, 50, 2, s_max=3))


def test_the_fingerprint_traces_a_runtime_s_at_the_settings_own_s():
    # the shared path is hashed at the setting's own sizes (s_max = its s), whatever bucket a
    # study puts it in: settings that differ in s differ, and one setting's is stable
    a, b = _em_setting(300, 20, s=2), _em_setting(300, 20, s=4)
    fa = sweep.program_fingerprint(a)["program"]
    assert fa != sweep.program_fingerprint(b)["program"]
    sweep.plan_programs([a, b])  # planning them together (s_max = 4) changes nothing
    assert sweep.program_fingerprint(a)["program"] == fa
    assert sweep.own_program(a).s_max == 2
