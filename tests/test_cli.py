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


def test_list_names_the_experiments(capsys):
    assert cli.main(["list"]) == 0
    assert "em_fig1" in capsys.readouterr().out


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


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--set", "d=abc"], "--set d: expected an integer, got 'abc'"),
        (["--set", "nope=1"], "--set nope: unknown setting for experiment 'em_fig1'"),
        (["--set", "eps_grid=0.5,-1"], "--set eps_grid: every epsilon must be > 0"),
        (["--set", "d=2"], "--set d: d must be at least the largest sparsity"),
        (["--reps", "0"], "--reps must be >= 1"),
    ],
)
def test_bad_settings_fail_with_a_clear_message(tmp_path, capsys, extra, message):
    code = cli.main(["run", "em_fig1", "--out", str(tmp_path), "--no-progress"] + extra)
    assert code == 2
    assert message in capsys.readouterr().err


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


@pytest.mark.parametrize(
    "name,extra,message",
    [
        ("glm_fig1", ["--set", "n_base=0"], "--set n_grid/n_base: every n must be >= 10"),
        ("glm_fig1", ["--set", "d_grid=0"], "--set d_grid/d_base: every d must be >= 1"),
        ("glm_fig1", ["--set", "eta=nan"], "--set eta: expected a number (not NaN)"),
        ("glm_fig1", ["--set", "eta=inf"], "--set eta: the step size must be finite and > 0"),
        ("em_fig1", ["--set", "eps_grid=0.5,nan"], "--set eps_grid: expected a comma-separated"),
        ("em_fig1", ["--set", "eps_grid="], "--set eps_grid: needs at least one value"),
        ("em_fig1", ["--set", "n_base=1000000000000"], "one repetition needs"),
        ("iv_fig8", ["--set", "delta=0"], "--set delta: must lie in (0, 1)"),
        ("iv_fig8", ["--set", "delta=1"], "--set delta: must lie in (0, 1)"),
    ],
)
def test_bad_inputs_give_one_clear_line_and_write_nothing(tmp_path, capsys, name, extra,
                                                          message):
    out = tmp_path / "out"
    code = cli.main(["run", name, "--out", str(out), "--no-progress"] + extra)
    err = capsys.readouterr().err
    assert code == 2 and message in err
    assert err.startswith("dpjax: error: ") and "Traceback" not in err
    assert not out.exists()  # nothing computed, nothing written


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
    assert cli.main(["run", "em_fig1", "--out", str(out)] + small + ["--set", "eps_grid=0.7"]) == 2
    err = capsys.readouterr().err
    assert "holds results of a different configuration" in err and "Traceback" not in err
    assert sorted(p.name for p in out.rglob("*")) == before


def test_an_empty_optional_list_switches_its_panel_off(tmp_path):
    out = tmp_path / "run"
    args = ["run", "em_fig1", "--out", str(out), "--quick", "--reps", "1", "--no-progress"]
    assert cli.main(args + SMALL + ["--set", "large_n="]) == 0
    assert {r["n"] for r in results.read_csv(out / "results.csv")} == {800, 1000}
