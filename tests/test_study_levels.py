"""A study's levels are checked like a fit's, and a study's mistakes are one line (issue 44,
items 2, 5 and 6): every level goes through the hyperparameter checks of ``dpjax.fit`` and the
estimator's own ``check`` hook before anything compiles; a level key no estimator reads, a
``record`` without ``error``, a settings function that raises, a study file that does not load
are one line with exit status 2; ``settings`` may return one Setting; ``dpjax plot NAME`` and
``dpjax list FILE`` work for a study file."""

import json
import math
import sys

import pytest

from dpjax import cli, results, study, sweep

STUDY = '''
import math

import jax.numpy as jnp
import numpy as np

from dpjax import sweep
from dpjax.algorithms import dp_glm
from dpjax.models import GLM
from dpjax.study import Experiment

MODEL = GLM("logistic")


def init(key, truth):
    return jnp.zeros_like(truth)


def record(state, truth):
    return {"error": jnp.linalg.norm(state.beta - truth)}


def settings(c):
    truth = np.r_[np.full(c["s"], 0.5), np.zeros(c["d"] - c["s"])]
    est = dp_glm.noisy_gd(MODEL, c["T"], "paper")
    out = []
    for n in c["n_grid"]:
        levels = tuple({"epsilon": e, "delta": 1 / (2 * n), "eta": c["eta"], "truncation": 1.0,
                        "rho": 1.0} for e in (*c["eps_grid"], math.inf))
        out.append(sweep.Setting(
            key=f"gd,n={n}", columns={"method": "gd", "n": n}, estimator=est,
            simulate=MODEL.simulate, init=init, record=record, truth=truth,
            plan=sweep.DataPlan(1, n), hparams_type=dp_glm.GLMHyperparams, levels=levels, n=n))
    return out


def plot(iteration_rows, summary_rows, c, path):
    from pathlib import Path

    Path(path).write_text(f"{len(summary_rows)} rows")


levels_study = Experiment(
    name="levels_study", title="noisy GD at the paper's calibration",
    defaults={"n_grid": [200], "eps_grid": [1.0], "d": 4, "s": 2, "T": 2, "eta": 1.0},
    settings=settings, plot=plot, reps=2, quick_reps=1)
'''


@pytest.fixture
def study_file(tmp_path):
    path = tmp_path / "levels_study.py"
    path.write_text(STUDY)
    return path


