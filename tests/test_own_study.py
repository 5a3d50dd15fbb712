"""A study of the user's own, first class: run from a file or module outside the repository,
its settings in --help, resume, redraw, installed packages' experiments (entry points), growth
without recomputation, and one-line errors for a broken callback contract."""

import json
import math
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dpjax import cli, results, study, sweep

STUDY = '''
import math
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from dpjax import sweep
from dpjax.examples import dp_mean
from dpjax.study import Experiment
from helpers import record  # a file beside this one


def init(key, truth):
    del key
    return jnp.zeros_like(truth)


def settings(c):
    levels = tuple({"epsilon": e, "delta": 1e-3, "clip": 4.0} for e in (*c["eps_grid"], math.inf))
    return [sweep.Setting(
        key=f"my-mean,n={n}", columns={"method": "my-mean", "n": n, "d": 2},
        estimator=dp_mean.DP_MEAN, simulate=dp_mean.simulate, init=init, record=record,
        truth=np.ones(2), plan=sweep.DataPlan(num_blocks=1, block_size=n),
        hparams_type=dp_mean.MeanHyperparams, levels=levels, n=n) for n in c["n_grid"]]


def plot(iter_rows, summary, config, path):
    Path(path).write_text(f"{len(summary)} rows")


MY_MEAN = Experiment(name="my_mean", title="my own DP mean study",
                     defaults={"n_grid": (40,), "eps_grid": (0.5, 1.0)}, settings=settings,
                     plot=plot, reps=3, quick_reps=2)
'''

HELPERS = '''
import jax.numpy as jnp


def record(state, truth):
    return {"error": jnp.linalg.norm(state.beta - truth)}
'''


