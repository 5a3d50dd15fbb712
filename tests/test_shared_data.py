"""One data program per algorithm program (issue 47): settings whose ``simulate`` is
prefix-stable draw their data in their program's shared data program, bit for bit their own
draws, and the bundled simulators are prefix-stable."""

from __future__ import annotations

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import study, sweep
from dpjax.algorithms import dp_em, dp_gem
from dpjax.experiments._em_common import BetaError, InitNearTruth
from dpjax.mechanisms import rows_dot
from dpjax.models import GaussianMixture, prefix_stable, sparse_unit_beta
from dpjax.models.gmm import GMMData
from dpjax.study import Experiment

INF = math.inf
GMM = GaussianMixture(sigma=0.5)


# --------------------------------------------------------------------------------------------
# rows_dot
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("m", [None, 3])
def test_rows_dot_is_the_product_and_its_rows_do_not_depend_on_their_number(m):
    k = 10
    key = jax.random.key(4)
    w = jax.random.normal(jax.random.key(5), (k,) if m is None else (k, m))
    big = jax.random.normal(key, (16384, k))
    full = np.asarray(jax.jit(rows_dot)(big, w))
    np.testing.assert_allclose(full, np.asarray(big @ w), rtol=1e-5, atol=1e-5)
    for rows in (1, 255, 256, 257, 555, 8333):  # inside, at and past a block of 256
        part = np.asarray(jax.jit(rows_dot)(big[:rows], w))
        assert part.shape == full[:rows].shape
        np.testing.assert_array_equal(part, full[:rows], err_msg=f"rows={rows}")


def test_rows_dot_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match=r"rows_dot needs x of shape \(n, k\)"):
        rows_dot(jnp.ones((4, 3)), jnp.ones(2))
    with pytest.raises(ValueError, match="rows_dot"):
        rows_dot(jnp.ones(4), jnp.ones(4))


# --------------------------------------------------------------------------------------------
# prefix-stable simulators
# --------------------------------------------------------------------------------------------


def test_prefix_stable_is_read_from_functions_methods_and_callable_objects():
    @prefix_stable
    def sim(key, n, truth):
        return jax.random.normal(key, (n,))

    @dataclasses.dataclass(frozen=True)
    class Sim:
        @prefix_stable
        def __call__(self, key, n, truth):
            return jax.random.normal(key, (n,))

    @dataclasses.dataclass(frozen=True)
    class Plain:
        def __call__(self, key, n, truth):
            return jax.random.normal(key, (n,))

    assert sweep.is_prefix_stable(sim)
    assert sweep.is_prefix_stable(Sim())
    assert sweep.is_prefix_stable(GMM.simulate)
    assert not sweep.is_prefix_stable(Plain())
    assert not sweep.is_prefix_stable(lambda key, n, truth: jax.random.normal(key, (n,)))


def test_prefix_stable_is_false_without_jaxs_partitionable_threefry():
    with jax.threefry_partitionable(False):
        assert not sweep.is_prefix_stable(GMM.simulate)
    assert sweep.is_prefix_stable(GMM.simulate)


def _smallest_and_program(settings):
    """Per prefix-stable simulate, its setting of fewest rows per block and the rows per block
    the shared data program draws for it."""
    plan = sweep.plan_programs(settings)
    out = {}
    for s in settings:
        prog = plan.get(s.key)
        if prog is None or not sweep.is_prefix_stable(s.simulate):
            continue
        draws = sweep._shared_draws(s, prog)
        if draws is None:
            continue
        best = out.get(s.simulate)
        if best is None or s.plan.block_size < best[0].plan.block_size:
            out[s.simulate] = (s, draws.block_size)
    return list(out.values())


@pytest.mark.parametrize("name", ["em_fig2", "em_fig4", "em_rmc", "iv_fig3", "iv_fig9",
                                  "gem_mean", "gem_fig7", "ldp_iht", "ldp_lower"])
