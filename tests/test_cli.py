"""The dpjax command: list, run (small configurations), --set errors, and the installed script."""

import json
import shutil
import subprocess
import sys

import pytest

from dpjax import cli, results

SMALL = ["--set", "d=40", "--set", "n_grid=800,1000", "--set", "s_grid=2,3",
         "--set", "n_base=800", "--set", "s_base=3", "--set", "large_n=3000",
         "--set", "eps_grid=0.5,2"]


def _names():
    from dpjax.experiments import registry

    return registry()


def test_list_names_the_experiments(capsys):
    assert cli.main(["list"]) == 0
    assert "em_fig1" in capsys.readouterr().out


def test_find_reads_one_module_and_agrees_with_the_registry():
    """`dpjax run NAME` imports the experiment module named NAME only (every experiment of the
    registry is found, as the same object; unknown names give None)."""
    from dpjax.experiments import find, registry

    reg = registry()
    assert all(find(name) is exp for name, exp in reg.items())
    assert find("no_such_experiment") is None and find("_common") is None
    # iv_fig4 is defined in iv_horizon: found through the registry only
    assert find("iv_fig4", fallback=False) is None and find("iv_fig4") is reg["iv_fig4"]
    code = ("import sys; from dpjax.experiments import find; assert find('em_fig1').name == "
            "'em_fig1'; print(sorted(m.rsplit('.', 1)[1] for m in sys.modules "
            "if m.startswith('dpjax.experiments.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert eval(out) == ["_common", "_em_common", "em_fig1"]


def test_run_writes_the_results_files_and_figure(tmp_path, capsys):
    out = tmp_path / "fig1"
    args = ["run", "em_fig1", "--out", str(out), "--quick", "--reps", "2", "--no-progress"]
    assert cli.main(args + SMALL) == 0
    for name in ("results.csv", "iterations.csv", "summary.csv", "config.json", "figure.png"):
        assert (out / name).stat().st_size > 0, name
    rows = results.read_csv(out / "results.csv")
    assert {r["n"] for r in rows} == {800, 1000, 3000}
    assert {r["epsilon"] for r in rows if r["n"] == 800 and r["s"] == 3} == {0.5, 2.0, float("inf")}
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quick"] is True and cfg["config"]["d"] == 40
    # the run is resumable: the same command again computes nothing new and rewrites the files
    assert cli.main(args + SMALL) == 0
    assert results.read_csv(out / "results.csv") == rows


def test_unknown_experiment(tmp_path, capsys):
    assert cli.main(["run", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown experiment 'nope'" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("dpjax") is None, reason="console script not installed")
def test_installed_console_script_lists_experiments():
    out = subprocess.run(["dpjax", "list"], capture_output=True, text=True, check=True)
    assert "em_fig1" in out.stdout


def test_module_entry_point_runs_the_demo_help():
    out = subprocess.run([sys.executable, "-m", "dpjax.cli", "demo", "--help"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "--epsilon" in out.stdout


def test_a_second_run_loads_its_kernels_from_the_persistent_cache(tmp_path):
    """The CLI switches JAX's persistent compilation cache on: the second run of the same study
    (another output directory) compiles nothing, so it writes no new cache entry."""
    import os

    cache = tmp_path / "cache"
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(cache))
    base = [sys.executable, "-m", "dpjax.cli", "run", "em_fig1", "--quick", "--reps", "1",
            "--no-progress"] + SMALL

    def run(out):
        proc = subprocess.run(base + ["--out", str(tmp_path / out)], env=env,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}

    first = run("a")
    assert len(first) >= 2  # the study's kernels were written to the cache
    assert run("b") == first  # nothing compiled again (no new or rewritten entry)
    proc = subprocess.run(base + ["--out", str(tmp_path / "c"), "--no-compile-cache"],
                          env=dict(env, JAX_COMPILATION_CACHE_DIR=str(tmp_path / "off")),
                          capture_output=True, text=True)
    assert proc.returncode == 0 and not (tmp_path / "off").exists()


LIST = "a non-empty comma-separated list of"

# (experiment, arguments, what the one error line must say): the setting and its allowed values
BAD_INPUTS = [
    # epsilon: non-positive, NaN, inf, empty
    ("em_fig1", ["--set", "eps_grid=0.5,-1"],
     f"--set eps_grid: must be {LIST} finite numbers > 0; got 0.5,-1"),
    ("em_fig1", ["--set", "eps_grid=0.5,nan"],
     f"--set eps_grid: must be {LIST} finite numbers > 0; got 0.5,nan"),
    ("em_fig1", ["--set", "eps_grid=0.5,inf"],
     f"--set eps_grid: must be {LIST} finite numbers > 0; got 0.5,inf"),
    ("em_fig1", ["--set", "eps_grid="], f"--set eps_grid: must be {LIST} finite numbers > 0; "
     "got (empty)"),
    ("em_fig1", ["--set", "eps_base=0"], "--set eps_base: must be a finite number > 0; got 0.0"),
    ("em_fig1", ["--set", "eps_base=nan"], "--set eps_base: must be a finite number > 0; got nan"),
    ("glm_fig1", ["--set", "eps_grid=0.2,-0.5"],
     f"--set eps_grid: must be {LIST} finite numbers > 0; got 0.2,-0.5"),
    ("glm_real", ["--set", "eps_grid=0.5,nan"],
     f"--set eps_grid: must be {LIST} numbers > 0 (inf allowed); got 0.5,nan"),
    ("glm_real", ["--set", "eps_grid=-inf"],
     f"--set eps_grid: must be {LIST} numbers > 0 (inf allowed); got -inf"),
    ("em_table3", ["--set", "eps_grid=0"],
     f"--set eps_grid: must be {LIST} finite numbers > 0; got 0.0"),
    # delta outside (0, 1), NaN
    ("iv_fig8", ["--set", "delta=0"], "--set delta: must be a finite number in (0, 1); got 0.0"),
    ("iv_fig8", ["--set", "delta=1"], "--set delta: must be a finite number in (0, 1); got 1.0"),
    ("iv_fig3", ["--set", "delta=-0.1"],
     "--set delta: must be a finite number in (0, 1); got -0.1"),
    ("iv_card", ["--set", "delta=nan"], "--set delta: must be a finite number in (0, 1); got nan"),
    # rho: non-positive, inf, unpaired
    ("iv_fig3", ["--set", "rho2_grid=9,5,0"],
     f"--set rho2_grid: must be {LIST} finite numbers > 0; got 9.0,5.0,0.0"),
    # a rule across settings names the one the user passed first, then the unchanged one
    ("iv_fig3", ["--set", "rho1_grid=1,5"],
     "--set rho1_grid=1,5: conflicts with rho2_grid=9.0,5.0,1.0, which was left unchanged; "
     "rho2_grid: must have as many values as rho1_grid (2: the budget splits are pairs); got 3"),
    ("iv_fig4", ["--set", "rho_grid=inf"],
     f"--set rho_grid: must be {LIST} finite numbers > 0; got inf"),
    ("iv_fig6", ["--set", "rho1=0"], "--set rho1: must be a finite number > 0; got 0.0"),
    ("iv_fig7", ["--set", "rho2=-5"], "--set rho2: must be a finite number > 0; got -5.0"),
    ("iv_card", ["--set", "rho_grid=0.1,nan"],
     f"--set rho_grid: must be {LIST} finite numbers > 0; got 0.1,nan"),
    # sparsity: s = 0, s > d
    ("em_fig1", ["--set", "s_base=0"], "--set s_base: must be an integer >= 1; got 0"),
    ("em_fig1", ["--set", "s_grid=5,2000"],
     "--set s_grid=5,2000: conflicts with d=1000, which was left unchanged; d: must be >= the "
     "largest sparsity of s_grid and s_base (2000); got 1000"),
    ("em_fig1", ["--set", "d=2"],
     "--set d: must be >= the largest sparsity of s_grid and s_base (15); got 2"),
    ("em_rmc", ["--set", "hd_s=2000"], "--set hd_s: must be <= hd_d (1000); got 2000"),
    ("glm_fig2", ["--set", "s_grid=10,20,6000"],
     "--set s_grid=10,20,6000: conflicts with d=10000, which was left unchanged; d: must be >= "
     "the algorithm's largest sparsity s_factor x max(s_grid, s_base) = 12000; got 10000"),
    ("em_table3", ["--set", "s_hat_grid=0"],
     f"--set s_hat_grid: must be {LIST} integers in [1, 30]; got 0"),
    # n smaller than the number of batches; sizes and grids zero or negative
    ("em_table3", ["--set", "num_iterations=1000"],
     "--set num_iterations: must be <= the number of training records (297"),
    ("em_fig1", ["--set", "n_base=10"], "--set n_base: must be an integer >= 20; got 10"),
    ("em_fig1", ["--set", "n_grid=-5"], f"--set n_grid: must be {LIST} integers >= 20; got -5"),
    ("glm_fig1", ["--set", "n_base=0"], "--set n_base: must be an integer >= 10; got 0"),
    ("glm_fig1", ["--set", "d_grid=0"], f"--set d_grid: must be {LIST} integers >= 1; got 0"),
    ("em_fig2", ["--set", "d_grid=5,-1"], f"--set d_grid: must be {LIST} integers >= 1; "
     "got 5,-1"),
    ("iv_fig9", ["--set", "n_grid=500,5"], f"--set n_grid: must be {LIST} integers >= 10; "
     "got 500,5"),
    ("iv_fig4", ["--set", "T_grid=1,0"], f"--set T_grid: must be {LIST} integers >= 1; got 1,0"),
    ("iv_fig8", ["--set", "num_gammas=1"], "--set num_gammas: must be an integer >= 2; got 1"),
    ("iv_fig8", ["--set", "gamma_max=0.5"], "--set gamma_max: must be > gamma_min (1.0); got 0.5"),
    ("iv_fig8", ["--set", "gamma_min=5000"], "--set gamma_min=5000: conflicts with "
     "gamma_max=1000.0, which was left unchanged; gamma_max: must be > gamma_min (5000.0)"),
    ("em_rmc", ["--set", "hd_p_grid=1.0"],
     f"--set hd_p_grid: must be {LIST} finite numbers in [0, 1); got 1.0"),
    ("iv_fig7", ["--set", "fractions=0.5,1.5"],
     f"--set fractions: must be {LIST} finite numbers in (0, 1]; got 0.5,1.5"),
    ("em_table3", ["--set", "train_fraction=1"],
     "--set train_fraction: must be a finite number in (0, 1); got 1.0"),
    ("glm_fig1", ["--set", "eta=nan"], "--set eta: must be a finite number > 0; got nan"),
    ("glm_fig1", ["--set", "eta=inf"], "--set eta: must be a finite number > 0; got inf"),
    # empty grids where a panel needs values
    ("iv_fig4", ["--set", "T_grid="], f"--set T_grid: must be {LIST} integers >= 1; got (empty)"),
    ("em_fig2", ["--set", "n_grid= "], f"--set n_grid: must be {LIST} integers >= 20; "
     "got (empty)"),
    ("iv_card", ["--set", "calibrations="], "--set calibrations: must be a non-empty "
     "comma-separated list of values of paper, tight; got (empty)"),
    # cross-field
    ("glm_fig1", ["--set", "T=30"], "--set T=30: conflicts with T_grid=5,10,20,50, which was "
     "left unchanged; T_grid: must contain T = 30"),
    # wrong types
    ("glm_fig1", ["--set", "T=abc"], "--set T: must be an integer >= 1; got 'abc'"),
    ("em_fig1", ["--set", "d=1.5"], "--set d: must be an integer >= 1; got '1.5'"),
    ("em_fig1", ["--set", "n_grid=4000,x"], f"--set n_grid: must be {LIST} integers >= 20; "
     "got '4000,x'"),
    ("glm_fig1", ["--set", "unsplit=maybe"], "--set unsplit: must be true or false; got 'maybe'"),
    ("glm_fig2", ["--set", "d=1001"],
     "--set d: must be an integer >= 4 and a multiple of 4; got 1001"),
    ("glm_real", ["--set", "dataset=swarm"],
     "--set dataset: must be one of breast_cancer, digits; got swarm"),
    ("iv_fig8", ["--set", "calibration=exact"], "--set calibration: must be one of paper, tight; "
     "got exact"),
    ("iv_card", ["--set", "calibrations=paper,nope"], "--set calibrations: must be a non-empty "
     "comma-separated list of values of paper, tight; got paper,nope"),
    ("em_fig1", ["--set", "eps_grid=0.5,,"], None),  # trailing empties are dropped: valid
    # unknown keys and malformed --set, other options
    ("em_fig1", ["--set", "nope=1"],
     "--set nope: unknown setting for experiment 'em_fig1'; valid settings: d, eps_base"),
    ("iv_fig4", ["--set", "rho2_grid=1"],
     "--set rho2_grid: unknown setting for experiment 'iv_fig4'"),
    ("em_fig1", ["--set", "d"], "--set: expected KEY=VALUE; got 'd'"),
    ("em_fig1", ["--reps", "0"], "--reps must be >= 1"),
    ("em_fig1", ["--chunk-size", "0"], "--chunk-size must be >= 1"),
    ("em_fig1", ["--cpu-devices", "-1"], "--cpu-devices must be >= 0"),
    ("em_fig1", ["--set", "n_base=1000000000000"], "one repetition needs"),
]


@pytest.mark.parametrize("name,extra,message", [c for c in BAD_INPUTS if c[2] is not None])
def test_bad_inputs_give_one_clear_line_and_write_nothing(tmp_path, capsys, name, extra,
                                                          message):
    out = tmp_path / "out"
    code = cli.main(["run", name, "--out", str(out), "--no-progress"] + extra)
    captured = capsys.readouterr()
    err = captured.err
    assert code == 2, err
    assert err.startswith("dpjax: error: ") and err.count("\n") == 1, err
    assert message in err, err
    assert "Traceback" not in err and captured.out == ""
    assert not out.exists()  # nothing computed, nothing written


def test_the_bad_input_table_is_broad():
    assert len([c for c in BAD_INPUTS if c[2] is not None]) >= 30
    assert len({c[0] for c in BAD_INPUTS}) >= 12  # most experiments


def test_trailing_empty_list_items_are_dropped():
    from dpjax.experiments import registry
    from dpjax.study import resolve_config

    c = resolve_config(registry()["em_fig1"], {"eps_grid": "0.5,,", "large_n": ""})
    assert c["eps_grid"] == (0.5,) and c.large_n == ()


@pytest.mark.parametrize("name", sorted(_names()))
def test_run_help_lists_every_setting_with_its_range_and_default(capsys, name):
    from dpjax.experiments import registry

    exp = registry()[name]
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", name, "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"settings of {name}" in text
    for f in exp.config_type.fields():
        default = f.show(getattr(exp.defaults, f.name))
        assert " ".join(f"{f.name}: {f.describe()}; default {default}".split()) in text
        assert f.con.doc and " ".join(f.con.doc.split()) in text


def test_configs_are_typed_frozen_and_validated():
    import dataclasses

    from dpjax.config import ConfigError
    from dpjax.experiments import registry

    for name, exp in registry().items():
        cfg = exp.defaults
        assert dataclasses.is_dataclass(cfg) and cfg.fields(), name
        assert exp.quick is None or type(exp.quick) is type(cfg)
        assert dict(cfg) == cfg.to_dict() and set(cfg) == {f.name for f in cfg.fields()}
        with pytest.raises(dataclasses.FrozenInstanceError):
            cfg.delta = 0.5  # type: ignore[misc]
    exp = registry()["em_fig1"]
    with pytest.raises(ConfigError, match="--set n_base: must be an integer >= 20; got 3"):
        dataclasses.replace(exp.defaults, n_base=3)
    c = exp.defaults.with_overrides({"sigma": 1, "eps_grid": [1, 2]})
    assert c.sigma == 1.0 and isinstance(c.sigma, float) and c.eps_grid == (1.0, 2.0)
    with pytest.raises(ConfigError, match="--set d: must be an integer >= 1; got true"):
        exp.defaults.with_overrides({"d": True})


def test_pyproject_installs_every_package_and_maps_the_experiments():
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parents[1]
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert cfg["package-dir"] == {"dpjax.experiments": "experiments"}
    found = {".".join(p.parent.relative_to(root).parts) for p in root.glob("dpjax/**/__init__.py")}
    assert set(cfg["packages"]) == found | {"dpjax.experiments"}


def test_experiments_are_the_checkouts_own():
    from pathlib import Path

    import dpjax
    import dpjax.experiments

    here = Path(dpjax.__file__).resolve().parents[1]
    assert Path(dpjax.experiments.__file__).resolve() == here / "experiments" / "__init__.py"


def test_bad_output_directories(tmp_path, capsys):
    small = ["--quick", "--reps", "1", "--no-progress"] + SMALL
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert cli.main(["run", "em_fig1", "--out", str(a_file)] + small) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    assert cli.main(["run", "em_fig1", "--out", "/proc/dpjax-test/out"] + small) == 2
    assert "--out /proc/dpjax-test/out" in capsys.readouterr().err
    out = tmp_path / "run"
    assert cli.main(["run", "em_fig1", "--out", str(out)] + small) == 0
    before = sorted(p.name for p in out.rglob("*"))
    assert cli.main(["run", "em_fig1", "--out", str(out)] + small + ["--set", "d=41"]) == 2
    err = capsys.readouterr().err
    assert "holds results of a different configuration" in err and "Traceback" not in err
    assert sorted(p.name for p in out.rglob("*")) == before


def test_an_empty_optional_list_switches_its_panel_off(tmp_path):
    out = tmp_path / "run"
    args = ["run", "em_fig1", "--out", str(out), "--quick", "--reps", "1", "--no-progress"]
    assert cli.main(args + SMALL + ["--set", "large_n="]) == 0
    assert {r["n"] for r in results.read_csv(out / "results.csv")} == {800, 1000}