def _one_line(capsys, argv):
    code = cli.main(argv)
    captured = capsys.readouterr()
    assert code == 2, (code, captured.err)
    err = captured.err
    assert err.startswith("dpjax: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def _run(path, out, *extra):
    return ["run", str(path), "--out", str(out), "--no-progress", *extra]


def _refused(capsys, path, out, *extra):
    before = sweep.compile_count()
    err = _one_line(capsys, _run(path, out, *extra))
    assert sweep.compile_count() == before, "refused after compiling"
    assert not out.exists()
    return err


# ---- item 2: the levels, checked like a fit's --------------------------------------------------


@pytest.mark.parametrize("value, range_", [
    ("-1", "must be > 0 (use float('inf') for the non-private limit); got -1.0"),
    ("0", "must be > 0 (use float('inf') for the non-private limit); got 0.0"),
])
def test_a_bad_epsilon_level_is_one_line_naming_setting_level_key_and_set(
        study_file, tmp_path, capsys, value, range_):
    err = _refused(capsys, study_file, tmp_path / "out", "--set", f"eps_grid={value}")
    assert "setting 'gd,n=200', level 1 of 2 (epsilon=" in err
    assert f"level key epsilon {range_}" in err
    assert f"(from --set eps_grid={value})" in err


def test_a_bad_step_size_is_refused_not_run(study_file, tmp_path, capsys):
    err = _refused(capsys, study_file, tmp_path / "out", "--set", "eta=-1")
    assert "level 1 of 2" in err and "level key eta must lie in (0, inf]; got -1.0" in err
    assert "(from --set eta=-1)" in err
    err = _refused(capsys, study_file, tmp_path / "out", "--set", "eta=0")
    assert "level key eta must lie in (0, inf]; got 0.0 (from --set eta=0)" in err


def test_a_bad_level_from_python_names_the_override(study_file, tmp_path):
    from dpjax import _sources

    exp, _ = _sources.resolve(str(study_file))
    with pytest.raises(study.ConfigError, match=r"level key epsilon must be > 0 .*got -2\.0 "
                       r"\(from --set eps_grid=-2\)"):
        study.run_experiment(exp, tmp_path / "out", overrides={"eps_grid": [-2.0]},
                             progress=False)
    # a bad level of the study's own (no --set) is refused the same way, naming no --set
    bad = study.Experiment(name="bad", title="t", defaults={**exp.defaults.to_dict(),
                           "eta": -0.5}, settings=exp.settings, reps=1)
    with pytest.raises(study.ConfigError, match=r"level key eta must lie in \(0, inf\]; "
                       r"got -0\.5$"):
        study.run_experiment(bad, tmp_path / "out2", progress=False)


def test_the_estimators_own_check_hook_runs_on_every_level(tmp_path):
    """dp-mean's check refuses a clipping radius whose noise would be flushed to zero, as its
    fit does, naming the level."""
    import jax.numpy as jnp
    import numpy as np

    from dpjax.examples import dp_mean

    def settings(c):
        return sweep.Setting(
            key="mean", columns={"method": "mean", "n": 50}, estimator=dp_mean.DP_MEAN,
            simulate=dp_mean.simulate, init=lambda k, t: jnp.zeros_like(t),
            record=lambda s, t: {"error": jnp.linalg.norm(s.beta - t)}, truth=np.ones(2),
            plan=sweep.DataPlan(1, 50), hparams_type=dp_mean.MeanHyperparams,
            levels=({"epsilon": 1.0, "delta": 1e-3, "clip": c["clip"]},), n=50)

    exp = study.Experiment(name="mean", title="t", defaults={"clip": 1e-40},
                           settings=settings, reps=1)
    with pytest.raises(study.ConfigError, match=r"setting 'mean', level 1 of 1 \(epsilon=1, "
                       r"delta=0\.001, clip=1e-40\): clip = 1e-40 gives a sensitivity"):
        study.run_experiment(exp, tmp_path / "out", progress=False)
    import dpjax

    with pytest.raises(ValueError, match="clip = .* gives a sensitivity"):  # as the fit
        dpjax.fit(dp_mean.DP_MEAN, 0, jnp.ones((50, 2)), jnp.zeros(2), dp_mean.MeanHyperparams(
            *map(np.float32, (1.0, 1e-3, 1e-40))))


# ---- item 5: the remaining tracebacks, one line each -----------------------------------------


def test_record_without_error_is_refused_before_compiling(study_file, tmp_path, capsys):
    study_file.write_text(STUDY.replace('return {"error": jnp', 'return {"err": jnp'))
    err = _refused(capsys, study_file, tmp_path / "out")
    assert "setting 'gd,n=200': record, record (" in err
    assert "returns the metrics 'err' but not 'error'" in err


def test_record_without_a_summary_extra_metric_is_refused(study_file, tmp_path, capsys):
    study_file.write_text(STUDY.replace('settings=settings, plot=plot,',
                                        'settings=settings, plot=plot, summary_extra=("loss",),'))
    err = _refused(capsys, study_file, tmp_path / "out")
    assert "but not 'loss'" in err


def test_a_level_key_typo_says_did_you_mean(study_file, tmp_path, capsys):
    study_file.write_text(STUDY.replace('"truncation": 1.0', '"truncaton": 1.0'))
    err = _refused(capsys, study_file, tmp_path / "out")
    assert "level key 'truncaton' is read by no estimator of the study; did you mean " \
        "truncation?" in err
    assert "GLMHyperparams: epsilon, delta, eta, truncation, rho" in err


def test_an_extra_level_key_is_refused_unless_declared_a_column(study_file, tmp_path, capsys):
    extra = STUDY.replace('"rho": 1.0}', '"rho": 1.0, "label": 3.0}')
    study_file.write_text(extra)
    err = _refused(capsys, study_file, tmp_path / "out")
    assert "level key 'label' is read by no estimator of the study" in err
    assert "Experiment(level_columns=...)" in err
    # declared, it is a column of the results
    study_file.write_text(extra.replace("settings=settings, plot=plot,",
                                        'settings=settings, plot=plot, level_columns=("label",),'))
    assert cli.main(_run(study_file, tmp_path / "out", "--reps", "1")) == 0
    rows = results.read_csv(tmp_path / "out" / "results.csv")
    assert {r["label"] for r in rows} == {3.0}


def test_a_missing_level_key_is_one_line(study_file, tmp_path, capsys):
    study_file.write_text(STUDY.replace('"truncation": 1.0,', ""))
    err = _refused(capsys, study_file, tmp_path / "out")
    assert "the level lacks 'truncation'" in err


def test_settings_may_return_one_setting(study_file, tmp_path, capsys):
    study_file.write_text(STUDY.replace("    return out\n", "    return out[0]\n"))
    assert cli.main(_run(study_file, tmp_path / "out", "--reps", "1")) == 0
    assert len(results.read_csv(tmp_path / "out" / "results.csv")) == 2


def test_settings_returning_something_else_is_one_line(study_file, tmp_path, capsys):
    study_file.write_text(STUDY.replace("    return out\n", "    return {'a': out}\n"))
    err = _refused(capsys, study_file, tmp_path / "out")
    assert "settings, settings (" in err and "must return a dpjax.sweep.Setting or a list" in err


def test_settings_that_raise_name_the_function_and_the_set(study_file, tmp_path, capsys):
    err = _refused(capsys, study_file, tmp_path / "out", "--set", "s=20")
    assert "experiment levels_study: settings, settings (" in err
    assert "fails on this configuration (--set s=20): ValueError:" in err


@pytest.mark.parametrize("old, new, message", [
    ('MODEL = GLM("logistic")', 'MODEL = GLM("logistic"', "SyntaxError: '(' was never closed"),
    ("import math\n", "import math\nimport no_such_module_here\n",
     "ModuleNotFoundError: No module named 'no_such_module_here'"),
    ('MODEL = GLM("logistic")', 'MODEL = GLM("logistik")', "ValueError"),
])
def test_a_study_file_that_does_not_load_is_file_line_message(study_file, tmp_path, capsys,
                                                                old, new, message):
    text = STUDY.replace(old, new, 1)
    study_file.write_text(text)
    mark = new.strip().splitlines()[-1]
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith(mark))
    err = _one_line(capsys, _run(study_file, tmp_path / "out"))
    assert f"{study_file}:{line}: {message}" in err, err
    assert not (tmp_path / "out").exists()