def test_the_bundled_simulators_are_prefix_stable_at_the_sizes_their_studies_draw(name):
    """Every bundled model that says so draws, at a setting's own rows, the first rows of its
    draw at its program's rows, bit for bit (its products formed by rows_dot)."""
    import dpjax.experiments

    exp = dpjax.experiments.registry()[name]
    config = study.resolve_config(exp, {})
    pairs = _smallest_and_program(study._merge_repeated_levels(study._study_settings(exp, config)))
    assert pairs, name
    raw = jax.random.key_data(jax.random.key(11))  # one key for both draws, by design
    for s, rows in pairs:
        truth = s.example_truth()
        own = s.plan.block_size
        more = rows if rows > own else own + 37

        def draw(k, rows, s=s, truth=truth):
            return s.simulate(jax.random.wrap_key_data(k), rows, truth)

        a = jax.jit(draw, static_argnums=1)(raw, own)
        b = jax.jit(draw, static_argnums=1)(raw, more)
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y)[:own],
                                          err_msg=f"{name} {s.key}: {own} of {more} rows")


# --------------------------------------------------------------------------------------------
# the shared data program
# --------------------------------------------------------------------------------------------


def _gem_setting(n, d, T=4, simulate=GMM.simulate, key=""):
    levels = ({"epsilon": 0.5, "delta": 1 / (2 * n), "eta": 1.0, "tau": 0.01, "zeta": 0.05,
               "s": 0.0},)
    return sweep.Setting(
        key=f"dp-gem,n={n},d={d},T={T}{key}", columns={"method": "dp-gem", "n": n},
        estimator=dp_gem.dp_gem(GMM, T), simulate=simulate, init=InitNearTruth(0.125),
        record=BetaError(), truth=sparse_unit_beta(d, d), plan=sweep.DataPlan(1, n),
        hparams_type=dp_gem.DPGEMHyperparams, levels=levels, n=n)


