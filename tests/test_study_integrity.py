"""Nothing reported that was not computed (issue 44, items 1, 3, 4): a stored result is reused
only if the same program produced it, a repeated level counts once, and non-finite simulated
data meet a fit's ``on_invalid`` policy."""

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dpjax import cli, results, study, sweep

# A user's study file; the markers are what the tests edit (init, record, a constant closed
# over by value, the ledger code, the data).
STUDY = '''
import math

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import sweep
from dpjax.examples import dp_mean
from dpjax.study import Experiment

SHIFT = np.array([0.0, 0.0])  # @shift
NAN_RATE = 0.0  # @nan


def init(key, truth):
    del key
    return jnp.zeros_like(truth)  # @init


def record(state, truth):
    return {"error": jnp.linalg.norm(state.beta - truth - SHIFT)}  # @record


def simulate(key, m, truth):
    x = dp_mean.simulate(key, m, truth)
    bad = jax.random.uniform(jax.random.fold_in(key, 7)) < NAN_RATE
    return x.at[0, 0].set(jnp.where(bad, jnp.nan, x[0, 0]))


def ledger(n, hp, events):
    assert type(hp).__name__ not in {"alpha", "beta", "gamma", "delta"}  # a set constant
    return dp_mean.ledger(n, hp, events)  # @ledger


ESTIMATOR = dp_mean.DP_MEAN._replace(ledger=ledger)


def settings(c):
    levels = tuple({"epsilon": e, "delta": 1e-3, "clip": 4.0} for e in (*c["eps_grid"], math.inf))
    return [sweep.Setting(
        key=f"my-mean,n={n}", columns={"method": "my-mean", "n": n, "d": 2},
        estimator=ESTIMATOR, simulate=simulate, init=init, record=record,
        truth=np.ones(2), plan=sweep.DataPlan(num_blocks=1, block_size=n),
        hparams_type=dp_mean.MeanHyperparams, levels=levels, n=n) for n in c["n_grid"]]


MY_MEAN = Experiment(name="my_mean", title="my own DP mean study",
                     defaults={"n_grid": (40, 60), "eps_grid": (0.5, 1.0)}, settings=settings,
                     reps=3, quick_reps=2)
'''

EDITS = {
    "init": ("jnp.zeros_like(truth)  # @init", "jnp.ones_like(truth)  # @init"),
    "record": ("state.beta - truth - SHIFT)}", "state.beta - truth - SHIFT) ** 2}"),
    "constant": ("np.array([0.0, 0.0])  # @shift", "np.array([0.0, 1e-3])  # @shift"),
}


@pytest.fixture
def study_file(tmp_path):
    path = tmp_path / "elsewhere" / "my_study.py"
    path.parent.mkdir()
    path.write_text(STUDY)
    return path


def _run(spec, out, *extra):
    return cli.main(["run", str(spec), "--out", str(out), "--no-progress", "--cpu-devices", "1",
                     *extra])