def test_help_and_list_of_a_broken_file_are_one_line(study_file, tmp_path, capsys):
    study_file.write_text(STUDY.replace('MODEL = GLM("logistic")', 'MODEL = GLM("logistic"'))
    for argv in (["run", str(study_file), "--help"], ["list", str(study_file)]):
        err = _one_line(capsys, argv)
        assert f"{study_file}:12: SyntaxError" in err


def test_a_module_that_does_not_import_is_one_line(tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "brokenpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "studies.py").write_text("x = (\n")
    (pkg / "raising.py").write_text("raise RuntimeError('no data here')\n")
    monkeypatch.chdir(tmp_path)
    try:
        err = _one_line(capsys, _run("brokenpkg.studies:x", tmp_path / "out"))
        assert f"{pkg / 'studies.py'}:1: SyntaxError" in err
        err = _one_line(capsys, _run("brokenpkg.raising:x", tmp_path / "out"))
        assert "brokenpkg.raising:x: RuntimeError: no data here (while importing the module)" \
            in err
    finally:
        for name in ("brokenpkg", "brokenpkg.studies", "brokenpkg.raising"):
            sys.modules.pop(name, None)


# ---- item 6: plot NAME and list FILE for a study file ------------------------------------------


def test_plot_by_name_and_list_of_a_study_file(study_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(_run(study_file, out, "--reps", "1")) == 0
    assert json.loads((out / "config.json").read_text())["source"]["file"] == \
        str(study_file.resolve())
    (out / "figure.png").unlink()
    assert cli.main(["plot", "levels_study", "--out", str(out)]) == 0
    assert (out / "figure.png").read_text() == "2 rows"
    # another name is still unknown
    err = _one_line(capsys, ["plot", "levels_stud", "--out", str(out)])
    assert "unknown experiment 'levels_stud'" in err
    capsys.readouterr()
    assert cli.main(["list", str(study_file)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("levels_study  noisy GD at the paper's calibration\n")
    assert f"dpjax run {study_file} --out DIR" in text
    # several: each, and how to pick one
    study_file.write_text(STUDY + "\nOTHER = Experiment(name='other', title='another', "
                          "defaults={'x': 1}, settings=settings)\n")
    assert cli.main(["list", str(study_file)]) == 0
    text = capsys.readouterr().out
    assert "levels_study  noisy GD" in text and "other         another [OTHER]" in text
    assert f"dpjax run {study_file}:NAME --out DIR" in text
    err = _one_line(capsys, ["list", str(tmp_path / "none.py")])
    assert "none.py: no such file" in err


def test_list_of_a_module(study_file, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    try:
        assert cli.main(["list", "levels_study"]) == 0  # the module in the current directory
        text = capsys.readouterr().out
        assert "levels_study  noisy GD" in text and "dpjax run levels_study:levels_study " in text
    finally:
        sys.modules.pop("levels_study", None)


# ---- the bundled experiments declare their display columns ------------------------------------


def test_the_iv_display_columns_are_declared():
    from dpjax.experiments import registry

    exp = registry()["iv_fig9"]
    settings = study._study_settings(exp, exp.quick)
    study._check_levels(exp, settings)
    assert {"rho", "epsilon", "epsilon_bs"} <= set(settings[0].levels[0])
    undeclared = study.Experiment(name="x", title="t", defaults=exp.defaults,
                                  settings=exp.settings)
    with pytest.raises(study.ConfigError, match="level key 'rho' is read by no estimator"):
        study._check_levels(undeclared, settings)
    assert math.isinf(settings[0].levels[0]["rho1"])


@pytest.mark.slow  # every bundled experiment's settings at its quick size (about 2 minutes)
def test_every_bundled_experiment_passes_the_level_and_metric_checks():
    from dpjax.experiments import registry

    for exp in registry().values():
        settings = study._study_settings(exp, exp.quick or exp.defaults)
        study._check_levels(exp, settings)
        study._check_metrics(settings[0], ("error", *exp.summary_extra))
