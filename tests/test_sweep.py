"""The sweep engine: keys, common random numbers, determinism across chunking, devices and data
modes, agreement with base.run, compile-once, and resumable results."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base, results, study, sweep
from dpjax.algorithms import dp_em
from dpjax.experiments._em_common import BetaError, InitNearTruth
from dpjax.models import GaussianMixture, sparse_unit_beta

MODEL = GaussianMixture(0.5)
N, D, S, N0 = 600, 30, 3, 4
INIT, RECORD = InitNearTruth(0.125), BetaError()


def _levels(eps_values, eta=0.5):
    return tuple({"epsilon": e, "delta": 1 / (2 * N), "eta": eta, "truncation": 2.0}
                 for e in eps_values)


def _setting(eps_values=(0.5, 2.0, math.inf), key="toy"):
    return sweep.Setting(
        key=key, columns={"method": "hd-dp-em", "n": N, "d": D, "s": S},
        estimator=dp_em.hd_dp_em(MODEL, S, N0), simulate=MODEL.simulate, init=INIT,
        record=RECORD, truth=sparse_unit_beta(D, S), plan=sweep.DataPlan(N0, N // N0),
        hparams_type=dp_em.DPEMHyperparams, levels=_levels(eps_values), n=N,
    )


@pytest.fixture(scope="module")
def reference():
    """7 repetitions, one chunk, one device, materialised data."""
    return sweep.run_setting(_setting(), reps=7, seed=3, data_mode="materialize", num_devices=1)


def test_shapes_and_the_starting_value(reference):
    err = reference["error"]
    assert err.shape == (7, 3, N0 + 1)
    np.testing.assert_allclose(err[:, :, 0], 0.125, rtol=1e-5)  # ||beta0 - beta*|| = 1/8
    # every level of a repetition starts from the same beta0
    assert np.ptp(err[:, :, 0], axis=1).max() < 1e-6


@pytest.mark.cpu_bitwise
@pytest.mark.parametrize("chunk_size", [1, 3])
def test_results_do_not_depend_on_chunk_size(reference, chunk_size):
    out = sweep.run_setting(_setting(), reps=7, seed=3, chunk_size=chunk_size,
                            data_mode="materialize", num_devices=1)
    np.testing.assert_array_equal(out["error"], reference["error"])


def test_results_do_not_depend_on_the_device_count(reference):
    assert len(jax.devices()) == 4  # conftest forces 4 CPU devices
    for devices in (2, 4):
        out = sweep.run_setting(_setting(), reps=7, seed=3, chunk_size=4,
                                data_mode="materialize", num_devices=devices)
        np.testing.assert_allclose(out["error"], reference["error"], rtol=1e-5, atol=1e-6)


def test_streamed_batches_equal_materialised_data(reference):
    out = sweep.run_setting(_setting(), reps=7, seed=3, data_mode="stream", num_devices=1)
    np.testing.assert_allclose(out["error"], reference["error"], rtol=1e-5, atol=1e-6)


def test_results_do_not_depend_on_which_other_levels_ran(reference):
    # level 2.0 alone, and in a different order with another level: same numbers
    alone = sweep.run_setting(_setting((2.0,)), reps=7, seed=3, data_mode="materialize",
                              num_devices=1)
    # Same keys, so same draws; the vectorised arithmetic over a different number of levels may
    # round differently in the last bit.
    close = dict(rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(alone["error"][:, 0], reference["error"][:, 1], **close)
    other = sweep.run_setting(_setting((math.inf, 0.8, 2.0)), reps=7, seed=3,
                              data_mode="materialize", num_devices=1)
    np.testing.assert_allclose(other["error"][:, 2], reference["error"][:, 1], **close)
    np.testing.assert_allclose(other["error"][:, 0], reference["error"][:, 2], **close)


def test_levels_share_the_data_and_repetitions_differ(reference):
    err = reference["error"]
    # different repetitions see different data (non-private final errors differ) ...
    assert np.unique(np.round(err[:, 2, -1], 7)).size == 7
    # ... and a different seed changes everything
    other = sweep.run_setting(_setting(), reps=2, seed=4, data_mode="materialize", num_devices=1)
    assert not np.allclose(other["error"][:, :, -1], err[:2, :, -1])


def test_sweep_equals_base_run_with_the_documented_keys(reference):
    """Repetition r, level l of the sweep is base.run on the rep's data with the noise key
    fold_in(fold_in(noise_key, r), level_id)."""
    st = _setting()
    data_key, noise_key = sweep.study_keys(3, st.key)
    r, li = 5, 1
    dk = jax.random.fold_in(data_key, r)
    blocks = [MODEL.simulate(jax.random.fold_in(dk, b), N // N0, jnp.asarray(st.truth))
              for b in range(N0)]
    data = jax.tree_util.tree_map(lambda *x: jnp.concatenate(x), *blocks)
    beta0 = INIT(jax.random.fold_in(dk, sweep.INIT_TAG), jnp.asarray(st.truth))
    level = st.levels[li]
    run_key = jax.random.fold_in(jax.random.fold_in(noise_key, r), int(st.level_ids()[li]))
    # the level's value of every field (a DERIVED one it leaves out: its default)
    hp = dp_em.DPEMHyperparams(*map(jnp.float32, sweep.level_values(dp_em.DPEMHyperparams,
                                                                    level)))
    _, trace = base.run(st.estimator, run_key, data, st.estimator.init(beta0), hp)
    err = np.linalg.norm(np.asarray(trace.beta) - st.truth, axis=1)
    np.testing.assert_allclose(reference["error"][r, li, 1:], err, rtol=1e-5, atol=1e-6)


def test_a_sweep_compiles_once_per_shape():
    st = _setting((0.3, 0.6, math.inf), key="compile-check")
    sweep.run_setting(st, reps=4, seed=0, chunk_size=2, num_devices=1, data_mode="stream")
    before = sweep.compile_count()
    # new level values (same count), more repetitions and chunks, another seed: no new compile
    for eps, seed in (((0.4, 0.9, 3.0), 1), ((0.2, 0.5, 1.0), 2)):
        sweep.run_setting(st, reps=6, seed=seed, chunk_size=2, num_devices=1,
                          data_mode="stream", levels=_levels(eps))
    assert sweep.compile_count() == before
    # a different shape (another number of levels) compiles once more
    sweep.run_setting(st, reps=2, seed=0, chunk_size=2, num_devices=1, data_mode="stream",
                      levels=_levels((0.5,)))
    assert sweep.compile_count() == before + 1


def test_record_must_be_a_dict_of_metrics():
    st = _setting()
    bad = sweep.Setting(**{**st.__dict__, "key": "bad",
                           "record": lambda state, truth: jnp.linalg.norm(state.beta - truth)})
    with pytest.raises(TypeError, match="dict of named metrics"):
        sweep.run_setting(bad, reps=1, seed=0, num_devices=1)


def test_stream_mode_needs_disjoint_batches():
    with pytest.raises(ValueError, match="one data block per step"):
        sweep.make_kernel(dp_em.hd_dp_em(MODEL, S, N0), MODEL.simulate, INIT, RECORD,
                          sweep.DataPlan(N0 + 1, 10), "stream")
    with pytest.raises(ValueError, match="at least one record per iteration"):
        sweep.make_kernel(dp_em.hd_dp_em(MODEL, S, N0), MODEL.simulate, INIT, RECORD,
                          sweep.DataPlan(1, N0 - 1))
    with pytest.raises(ValueError, match="disjoint batch per step"):
        sweep.make_kernel(dp_em.gradient_em(MODEL, N0, sample_splitting=False), MODEL.simulate,
                          INIT, RECORD, sweep.DataPlan(1, N), "stream")


# ---------------------------------------------------------------------------------------------
# Results files and resume
# ---------------------------------------------------------------------------------------------


def _experiment(calls):
    def settings(config):
        calls.append(1)
        return [_setting(tuple(config["eps"]) + (math.inf,), key="exp-toy")]

    return study.Experiment(
        name="toy", title="toy study", defaults={"eps": (0.5,), "label": "x", "flag": False},
        settings=settings, reps=6, quick_reps=2,
    )


def test_results_files_have_the_contract_columns(tmp_path):
    out = study.run_experiment(_experiment([]), tmp_path, reps=3, seed=1, chunk_size=2,
                               progress=False, num_devices=1)
    rows = results.read_csv(tmp_path / "results.csv")
    assert len(rows) == 3 * 2  # reps x levels
    for col in ("experiment", "method", "n", "d", "s", "epsilon", "delta", "rep", "error",
                "eta", "truncation"):
        assert col in rows[0], col
    assert {r["rep"] for r in rows} == {0, 1, 2}
    summary = results.read_csv(tmp_path / "summary.csv")
    assert len(summary) == 2 and all(r["count"] == 3 for r in summary)
    errs = [r["error"] for r in rows if r["epsilon"] == 0.5]
    s05 = next(r for r in summary if r["epsilon"] == 0.5)
    assert s05["mean"] == pytest.approx(np.mean(errs))
    assert s05["se"] == pytest.approx(np.std(errs, ddof=1) / math.sqrt(3))
    iters = results.read_csv(tmp_path / "iterations.csv")
    assert len(iters) == 3 * 2 * (N0 + 1)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["seed"] == 1 and cfg["reps"] == 3 and "jax" in cfg["environment"]
    ledgers = cfg["settings"][0]["levels"]
    # read off the noise drawn (peeling's composition bound): at most the requested 0.5
    assert 0.2 < ledgers[0]["ledger"]["approx_dp"]["epsilon"] <= 0.5
    assert ledgers[1]["ledger"]["is_private"] is False  # epsilon = inf is reported as not DP
    assert out.rows == rows or len(out.rows) == len(rows)


def test_rerun_resumes_from_completed_chunks(tmp_path, monkeypatch):
    exp = _experiment([])
    first = study.run_experiment(exp, tmp_path, reps=4, seed=2, chunk_size=2, progress=False,
                                 num_devices=1)
    chunks = sorted((tmp_path / "chunks").glob("*/*.npz"))
    assert len(chunks) == 2
    # Simulate a run killed after its first chunk: drop the second chunk file.
    chunks[1].unlink()
    calls = []
    real, real_shared = sweep.make_kernel, sweep.make_shared_kernels

    def counting(k):
        def wrapped(reps, *a):
            calls.append(np.asarray(reps).tolist())
            return k(reps, *a)

        return wrapped

    def counting_kernel(*args, **kwargs):
        return counting(real(*args, **kwargs))

    def counting_shared(*args, **kwargs):  # the shared program's algorithm calls
        data, alg = real_shared(*args, **kwargs)
        return data, counting(alg)

    monkeypatch.setattr(sweep, "make_kernel", counting_kernel)
    monkeypatch.setattr(sweep, "make_shared_kernels", counting_shared)
    second = study.run_experiment(exp, tmp_path, reps=4, seed=2, chunk_size=2, progress=False,
                                  num_devices=1)
    assert calls == [[2, 3]]  # only the missing chunk was computed
    np.testing.assert_array_equal(second.traces["exp-toy"]["error"],
                                  first.traces["exp-toy"]["error"])
    # A different configuration refuses the directory.
    with pytest.raises(ValueError, match="different configuration"):
        study.run_experiment(exp, tmp_path, reps=4, seed=3, chunk_size=2, progress=False)


def test_config_overrides_are_checked_against_the_defaults():
    exp = _experiment([])
    cfg = study.resolve_config(exp, {"eps": "0.3,0.7", "flag": "true", "label": "y"})
    assert dict(cfg) == {"eps": (0.3, 0.7), "flag": True, "label": "y"}
    with pytest.raises(study.ConfigError, match="unknown setting.*valid settings: eps, flag"):
        study.resolve_config(exp, {"epz": "1"})
    with pytest.raises(study.ConfigError, match="--set eps: must be a non-empty comma-separated"):
        study.resolve_config(exp, {"eps": "a,b"})
    with pytest.raises(study.ConfigError, match="--set flag: must be true or false; got 'maybe'"):
        study.resolve_config(exp, {"flag": "maybe"})


def _unit_beta_per_rep(key):
    """A new truth per repetition: s coordinates uniform on the sphere (spec 003's design)."""
    v = jax.random.normal(key, (S,))
    return jnp.zeros(D).at[:S].set(v / jnp.linalg.norm(v))


@pytest.mark.cpu_bitwise
def test_a_truth_drawn_per_repetition(reference):
    """PerRepetition: each repetition draws its own truth from its key; all levels of a
    repetition share it (and the data), results do not depend on the chunking, and the draw
    differs across repetitions."""
    import dataclasses

    st = dataclasses.replace(_setting(), key="per-rep",
                             truth=sweep.PerRepetition(_unit_beta_per_rep))
    a = sweep.run_setting(st, reps=4, seed=3, chunk_size=4, num_devices=1)
    b = sweep.run_setting(st, reps=4, seed=3, chunk_size=1, num_devices=1, data_mode="stream")
    np.testing.assert_array_equal(a["error"], b["error"])
    np.testing.assert_allclose(a["error"][:, :, 0], 0.125, rtol=1e-5)  # init near each truth
    # the non-private level is noise-free: it differs across repetitions only through the draw
    finals = a["error"][:, 2, -1]
    assert np.unique(np.round(finals, 6)).size == 4
    truths = [np.asarray(_unit_beta_per_rep(jax.random.fold_in(jax.random.fold_in(
        sweep.study_keys(3, "per-rep")[0], r), sweep.TRUTH_TAG))) for r in range(2)]
    assert not np.allclose(truths[0], truths[1])


def test_final_only_records_the_start_and_the_final_iterate():
    """Setting(final_only=True): the metrics hold the starting value and the final iterate,
    from a run keyed fold_in(level_key, 0); its ledger events cover every step."""
    import dataclasses

    st = dataclasses.replace(_setting(), key="final", final_only=True)
    out = sweep.run_setting(st, reps=3, seed=3, num_devices=1)
    assert out["error"].shape == (3, 3, 2)
    np.testing.assert_allclose(out["error"][:, :, 0], 0.125, rtol=1e-5)
    metrics, events = sweep.split_events(out, sweep.event_structure(st))
    assert np.shape(events[0].scale) == (3, 3, N0)
    # the same final iterate as a plain run of the estimator with the block's key
    data_key, noise_key = sweep.study_keys(3, "final")
    r, level = 1, 0
    dk = jax.random.fold_in(data_key, r)
    truth = jnp.asarray(st.truth)
    data = jax.tree_util.tree_map(
        lambda *b: jnp.concatenate(b),
        *[MODEL.simulate(jax.random.fold_in(dk, b), N // N0, truth) for b in range(N0)])
    beta0 = INIT(jax.random.fold_in(dk, sweep.INIT_TAG), truth)
    level_key = jax.random.fold_in(jax.random.fold_in(noise_key, r), int(st.level_ids()[level]))
    hp = jax.tree_util.tree_map(lambda x: x[level], st.hparams())
    final, _ = base.run(st.estimator, jax.random.fold_in(level_key, 0), data,
                        st.estimator.init(beta0), hp)
    np.testing.assert_allclose(out["error"][r, level, 1],
                               np.linalg.norm(np.asarray(final.beta) - st.truth), rtol=1e-5)