@pytest.fixture
def study_dir(tmp_path):
    """A user's folder outside the repository: my_study.py and the helpers.py it imports."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "my_study.py").write_text(STUDY)
    (folder / "helpers.py").write_text(HELPERS)
    yield folder
    sys.modules.pop("helpers", None)


def _run(spec, out, *extra):
    return cli.main(["run", str(spec), "--out", str(out), "--no-progress", *extra])


def test_a_study_file_runs_resumes_and_redraws(study_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert _run(study_dir / "my_study.py", out, "--reps", "2") == 0
    rows = results.read_csv(out / "results.csv")
    assert {r["epsilon"] for r in rows} == {0.5, 1.0, math.inf} and len(rows) == 6
    # the level as the user gave it (not float32 noise such as 0.0010000000474974513)
    assert "0.001," in (out / "results.csv").read_text()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["experiment"] == "my_mean"
    assert cfg["source"] == {"file": str((study_dir / "my_study.py").resolve()),
                             "name": "my_mean"}
    capsys.readouterr()
    # resume: nothing computed again, and the run says so
    assert _run(f"{study_dir / 'my_study.py'}:my_mean", out, "--reps", "2") == 0
    assert "reused 6 finished (setting, level, repetition) results, computed 0" in \
        capsys.readouterr().err
    assert results.read_csv(out / "results.csv") == rows
    # the figure is redrawn from where config.json says the study came from
    (out / "figure.png").unlink()
    assert cli.main(["plot", "--out", str(out)]) == 0
    assert (out / "figure.png").read_text() == "3 rows"
    # the file gone: said plainly
    (study_dir / "my_study.py").rename(study_dir / "moved.py")
    capsys.readouterr()
    assert cli.main(["plot", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "came from the file" in err and "no longer there" in err
    assert "this version of dpjax" not in err
    # and it can be named at its new place
    assert cli.main(["plot", f"{study_dir / 'moved.py'}:my_mean", "--out", str(out)]) == 0


def test_set_quick_and_help_of_a_study_file(study_dir, tmp_path, capsys):
    spec = str(study_dir / "my_study.py")
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", spec, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "settings of my_mean" in text and "eps_grid" in text and "n_grid" in text
    out = tmp_path / "out"
    assert _run(spec, out, "--quick", "--set", "eps_grid=2", "--seed", "3") == 0
    rows = results.read_csv(out / "results.csv")
    assert {r["epsilon"] for r in rows} == {2.0, math.inf} and {r["rep"] for r in rows} == {0, 1}
    assert _run(spec, tmp_path / "bad", "--set", "eps_grid=x") == 2
    assert "--set eps_grid" in capsys.readouterr().err


def test_a_file_with_several_experiments_asks_which(study_dir, tmp_path, capsys):
    (study_dir / "two.py").write_text(STUDY + textwrap.dedent('''
        OTHER = Experiment(name="other", title="t", defaults={"n_grid": (40,),
                           "eps_grid": (1.0,)}, settings=settings, reps=2)
    '''))
    spec = str(study_dir / "two.py")
    assert _run(spec, tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert "defines 2 experiments (my_mean, other)" in err and f"{spec}:NAME" in err
    assert _run(f"{spec}:othr", tmp_path / "o") == 2
    assert "did you mean other?" in capsys.readouterr().err
    # by the experiment's name or by the attribute's
    assert _run(f"{spec}:OTHER", tmp_path / "o", "--reps", "1") == 0
    assert json.loads((tmp_path / "o" / "config.json").read_text())["experiment"] == "other"


def test_a_module_runs_by_its_dotted_name(study_dir, tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "studies.py").write_text(STUDY.replace("from helpers import record",
                                                  "from mypkg.helpers import record"))
    (pkg / "helpers.py").write_text(HELPERS)
    monkeypatch.chdir(tmp_path)  # the current directory is on the path
    try:
        assert _run("mypkg.studies:my_mean", tmp_path / "out", "--reps", "1") == 0
        cfg = json.loads((tmp_path / "out" / "config.json").read_text())
        assert cfg["source"] == {"module": "mypkg.studies", "name": "my_mean"}
        assert _run("nopkg.studies:x", tmp_path / "o2") == 2
        assert "no module named 'nopkg'" in capsys.readouterr().err
    finally:
        for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
            del sys.modules[name]


def test_installed_packages_add_experiments_through_entry_points(study_dir, tmp_path,
                                                                 monkeypatch, capsys):
    """A tiny distribution on a temporary sys.path: its entry point in the group
    dpjax.experiments is listed with its origin and runs by name."""
    site = tmp_path / "site"
    (site / "plugpkg").mkdir(parents=True)
    (site / "plugpkg" / "__init__.py").write_text(
        STUDY.replace("from helpers import record", "from plugpkg.helpers import record")
        .replace('name="my_mean"', 'name="plug_mean"'))
    (site / "plugpkg" / "helpers.py").write_text(HELPERS)
    info = site / "plugpkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugpkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[dpjax.experiments]\nmine = plugpkg:MY_MEAN\nbroken = plugpkg:NOPE\n")
    monkeypatch.syspath_prepend(str(site))
    try:
        assert cli.main(["list"]) == 0
        out = capsys.readouterr().out
        assert "plug_mean" in out and "package plugpkg, entry point mine" in out
        assert "broken" in out and "could not be loaded" in out
        assert "experiments/reports/" not in out or "in the dpjax repository" in out
        assert _run("plug_mean", tmp_path / "o", "--reps", "1") == 0
        cfg = json.loads((tmp_path / "o" / "config.json").read_text())
        assert cfg["source"]["entry_point"] == "mine"
        assert cfg["source"]["distribution"] == "plugpkg"
        assert cli.main(["plot", "--out", str(tmp_path / "o")]) == 0
    finally:
        for name in [m for m in sys.modules if m == "plugpkg" or m.startswith("plugpkg.")]:
            del sys.modules[name]


def test_list_points_to_the_reports_in_the_repository(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "See experiments/reports/" not in out
    assert "in the dpjax repository" in out


# --------------------------------------------------------------------------------------------
# Growing a study
# --------------------------------------------------------------------------------------------


def _load(study_dir):
    from dpjax import _sources

    return _sources.resolve(str(study_dir / "my_study.py"))[0]


def _final(rows, metric="error"):
    return {(r["n"], r["epsilon"], r["rep"]): r[metric] for r in rows}


def _chunks(out):
    return sorted(p.relative_to(out / "chunks").as_posix()
                  for p in (out / "chunks").rglob("*.npz"))


def test_more_repetitions_reuse_the_finished_ones(study_dir, tmp_path, capsys):
    exp = _load(study_dir)
    out = tmp_path / "grow"
    first = study.run_experiment(exp, out, reps=3, progress=False, memory_budget_gb=1e-9,
                                 num_devices=1)  # one repetition per chunk
    assert len(_chunks(out)) == 3
    capsys.readouterr()
    grown = study.run_experiment(exp, out, reps=5, progress=False, num_devices=1)
    assert "reused 9 finished (setting, level, repetition) results, computed 6" in \
        capsys.readouterr().err
    old, new = _final(first.rows), _final(grown.rows)
    assert all(new[k] == v for k, v in old.items())  # bit for bit
    # the old chunks are kept as they are, the two new repetitions are one new chunk
    files = _chunks(out)
    assert len(files) == 4 and any("reps-0000003-0000005" in f for f in files)
    fresh = study.run_experiment(exp, tmp_path / "fresh", reps=5, progress=False,
                                 num_devices=1)
    ref = _final(fresh.rows)
    assert ref.keys() == new.keys()
    np.testing.assert_allclose([new[k] for k in ref], [ref[k] for k in ref], rtol=1e-5,
                               atol=1e-6)
    # fewer repetitions: the ones asked for, and the stored chunks stay for a later run
    fewer = study.run_experiment(exp, out, reps=2, progress=False, num_devices=1)
    assert {r["rep"] for r in fewer.rows} == {0, 1} and _chunks(out) == files
    assert all(_final(fewer.rows)[k] == v for k, v in _final(fewer.rows).items())


def test_a_grown_chunking_leaves_no_old_chunk_behind(study_dir, tmp_path):
    exp = _load(study_dir)
    out = tmp_path / "grow"
    study.run_experiment(exp, out, reps=4, progress=False, chunk_size=2, num_devices=1)
    # a chunk file of a chunking no plan uses any more (e.g. an older run's) is deleted
    stray = out / "chunks" / Path(_chunks(out)[0]).parent / "reps-0000001-0000003.npz"
    stray.write_bytes(b"old")
    study.run_experiment(exp, out, reps=6, progress=False, chunk_size=2, num_devices=1)
    files = _chunks(out)
    assert not stray.exists()
    assert [Path(f).name for f in files] == ["reps-0000000-0000002.npz",
                                             "reps-0000002-0000004.npz",
                                             "reps-0000004-0000006.npz"]


def test_more_levels_compute_only_the_new_ones(study_dir, tmp_path, capsys):
    exp = _load(study_dir)
    out = tmp_path / "grow"
    first = study.run_experiment(exp, out, reps=3, progress=False, num_devices=1)
    files = _chunks(out)
    capsys.readouterr()
    grown = study.run_experiment(exp, out, reps=3, progress=False, num_devices=1,
                                 overrides={"eps_grid": "0.5,1,2", "n_grid": "40,60"})
    err = capsys.readouterr().err
    # n = 40: 3 reps x 3 levels reused, 3 x 1 new level; n = 60: 3 x 4 new
    assert "reused 9 finished (setting, level, repetition) results, computed 15" in err
    old, new = _final(first.rows), _final(grown.rows)
    assert all(new[k] == v for k, v in old.items())  # bit for bit
    assert {k[1] for k in new} == {0.5, 1.0, 2.0, math.inf} and {k[0] for k in new} == {40, 60}
    # the grown chunk replaced the old one: no second file for the same repetitions
    assert set(files) <= set(_chunks(out)) and len(_chunks(out)) == 2
    fresh = study.run_experiment(exp, tmp_path / "fresh", reps=3, progress=False,
                                 num_devices=1,
                                 overrides={"eps_grid": "0.5,1,2", "n_grid": "40,60"})
    ref = _final(fresh.rows)
    assert ref.keys() == new.keys()
    np.testing.assert_allclose([new[k] for k in ref], [ref[k] for k in ref], rtol=1e-5,
                               atol=1e-6)
    # the summary rows come in the order of a fresh run's
    assert [(r["n"], r["epsilon"]) for r in grown.summary] == \
        [(r["n"], r["epsilon"]) for r in fresh.summary]
    # fewer levels: only those asked for are reported, the stored ones are kept
    fewer = study.run_experiment(exp, out, reps=3, progress=False, num_devices=1,
                                 overrides={"eps_grid": "2", "n_grid": "40,60"})
    assert {r["epsilon"] for r in fewer.rows} == {2.0, math.inf}
    assert all(new[k] == v for k, v in _final(fewer.rows).items())


def test_another_change_is_still_refused_with_the_differences(study_dir, tmp_path, capsys):
    spec = str(study_dir / "my_study.py")
    out = tmp_path / "out"
    assert _run(spec, out, "--reps", "1") == 0
    capsys.readouterr()
    assert _run(spec, out, "--reps", "1", "--seed", "2") == 2
    err = capsys.readouterr().err
    assert "different configuration (--seed: 0 -> 2)" in err
    # a setting whose shape changed under the same key (here: its truth) is refused too
    (study_dir / "my_study.py").write_text(STUDY.replace("truth=np.ones(2)",
                                                         "truth=2 * np.ones(2)"))
    assert _run(spec, out, "--reps", "1") == 2
    err = capsys.readouterr().err
    assert "holds results of setting 'my-mean,n=40' as it was before (truth:" in err


def test_plan_bounds_keep_the_stored_chunks():
    assert sweep.plan_bounds([], 5, 2) == [(0, 2), (2, 4), (4, 5)]
    assert sweep.plan_bounds([(0, 3), (3, 5)], 8, 2) == [(0, 3), (3, 5), (5, 7), (7, 8)]
    assert sweep.plan_bounds([(0, 3), (3, 5)], 4, 2) == [(0, 3), (3, 5)]
    assert sweep.plan_bounds([(0, 2), (4, 6)], 6, 4) == [(0, 2), (2, 6)]
    assert sweep.finished_prefix([(0, 2), (0, 3), (3, 4)]) == [(0, 3), (3, 4)]


# --------------------------------------------------------------------------------------------
# The callback contract, checked before compiling
# --------------------------------------------------------------------------------------------

GLM_STUDY = '''
import jax.numpy as jnp
import numpy as np

from dpjax import sweep
from dpjax.algorithms import dp_glm
from dpjax.models.glm import GLM
from dpjax.study import Experiment

MODEL = GLM("logistic")
EST = dp_glm.noisy_gd(MODEL, 3)


def simulate(key, m, truth):
    return MODEL.simulate(key, m, truth)


def init(key, truth):
    return jnp.zeros_like(truth)


def record(state, truth):
    return {"error": jnp.linalg.norm(state.beta - truth)}


def settings(c):
    return [sweep.Setting(
        key="glm", columns={"method": "glm", "n": 100}, estimator=EST, simulate=simulate,
        init=init, record=record, truth=np.ones(5) / 5, plan=sweep.DataPlan(1, 100),
        hparams_type=dp_glm.GLMHyperparams,
        levels=({k: float(v) for k, v in dp_glm.default_hparams(
            100, 1.0, 3, delta=1e-3, eta=0.5)._asdict().items()},), n=100)]


GLM_STUDY = Experiment(name="glm_study", title="t", defaults={"x": 1}, settings=settings,
                       reps=1)
'''


def _glm_error(tmp_path, capsys, old, new):
    path = tmp_path / "glm_study.py"
    path.write_text(GLM_STUDY.replace(old, new))
    assert _run(path, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    return err


def test_the_glm_study_runs_as_written(tmp_path, capsys):
    path = tmp_path / "glm_study.py"
    path.write_text(GLM_STUDY)
    assert _run(path, tmp_path / "out") == 0


def test_init_returning_a_state_is_one_line(tmp_path, capsys):
    err = _glm_error(tmp_path, capsys, "return jnp.zeros_like(truth)",
                     "return EST.init(jnp.zeros_like(truth))")
    assert "init, init (glm_study.py:" in err or "init, init (" in err
    assert "returned GLMState(" in err and "the estimator's state" in err
    assert "f32[5]" in err


def test_simulate_returning_a_tuple_is_one_line(tmp_path, capsys):
    err = _glm_error(tmp_path, capsys, "return MODEL.simulate(key, m, truth)",
                     "d = MODEL.simulate(key, m, truth)\n    return d.x, d.y")
    assert "simulate, simulate (" in err and "glm_study.py:" in err
    assert "returned tuple(f32[100,5], f32[100])" in err
    assert "expects GLMData(x=f32[100,5], y=f32[100])" in err


def test_record_returning_no_dict_is_one_line(tmp_path, capsys):
    err = _glm_error(tmp_path, capsys, 'return {"error": jnp.linalg.norm(state.beta - truth)}',
                     "return state.beta")
    assert "record, record (" in err and "dict of named scalar metrics" in err


@pytest.mark.slow  # every dpjax run checks its own; this one reads all 35 (about 100 s)
def test_every_bundled_experiment_passes_the_contract_check():
    from dpjax.experiments import registry

    for exp in registry().values():
        for s in exp.settings(exp.quick or exp.defaults)[:1]:
            sweep.check_setting(s)


# --------------------------------------------------------------------------------------------
# Smaller points
# --------------------------------------------------------------------------------------------


def _glm_data(y):
    import jax.numpy as jnp

    x = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (len(y), 3)), jnp.float32)
    return x, jnp.asarray(y, jnp.float32)


def test_logistic_labels_outside_0_1_are_refused():
    import jax

    from dpjax.algorithms import dp_glm
    from dpjax.models.glm import GLM

    model = GLM("logistic")
    with pytest.raises(ValueError, match=r"labels must be 0 or 1; 1 are not \(e.g. 2"):
        dp_glm.fit_dp_glm(jax.random.key(0), _glm_data([0, 1, 2, 1]), model, epsilon=1.0,
                          num_iterations=2)
    with pytest.raises(ValueError, match="recode a -1/\\+1 coding"):
        model.validate_data(_glm_data([-1, 1, 1, -1]))
    model.validate_data(_glm_data([0, 1, 1, 0]))  # 0/1 and booleans are fine
    model.validate_data((_glm_data([0, 1, 1, 0])[0], np.array([True, False, True, True])))
    GLM("linear").validate_data(_glm_data([0.5, 2.0, -3.0, 1.0]))  # no labels there


def test_a_tiny_epsilon_warns_naming_it():
    import jax

    from dpjax._validate import DPJaxWarning
    from dpjax.algorithms import dp_glm
    from dpjax.models.glm import GLM

    with pytest.warns(DPJaxWarning, match=r"epsilon = 1e-12 < 0.001: the noise"):
        dp_glm.fit_dp_glm(jax.random.key(0), _glm_data([0, 1, 1, 0] * 10), GLM("logistic"),
                          epsilon=1e-12, delta=1e-3, num_iterations=2)


def test_integer_ranges_read_well():
    from dpjax.algorithms import dp_glm
    from dpjax.models.glm import GLM

    with pytest.raises(ValueError, match=r"^num_iterations must be an integer >= 1; got 0$"):
        dp_glm.noisy_gd(GLM("logistic"), 0)


@pytest.mark.parametrize("argv, hint", [
    (["rnu", "dp_mean"], "did you mean run?"),
    (["run", "dp_mean", "--out", "x", "--quik"], "did you mean --quick (not --quik)?"),
    (["run", "dp_mean", "--out", "x", "--sed", "3"], "did you mean --seed (not --sed)?"),
])
def test_did_you_mean_for_subcommands_and_options(argv, hint, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert hint in err and err.count("\n") == 1


def test_float32_levels_are_written_as_given():
    assert study._as_given(np.float32(1e-3)) == 0.001
    assert study._as_given(np.float32(0.1)) == 0.1
    assert study._as_given(np.float32(np.inf)) == math.inf
    assert study._as_given(0.0010000000474974513) == 0.0010000000474974513  # a float64 as is
    import jax.numpy as jnp

    assert study._as_given(jnp.float32(1e-3)) == 0.001
