"""LDP-IHT's padded form (Algorithms 2 and 4 and the Wang & Xu literal radius; disjoint user
groups, sequentially interactive): the batch size and the number of steps, with it the chunks
per round, are runtime values, so the settings of a study that differ in ``n`` share one
compiled program, with the results, the events and the ledgers of each setting's own kernel
up to float round-off."""

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base, study, sweep
from dpjax.algorithms import ldp_sparse as L
from tests.test_sweep_shared import _assert_close, _per_setting

INF = math.inf

pytestmark = pytest.mark.skipif(
    not jax.config.jax_threefry_partitionable,
    reason="LDP-IHT's padded form needs JAX's partitionable threefry (a padded batch's split "
           "keeps every real user's key); without it the estimator has none")


def _experiment_settings(name, overrides=None, quick=False):
    import dpjax.experiments

    exp = dpjax.experiments.registry()[name]
    config = study.resolve_config(exp, overrides, quick=quick)
    return exp, study._study_settings(exp, config)


def _ledgers(setting, metrics):
    """Every level's ledger as a study states it, composed from a run's events."""
    _, events = sweep.split_events(metrics, sweep.event_structure(setting))
    return [study._ledger(setting, lv, i, events) for i, lv in enumerate(setting.levels)]


def _iht(settings):
    return [s for s in settings if isinstance(s.estimator.padded, base.Padded)
            and s.estimator.padded.family.startswith("ldp-iht")]