def _em_setting(n, d, method):
    N0 = dp_em.default_num_iterations(n)
    est = (dp_em.ld_dp_em(GMM, N0) if method == "ld-dp-em"
           else dp_em.gradient_em(GMM, N0, sample_splitting=False))
    return sweep.Setting(
        key=f"{method},n={n},d={d}", columns={"method": method, "n": n}, estimator=est,
        simulate=GMM.simulate, init=InitNearTruth(0.125), record=BetaError(),
        truth=sparse_unit_beta(d, 3), plan=sweep.DataPlan(N0, n // N0),
        hparams_type=dp_em.DPEMHyperparams,
        levels=({"epsilon": 0.5, "delta": 1 / (2 * n), "eta": 0.5, "truncation": 2.0},), n=n)


def _data(setting, program, share, reps=3, seed=2):
    kernel, _ = sweep.make_shared_kernels(setting, program, 1, share)
    data_key = np.asarray(jax.random.key_data(sweep.study_keys(seed, setting.key)[0]))
    own = (np.int32(setting.plan.block_size),) if share else ()
    out = kernel(jnp.arange(reps, dtype=jnp.uint32), data_key, setting.fixed_truth, *own)
    return kernel, jax.tree_util.tree_map(np.asarray, out)


def _assert_equal(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("layout", ["one block of records", "a block per step",
                                    "blocks of records"])
def test_a_shared_data_program_draws_each_settings_own_data_bit_for_bit(layout):
    """Settings of different n in one program: the shared data program (one compile) gives
    each exactly the padded data, start values, truth and data check of its own data program:
    one block of all records (dp-gem), disjoint batches of one block per step (ld-dp-em), and
    blocks of records joined at the setting's rows (gradient EM on all data)."""
    d = 7
    if layout == "one block of records":
        settings = [_gem_setting(n, d) for n in (300, 450, 600)]
    else:
        method = "ld-dp-em" if layout == "a block per step" else "gradient-em"
        settings = [_em_setting(n, d, method) for n in (600, 700, 800)]
    steps = max(s.estimator.num_steps for s in settings)
    rows = max(sweep._data_rows(s) for s in settings)
    program = sweep.Program(steps, rows, 1)
    kernels = set()
    for s in settings:
        assert sweep.shares_data_program(s, program, reps=3)
        _, own = _data(s, program, share=False)
        kernel, shared = _data(s, program, share=True)
        _assert_equal(shared, own)
        kernels.add(id(kernel))
    # one data program per number of blocks (all three, unless the steps N0 differ)
    assert len(kernels) == len({s.plan.num_blocks for s in settings})


@prefix_stable
def _nan_past_five(key, n, beta):
    """Finite records 0-4, NaN from record 5 on (prefix-stable)."""
    y = jax.random.normal(key, (n, beta.shape[0]))
    return GMMData(jnp.where(jnp.arange(n)[:, None] >= 5, jnp.nan, y))


def test_the_shared_data_program_reads_only_a_settings_own_records():
    """Records drawn past a setting's own are zeroed and not checked: n = 5 (finite) run in a
    program of 8 rows, whose draws there hold NaN, is finite and flagged clean; n = 7 holds
    NaN records of its own and is flagged, as its own data program flags it."""
    program = sweep.Program(4, 8, 1)
    for n, bad in ((5, 0), (7, 1)):
        s = _gem_setting(n, 3, simulate=_nan_past_five, key=f",nan{n}")
        _, (data, _, _, flags) = _data(s, program, share=True)
        _, (own_data, _, _, own_flags) = _data(s, program, share=False)
        np.testing.assert_array_equal(flags, np.full(3, bad))
        np.testing.assert_array_equal(flags, own_flags)
        np.testing.assert_array_equal(data.y, own_data.y)
        assert (data.y[:, n:] == 0).all()
    assert np.isfinite(_data(_gem_setting(5, 3, simulate=_nan_past_five, key=",nan5"),
                             program, share=True)[1][0].y).all()


def test_a_setting_shares_its_programs_data_program_only_where_it_can(monkeypatch):
    program = sweep.Program(4, 600, 1)
    s = _gem_setting(300, 5)
    assert sweep.shares_data_program(s, program, reps=50)
    # not prefix-stable: its own data program
    plain = dataclasses.replace(s, simulate=lambda key, n, beta: GMM.simulate(key, n, beta))
    assert not sweep.shares_data_program(plain, program, reps=50)
    # batches split from one block of records (disjoint, blocks != steps): its own
    split = _em_setting(600, 5, "ld-dp-em")
    split = dataclasses.replace(split, plan=sweep.DataPlan(1, 600))
    assert sweep._shared_draws(split, program) is None
    assert not sweep.shares_data_program(split, program, reps=50)
    # the draws past its own rows cost more than the study may spend: its own
    extra = (600 - 300) * 5 * 4 * 50  # rows x d x float32 x repetitions
    monkeypatch.setattr(sweep, "SHARED_DATA_FREE_BYTES", extra)
    assert sweep.shares_data_program(s, program, reps=50)
    assert not sweep.shares_data_program(s, program, reps=51)
    # a simulate that draws by rejection has a limit of its own (plain draws: not that one)
    heavy = dataclasses.replace(s, simulate=_t_draws)
    assert sweep.draws_by_rejection(heavy) and not sweep.draws_by_rejection(s)
    monkeypatch.setattr(sweep, "SHARED_DATA_FREE_BYTES", 10 * extra)
    monkeypatch.setattr(sweep, "SHARED_DATA_FREE_BYTES_REJECTION", extra)
    assert sweep.shares_data_program(heavy, program, reps=50)
    assert not sweep.shares_data_program(heavy, program, reps=51)
    # an accelerator's limit is its own
    monkeypatch.setattr(sweep, "SHARED_DATA_FREE_BYTES", extra)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert sweep.shares_data_program(s, program, reps=51)
    assert sweep.shares_data_program(heavy, program, reps=51)
    monkeypatch.setattr(sweep, "SHARED_DATA_FREE_BYTES_ACCELERATOR", extra)
    assert not sweep.shares_data_program(s, program, reps=51)


@prefix_stable
def _t_draws(key, n, beta):
    x = beta[0] + jax.random.t(key, 3.0, (n,), jnp.float32)
    return GMMData(x[:, None] * jnp.ones((1, beta.shape[0]), jnp.float32))


def _poisson_draws(key, n, beta):
    return GMMData(jax.random.poisson(key, 2.0, (n, beta.shape[0])).astype(jnp.float32))


def _normals_in_a_loop(key, n, beta):  # a fixed-length loop (a scan): plain draws
    x = jax.lax.map(lambda k: jax.random.normal(k, (beta.shape[0],)), jax.random.split(key, n))
    return GMMData(x)


def _rejection_inside_a_branch(key, n, beta):
    x = jax.lax.cond(beta[0] > 0, lambda k: _poisson_draws(k, n, beta).y,
                     lambda k: jax.random.normal(k, (n, beta.shape[0])), key)
    return GMMData(x)


@pytest.mark.parametrize("simulate, rejection", [
    (GMM.simulate, False), (_normals_in_a_loop, False), (_t_draws, True),
    (_poisson_draws, True), (_rejection_inside_a_branch, True)])
def test_draws_by_rejection_finds_a_loop_of_the_draws_own_length_at_any_depth(simulate,
                                                                              rejection):
    s = dataclasses.replace(_gem_setting(300, 5), simulate=simulate)
    assert sweep.draws_by_rejection(s) is rejection


def test_a_study_compiles_one_data_program_for_its_settings_and_records_it(tmp_path):
    """Three n of one program: one algorithm and one data program compiled, the first setting
    compiling both; config.json says so; the results equal the setting's own kernel."""
    d = 19  # a dimension no other test uses: the programs are compiled here

    def settings(c):
        return [_gem_setting(n, d) for n in c["n_grid"]]

    exp = Experiment(name="shared-data", title="t", defaults={"n_grid": (300, 400, 500)},
                     settings=settings, reps=2, quick_reps=2)
    before, data_before = sweep.compile_count(), sweep.data_compile_count()
    study.run_experiment(exp, tmp_path, reps=2, seed=0, progress=False, num_devices=1)
    assert sweep.compile_count() == before + 1
    assert sweep.data_compile_count() == data_before + 1
    meta = json.loads((tmp_path / "config.json").read_text())["settings"]
    assert [m["data_program"] for m in meta] == ["shared"] * 3
    assert [m["data_compiled"] for m in meta] == [True, False, False]
    s = _gem_setting(400, d)
    shared = sweep.run_setting(s, reps=2, seed=0, num_devices=1,
                               program=sweep.plan_programs(settings({"n_grid": (300, 400, 500)}))
                               [s.key])
    own = sweep.study_function(s, reps=2, seed=0, num_devices=1)(s.hparams())
    for k, v in own.items():
        np.testing.assert_allclose(shared[k], np.asarray(v), rtol=2e-5, atol=2e-6, err_msg=k)


def test_settings_that_differ_only_in_t_share_their_own_data_program():
    """Full-batch settings of one n that differ in T alone have the same data: one data
    program (the steps are read for disjoint batches only), shared or not."""
    program = sweep.Program(9, 500, 1)
    plain = [dataclasses.replace(_gem_setting(500, 4, T=T),
                                 simulate=lambda key, n, beta: GMM.simulate(key, n, beta))
             for T in (3, 9)]
    plain[1] = dataclasses.replace(plain[1], simulate=plain[0].simulate)
    kernels = {id(sweep.make_shared_kernels(s, program, 1, False)[0]) for s in plain}
    assert len(kernels) == 1