def _snapshot(out: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``out`` with its bytes and modification time."""
    return {str(p.relative_to(out)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(out.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------------------------
# 1. a stored result is reused only if the same program produced it
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_study_file_stops_before_anything_and_recompute_matches_a_fresh_run(
        study_file, tmp_path, capsys, edit):
    out = tmp_path / "out"
    assert _run(study_file, out, "--reps", "2", "--set", "n_grid=40") == 0
    before = _snapshot(out)
    old, new = EDITS[edit]
    assert old in STUDY
    study_file.write_text(STUDY.replace(old, new))
    capsys.readouterr()
    assert _run(study_file, out, "--reps", "2", "--set", "n_grid=40") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dpjax: error: ")
    assert "'my-mean,n=40' (its traced computation changed)" in err
    assert "--recompute" in err and "another --out" in err
    assert _snapshot(out) == before  # no stored file touched, nothing computed
    # --recompute computes the changed setting again: the same as a fresh run of the edit
    assert _run(study_file, out, "--reps", "2", "--set", "n_grid=40", "--recompute") == 0
    assert _run(study_file, tmp_path / "fresh", "--reps", "2", "--set", "n_grid=40") == 0
    got, ref = (results.read_csv(d / "results.csv") for d in (out, tmp_path / "fresh"))
    assert got == ref
    got, ref = (results.read_csv(d / "summary.csv") for d in (out, tmp_path / "fresh"))
    assert json.dumps(got) == json.dumps(ref)  # budget_spent is nan at epsilon = inf


def test_only_the_changed_settings_are_named_and_recomputed(study_file, tmp_path, capsys):
    """A ledger-only edit changes the program too (epsilon_delivered must come from the code
    that ran with the stored numbers); a grown study (another n) still reuses the rest."""
    out = tmp_path / "out"
    assert _run(study_file, out, "--reps", "2") == 0
    study_file.write_text(STUDY.replace("dp_mean.ledger(n, hp, events)  # @ledger",
                                        "dp_mean.ledger(n + 0, hp, events)  # @ledger")
                          .replace("def ledger(n, hp, events):",
                                   "def ledger(n, hp, events):\n    n = int(n) * 1"))
    capsys.readouterr()
    assert _run(study_file, out, "--reps", "2") == 2
    err = capsys.readouterr().err
    assert "2 setting(s)" in err and "(its ledger code changed)" in err
    assert _run(study_file, out, "--reps", "2", "--recompute") == 0
    err = capsys.readouterr().err
    assert "reused" not in err  # both recomputed
    # unchanged code: a grown study reuses every finished result
    assert _run(study_file, out, "--reps", "3", "--set", "n_grid=40,60,80") == 0
    assert "reused 12 finished (setting, level, repetition) results, computed 15" in \
        capsys.readouterr().err


def test_chunks_without_a_program_record_are_not_reused(study_file, tmp_path, capsys):
    """An --out written before program fingerprints (an older dpjax) is refused too."""
    out = tmp_path / "out"
    assert _run(study_file, out, "--reps", "1", "--set", "n_grid=40") == 0
    (out / "chunks" / "programs.json").unlink()
    capsys.readouterr()
    assert _run(study_file, out, "--reps", "1", "--set", "n_grid=40") == 2
    assert "stored without a program fingerprint, by an older dpjax" in capsys.readouterr().err


def test_a_bundled_experiment_is_covered_the_same_way(tmp_path, monkeypatch, capsys):
    """A change of dpjax's own code under a bundled experiment (as an upgrade would bring)
    stops the rerun; run_experiment(recompute=True) computes it again."""
    from dpjax.examples import dp_mean
    from dpjax.experiments import registry

    exp = registry()["dp_mean"]
    kw = dict(reps=2, quick=True, progress=False, num_devices=1)
    study.run_experiment(exp, tmp_path / "out", **kw)
    capsys.readouterr()
    study.run_experiment(exp, tmp_path / "out", **kw)
    assert "computed 0" in capsys.readouterr().err
    real = dp_mean.clipped_mean
    monkeypatch.setattr(dp_mean, "clipped_mean", lambda x, clip: real(x * 1.0001, clip))
    with pytest.raises(results.ConfigError, match="computed by another program"):
        study.run_experiment(exp, tmp_path / "out", **kw)
    redone = study.run_experiment(exp, tmp_path / "out", recompute=True, **kw)
    fresh = study.run_experiment(exp, tmp_path / "fresh", **kw)
    assert redone.rows == fresh.rows


def test_the_program_fingerprint_is_the_same_in_another_process(tmp_path):
    """A resume happens in a new process: the fingerprint must not depend on ids, addresses
    or the string hash seed (the order of a set constant); and it is per setting, level by
    level for the ledger."""
    (tmp_path / "my_study.py").write_text(STUDY)
    code = textwrap.dedent("""
        import json, sys
        sys.path.insert(0, sys.argv[1])
        from my_study import MY_MEAN
        from dpjax import sweep
        print(json.dumps([sweep.program_fingerprint(s)
                          for s in MY_MEAN.settings(MY_MEAN.defaults)]))
    """)
    runs = [json.loads(subprocess.run([sys.executable, "-c", code, str(tmp_path)],
                                      capture_output=True, text=True, check=True,
                                      env={**os.environ, "PYTHONHASHSEED": seed}).stdout)
            for seed in ("1", "2")]
    assert runs[0] == runs[1]
    a, b = runs[0]
    assert a["program"] != b["program"]  # n = 40 and 60: two shapes
    assert set(a["ledgers"]) == {sweep.level_label({"epsilon": e, "delta": 1e-3, "clip": 4.0})
                                 for e in (0.5, 1.0, math.inf)}


# --------------------------------------------------------------------------------------------
# 3. a repeated level counts once
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grid", ["1,1", "1,inf"])
def test_a_repeated_level_counts_once_on_the_command_line(study_file, tmp_path, capsys, grid):
    out = tmp_path / "out"
    assert _run(study_file, out, "--reps", "3", "--set", "n_grid=40", "--set",
                f"eps_grid={grid}") == 0
    err = capsys.readouterr().err
    assert "note: a repeated level runs and counts once" in err
    summary = results.read_csv(out / "summary.csv")
    assert [r["count"] for r in summary] == [3, 3]
    assert len(results.read_csv(out / "results.csv")) == 6
    assert {r["epsilon"] for r in summary} == {1.0, math.inf}


def test_a_repeated_level_counts_once_through_run_experiment(study_file, tmp_path, capsys):
    exp = cli._resolve(str(study_file))[0]
    once = study.run_experiment(exp, tmp_path / "a", reps=3, progress=False, num_devices=1,
                                overrides={"eps_grid": [1.0], "n_grid": [40]})
    twice = study.run_experiment(exp, tmp_path / "b", reps=3, progress=False, num_devices=1,
                                 overrides={"eps_grid": [1.0, 1.0, 1.0], "n_grid": [40]})
    assert "(3 times) in setting 'my-mean,n=40'" in capsys.readouterr().err
    assert json.dumps(twice.summary) == json.dumps(once.summary) and twice.rows == once.rows


# --------------------------------------------------------------------------------------------
# 4. non-finite simulated data meet a fit's on_invalid policy
# --------------------------------------------------------------------------------------------


def test_non_finite_data_stop_the_study_by_default(study_file, tmp_path, capsys):
    study_file.write_text(STUDY.replace("NAN_RATE = 0.0", "NAN_RATE = 0.5"))
    out = tmp_path / "out"
    assert _run(study_file, out, "--reps", "6", "--set", "n_grid=40") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "setting 'my-mean,n=40': simulate returned data with NaN or infinite" in err
    assert "on_invalid='raise'" in err and "--on-invalid clip" in err
    assert not (out / "results.csv").exists()
    assert not list(out.rglob("*.npz"))  # nothing of a refused chunk is stored


def test_clip_counts_the_repetitions_and_says_so(study_file, tmp_path, capsys):
    study_file.write_text(STUDY.replace("NAN_RATE = 0.0", "NAN_RATE = 0.5"))
    out = tmp_path / "out"
    assert _run(study_file, out, "--reps", "6", "--set", "n_grid=40", "--on-invalid",
                "clip") == 0
    err = capsys.readouterr().err
    rows = results.read_csv(out / "results.csv")
    bad = {r["rep"] for r in rows if r["nonfinite_data"] > 0}
    assert 0 < len(bad) < 6  # the policy is per repetition
    assert all(r["nonfinite_data"] in (0, 1) for r in rows)
    for r in rows:  # a repetition's levels share its data
        assert r["nonfinite_data"] == (r["rep"] in bad)
    assert f"{len(bad)} of 6 repetitions had NaN or infinite entries" in err
    summary = results.read_csv(out / "summary.csv")
    assert {r["nonfinite_reps"] for r in summary} == {len(bad)}
    assert json.loads((out / "config.json").read_text())["on_invalid"] == "clip"
    # a rerun with the default policy refuses the stored repetitions too
    capsys.readouterr()
    assert _run(study_file, out, "--reps", "6", "--set", "n_grid=40") == 2
    assert "simulate returned data with NaN or infinite" in capsys.readouterr().err


def test_the_data_check_streams_with_the_batches():
    """Streamed data (one block per step, drawn inside the scan) are checked block by block,
    as a materialised run's are; only the repetitions with a bad entry are flagged."""
    import jax
    import jax.numpy as jnp

    from dpjax.algorithms import dp_em
    from dpjax.experiments._em_common import BetaError, InitNearTruth
    from dpjax.models import GaussianMixture, sparse_unit_beta

    model = GaussianMixture(0.5)

    def simulate(key, m, truth):
        data = model.simulate(key, m, truth)
        bad = jax.random.uniform(jax.random.fold_in(key, 3)) < 0.2  # some blocks
        return data._replace(y=data.y.at[0, 0].set(jnp.where(bad, jnp.inf, data.y[0, 0])))

    levels = ({"epsilon": 1.0, "delta": 1e-3, "eta": 0.5, "truncation": 2.0},)
    s = sweep.Setting(
        key="toy", columns={"method": "hd-dp-em"}, estimator=dp_em.hd_dp_em(model, 3, 4),
        simulate=simulate, init=InitNearTruth(0.125), record=BetaError(),
        truth=sparse_unit_beta(10, 3), plan=sweep.DataPlan(4, 50),
        hparams_type=dp_em.DPEMHyperparams, levels=levels, n=200)
    flags = []
    for mode in ("stream", "materialize"):
        out = sweep.run_setting(s, reps=8, seed=0, num_devices=1, data_mode=mode,
                                on_invalid="clip")
        flags.append(out[sweep.NONFINITE_DATA][:, 0].tolist())
    assert flags[0] == flags[1] and 0 < sum(flags[0]) < 8
    first = flags[0].index(1)
    with pytest.raises(results.ConfigError, match=f"in {sum(flags[0])} of repetitions 0..7 "
                       f"\\(repetition {first}, "):
        sweep.run_setting(s, reps=8, seed=0, num_devices=1, data_mode="stream")


# --------------------------------------------------------------------------------------------
# 1 and 4 on the shared path: settings of one shape family that run in one padded program
# --------------------------------------------------------------------------------------------

EDITED_PADDED = {"on": False}  # the padded form's step of the GLM study below, edited
NAN_DATA = {"rate": 0.0}


def _glm_study():
    """noisy_gd (it has a padded form) at settings that differ only in n: n 300 and 400 share
    one padded program; a grown study (n 800 too) buckets 400 with 800 and 300 alone."""
    import jax
    import jax.numpy as jnp

    from dpjax.algorithms import dp_glm
    from dpjax.experiments._common import ZeroInit
    from dpjax.experiments._glm_common import GLMRecord, truth
    from dpjax.models.glm import GLM

    model, T = GLM(), 3
    base = dp_glm.noisy_gd(model, T, "paper", 4.0)

    def simulate(key, m, beta):
        data = model.simulate(key, m, beta)
        bad = jax.random.uniform(jax.random.fold_in(key, 5)) < NAN_DATA["rate"]
        return data._replace(y=data.y.at[0].set(jnp.where(bad, jnp.nan, data.y[0])))

    def estimator():
        if not EDITED_PADDED["on"]:
            return base
        step = base.padded.step

        def edited(key, state, data, hparams, sizes):  # what a user's edit might do
            new, info = step(key, state, data, hparams, sizes)
            return jax.tree_util.tree_map(lambda x: x * 1.0001 if jnp.issubdtype(
                x.dtype, jnp.inexact) else x, new), info

        # only the padded form changes: the per-setting step is the same
        return base._replace(padded=base.padded._replace(step=edited))

    def settings(c):
        est = estimator()
        out = []
        for n in c["n_grid"]:
            delta = 1 / (2 * 400)
            levels = tuple({"epsilon": e, "delta": delta, "eta": 1.0, "truncation": 1.0,
                            "rho": dp_glm.calibrate_rho(e, delta, "paper", T)}
                           for e in (0.5, math.inf))
            out.append(sweep.Setting(
                key=f"noisy-gd,n={n}", columns={"method": "noisy-gd", "n": n},
                estimator=est, simulate=simulate, init=ZeroInit(), record=GLMRecord(),
                truth=truth(0, 3), plan=sweep.DataPlan(1, n),
                hparams_type=dp_glm.GLMHyperparams, levels=levels, n=n))
        return out

    return study.Experiment(name="glm_shared", title="t", defaults={"n_grid": (300, 400)},
                            settings=settings, reps=2, quick_reps=2)


@pytest.fixture
def glm_study():
    EDITED_PADDED["on"], NAN_DATA["rate"] = False, 0.0
    yield _glm_study()
    EDITED_PADDED["on"], NAN_DATA["rate"] = False, 0.0


def _shared_ids(out):
    return {m["key"]: m["program"] for m in
            json.loads((out / "config.json").read_text())["settings"]}


def test_an_edit_of_the_padded_form_is_refused_on_rerun(glm_study, tmp_path):
    out = tmp_path / "out"
    study.run_experiment(glm_study, out, reps=2, progress=False, num_devices=1)
    assert all("[setting " not in p for p in _shared_ids(out).values())  # the shared path ran
    before = _snapshot(out)
    EDITED_PADDED["on"] = True
    with pytest.raises(results.ConfigError, match=r"2 setting\(s\) computed by another "
                       r"program.*'noisy-gd,n=300' \(its traced computation changed\)"):
        study.run_experiment(glm_study, out, reps=2, progress=False, num_devices=1)
    assert _snapshot(out) == before


def test_a_study_grown_by_another_n_reuses_the_shared_results(glm_study, tmp_path, capsys):
    """The padded buckets follow the study's settings; the fingerprint does not: n 300 leaves
    the shared program for one of its own (n 400 now shares with n 800), and its results are
    reused all the same."""
    out = tmp_path / "out"
    study.run_experiment(glm_study, out, reps=2, progress=False, num_devices=1)
    first = _shared_ids(out)
    capsys.readouterr()
    study.run_experiment(glm_study, out, reps=2, progress=False, num_devices=1,
                         overrides={"n_grid": (300, 400, 800)})
    assert "reused 8 finished (setting, level, repetition) results, computed 4" in \
        capsys.readouterr().err
    grown = _shared_ids(out)
    assert "[setting " in grown["noisy-gd,n=300"] and first["noisy-gd,n=300"] != \
        grown["noisy-gd,n=300"]  # it ran in another program: no spurious refusal
    fps = {sweep.program_fingerprint(s)["program"] for s in glm_study.settings(
        {"n_grid": (300, 400, 800)})}
    assert len(fps) == 3  # per setting: its own shapes


def test_non_finite_data_are_flagged_in_the_shared_path(glm_study, tmp_path):
    """The data program checks the drawn records (before padding: the padded rows' zeros are
    not flagged), with the per-setting kernel's flags and the same policy."""
    settings = glm_study.settings({"n_grid": (300, 400)})
    programs = sweep.plan_programs(settings)
    s = settings[0]  # n 300, padded to 400 rows
    assert programs[s.key].rows == 400
    clean = sweep.run_setting(s, reps=4, seed=0, num_devices=1, program=programs[s.key])
    assert not clean[sweep.NONFINITE_DATA].any()  # padding is not flagged
    NAN_DATA["rate"] = 0.5
    s = glm_study.settings({"n_grid": (300, 400)})[0]
    flags = [sweep.run_setting(s, reps=6, seed=0, num_devices=1, on_invalid="clip",
                               program=p)[sweep.NONFINITE_DATA] for p in (programs[s.key], None)]
    np.testing.assert_array_equal(flags[0], flags[1])
    assert 0 < flags[0][:, 0].sum() < 6 and flags[0].shape == (6, 2)
    with pytest.raises(results.ConfigError, match="'noisy-gd,n=300': simulate returned data "
                       "with NaN or infinite"):
        sweep.run_setting(s, reps=6, seed=0, num_devices=1, program=programs[s.key])
    with pytest.raises(results.ConfigError, match="simulate returned data with NaN"):
        study.run_experiment(glm_study, tmp_path / "out", reps=6, progress=False,
                             num_devices=1)