def _program(setting, plan):
    """The setting's program in the plan, or (alone in its bucket) a larger one of its own:
    50% more rows and two more steps, so that its run is padded either way."""
    if setting.key in plan:
        return plan[setting.key]
    own = sweep.own_program(setting)
    return sweep.Program(own.steps + 2, own.rows + own.rows // 2, own.levels)


def _assert_shared_equals_own(settings, reps=2, seed=5):
    plan = sweep.plan_programs(settings)
    for st in settings:
        prog = _program(st, plan)
        assert (prog.rows, prog.steps) != (sweep.own_program(st).rows, st.estimator.num_steps) \
            or st.key in plan
        shared = sweep.run_setting(st, reps=reps, seed=seed, num_devices=1, program=prog)
        own = _per_setting(st, reps, seed)
        _assert_close(shared, own)
        # the accounting sees the setting's own group sizes and rounds, never the padded ones
        assert _ledgers(st, shared) == _ledgers(st, own)
    return plan


# --------------------------------------------------------------------------------------------
# The bundled studies' quick configurations
# --------------------------------------------------------------------------------------------


def test_ldp_iht_settings_that_differ_in_n_share_programs_and_equal_their_own_kernels():
    # the default run's small version of the next test: Alg 2 (T = 3) and Alg 4 (T = 6, R = 2)
    # at n = 3000 and 6000 in chunks of 1000 users (rounds of 1 and 2 chunks: 3 and 6 steps
    # of 1000 rows; Alg 4's 6 steps of 500 and of 1000 rows), and the eps panel at n = 3000
    _, sets = _experiment_settings("ldp_iht", {
        "d": 6, "n_grid": (3000, 6000), "eps_grid": (1.0,), "n_eps": 3000, "eps_extra": (0.5,),
        "chunk": 1000, "methods": ("alg2", "alg4"), "panels": ("n", "eps")})
    plan = _assert_shared_equals_own(sets)
    assert len(plan) == len(sets) == 5
    assert len(set(plan.values())) == 2  # one program per algorithm


@pytest.mark.slow
def test_every_ldp_iht_setting_of_ldp_iht_quick_equals_its_own_kernel():
    _, sets = _experiment_settings("ldp_iht", quick=True)
    iht = _iht(sets)
    # Alg 2 at n = 100k (one chunk a round) and 200k (two): one program; Alg 4, R = 2
    assert {s.estimator.padded.family for s in iht} >= {"ldp-iht[T=3,k'=4,R=1]",
                                                        "ldp-iht[T=6,k'=4,R=2]"}
    plan = _assert_shared_equals_own(iht)
    n_panel = [s for s in iht if s.columns["panel"] == "n" and s.columns["method"] == "alg2"]
    assert sorted(s.estimator.num_steps for s in n_panel) == [3, 6]  # C = 1 and C = 2
    assert len({plan[s.key] for s in n_panel}) == 1


def test_every_ldp_iht_setting_of_ldp_lower_quick_equals_its_own_kernel():
    # Alg 2, Alg 4 and the Wang & Xu literal radius, each alone in the quick configuration:
    # run padded to a larger program of its own
    _, sets = _experiment_settings("ldp_lower", quick=True)
    iht = _iht(sets)
    assert sorted(s.columns["method"] for s in iht) == ["alg2", "alg4", "wang_xu_literal"]
    assert any("wang-xu-literal" in s.estimator.padded.family for s in iht)
    _assert_shared_equals_own(iht)


def test_planned_programs_of_the_ldp_iht_studies():
    # before the padded form: 17 (ldp_iht) and 15 (ldp_lower) programs; every IHT setting one
    plans = {}
    for name in ("ldp_iht", "ldp_lower"):
        _, sets = _experiment_settings(name)
        plans[name] = sweep.plan_programs(_iht(sets))
    # ldp_iht: the n panel's four n (1 to 6 chunks of a round) share a program per algorithm
    iht_n = [k for k in plans["ldp_iht"] if ",n,alg2," in k]
    assert len(iht_n) == 4
    # ldp_lower: n = 300k (one chunk a round) and 1M (two) share Alg 2's and Wang & Xu's
    assert {k.split(",")[1] for k in plans["ldp_lower"]} == {"alg2", "wang_xu_literal"}


# --------------------------------------------------------------------------------------------
# One program for every n
# --------------------------------------------------------------------------------------------


def test_three_n_compile_one_program(tmp_path):
    import dpjax.experiments

    # Alg 2 alone: Alg 1's level keys (delta, r, lam) are columns only
    exp = dataclasses.replace(dpjax.experiments.registry()["ldp_iht"],
                              level_columns=("delta", "r", "lam"))
    # rounds of 1000, 2000 and 3000 users in chunks of 1000: 3, 6 and 9 steps of 1000 rows;
    # d = 13: a dimension no other test uses, so the program is compiled here
    overrides = {"d": 13, "n_grid": (3000, 6000, 9000), "eps_grid": (1.0,), "chunk": 1000,
                 "methods": ("alg2",), "panels": ("n",)}
    before = sweep.compile_count()
    study.run_experiment(exp, tmp_path, reps=2, seed=0, progress=False, num_devices=1,
                         overrides=overrides)
    assert sweep.compile_count() == before + 1
    meta = json.loads((tmp_path / "config.json").read_text())["settings"]
    assert len(meta) == 3
    assert len({m["program"] for m in meta}) == 1
    assert [m["compiled"] for m in meta] == [True, False, False]
    assert "ldp-iht[T=3" in meta[0]["program"]


# --------------------------------------------------------------------------------------------
# The padded step
# --------------------------------------------------------------------------------------------


def _adversarial(rows, cols):
    vals = np.array([1e30, -1e30, np.nan, np.inf, 3.0], np.float32)
    return np.resize(vals, (rows, cols)) if cols else np.resize(vals, (rows,))


def test_a_padded_batch_keeps_every_real_users_key():
    # the kernel keys user i of a batch by split(key, rows)[i]: a padded batch's longer split
    # must begin with the shorter one, under this JAX's threefry
    for m, pad in ((1, 1), (33, 17), (1000, 999)):
        short = jax.random.key_data(jax.random.split(jax.random.key(7), m))
        long = jax.random.key_data(jax.random.split(jax.random.key(7), m + pad))[:m]
        np.testing.assert_array_equal(short, long)


@pytest.mark.parametrize("theta_norm,variant", [(1.0, "rectified"), (2.0, "rectified"),
                                                (1.0, "wang_xu_2021_literal")])
@pytest.mark.parametrize("chunks", [1, 2])
def test_padded_rows_change_nothing(theta_norm, variant, chunks):
    d, m, pad, T, kp = 6, 50, 13, 3, 3
    est = L.ldp_iht(T, kp, theta_norm=theta_norm, variant=variant, batching="disjoint",
                    chunks_per_round=chunks)
    x = jax.random.normal(jax.random.key(0), (m, d))
    y = x @ jnp.asarray([0.7, -0.7, 0, 0, 0, 0]) + 0.5 * jax.random.normal(jax.random.key(1), (m,))
    padded = (jnp.concatenate([x, jnp.asarray(_adversarial(pad, d))]),
              jnp.concatenate([y, jnp.asarray(_adversarial(pad, 0))]))
    hp = L.IHTHyperparams(*map(jnp.float32, (1.0, 2.0, 2.0, 0.8)))
    sizes = base.Sizes(jnp.arange(m + pad) < m, jnp.float32(m), jnp.int32(T * chunks))
    state = est.init(jnp.zeros(d))
    # every step of two rounds (mid-round steps accumulate, the last one moves theta)
    for t in range(2 * chunks):
        want, info_w = est.step(jax.random.fold_in(jax.random.key(2), t), state, (x, y), hp)
        got, info_g = est.padded.step(jax.random.fold_in(jax.random.key(2), t), state, padded,
                                      hp, sizes)
        for a, b in zip(jax.tree_util.tree_leaves((got, info_g)),
                        jax.tree_util.tree_leaves((want, info_w))):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
        state = want
    assert np.abs(np.asarray(state.beta)).sum() > 0  # theta moved


def test_padded_forms_are_shared_by_rounds_and_distinct_otherwise():
    a = L.ldp_iht(3, 4, batching="disjoint")
    b = L.ldp_iht(3, 4, batching="disjoint", chunks_per_round=5)
    assert a.padded is b.padded  # the chunks per round are a runtime value
    assert L.ldp_iht(4, 4, batching="disjoint").padded != a.padded
    assert L.ldp_iht(3, 5, batching="disjoint").padded != a.padded
    assert L.ldp_iht(3, 4, theta_norm=2.0, batching="disjoint").padded != a.padded
    assert L.ldp_iht(3, 4, variant="wang_xu_2021_literal", batching="disjoint").padded \
        != a.padded
    # groups sliced from the whole data set inside the step have no padded form
    assert L.ldp_iht(3, 4).padded is None


def test_no_padded_form_without_the_partitionable_threefry():
    # the older threefry's split(key, rows) depends on rows: a padded batch would change every
    # user's draw, so the estimator keeps its own program
    jax.config.update("jax_threefry_partitionable", False)
    try:
        short = jax.random.key_data(jax.random.split(jax.random.key(7), 33))
        long = jax.random.key_data(jax.random.split(jax.random.key(7), 50))[:33]
        assert not np.array_equal(short, long)
        assert L._padded_iht.__wrapped__(3, 4, 1.0, "rectified") is None
    finally:
        jax.config.update("jax_threefry_partitionable", True)
    assert L._padded_iht.__wrapped__(3, 4, 1.0, "rectified") is not None
