"""The command line answers the user's own mistake (issue 29, item 2): one line on stderr,
exit status 2, no traceback, naming what the user typed; "did you mean" for names; the
settings that differ when an output folder holds another configuration; ``dpjax plot`` reads
the experiment from config.json; results files honour the umask."""

import json
import os
import stat
from pathlib import Path

import pytest

from dpjax import cli, results, study
from dpjax.experiments import registry

SMALL = {"d": "40", "n_grid": "800,1000", "s_grid": "2,3", "n_base": "800", "s_base": "3",
         "large_n": "", "eps_grid": "0.5,2"}


def _one_line_error(capsys, argv):
    """Run ``dpjax ARGV``; it must fail with status 2 and exactly one line on stderr."""
    code = cli.main(argv)
    captured = capsys.readouterr()
    err = captured.err
    assert code == 2, (code, err)
    assert err.startswith("dpjax: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and captured.out == ""
    return err


# ---- demo -------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv,message", [
    (["--epsilon", "-1"], "--epsilon must be a finite number > 0; got -1"),
    (["--epsilon", "0"], "--epsilon must be a finite number > 0; got 0"),
    (["--epsilon", "nan"], "--epsilon must be a finite number > 0; got nan"),
    (["--epsilon", "inf"], "always runs the non-private limit"),
    (["--s", "0"], "--s must be in [1, --d = 1000]; got 0"),
    (["--d", "5", "--s", "6"], "--s must be in [1, --d = 5]; got 6"),
    (["--d", "0"], "--d must be >= 1; got 0"),
    (["--n", "1"], "--n must be >= 2; got 1"),
    (["--seed", "-1"], "--seed must be an integer in [0, 2^63); got -1"),
    (["--n", "x"], "argument --n: invalid int value: 'x' (see 'dpjax demo --help')"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_demo_mistakes_are_one_line(capsys, argv, message):
    assert message in _one_line_error(capsys, ["demo", *argv])


def test_demo_module_entry_point_exits_2(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "dpjax.demo", "--epsilon", "-1"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr == "dpjax: error: --epsilon must be a finite number > 0; got -1\n"


# ---- argparse mistakes of every subcommand ----------------------------------------------------


@pytest.mark.parametrize("argv,message", [
    (["run"], "the following arguments are required: name, --out (see 'dpjax run --help')"),
    (["run", "em_fig1"], "the following arguments are required: --out"),
    (["run", "em_fig1", "--out", "x", "--seed", "one"], "argument --seed: invalid int value"),
    (["run", "em_fig1", "--out", "x", "--data-mode", "fast"], "argument --data-mode"),
    (["plot"], "the following arguments are required: --out (see 'dpjax plot --help')"),
    (["rn"], "invalid choice: 'rn'"),
    ([], "the following arguments are required: command"),
])
def test_usage_mistakes_are_one_line(capsys, argv, message):
    assert message in _one_line_error(capsys, argv)


# ---- run: the user's own settings, named ------------------------------------------------------


def test_seed_must_be_non_negative(tmp_path, capsys):
    out = tmp_path / "out"
    err = _one_line_error(capsys, ["run", "em_fig1", "--out", str(out), "--seed", "-1"])
    assert "--seed must be >= 0; got -1" in err and not out.exists()
    with pytest.raises(study.ConfigError, match=r"--seed must be an integer in \[0, 2\^63\)"):
        study.run_experiment(registry()["em_fig1"], out, seed=2**63, progress=False)


def test_an_experiment_typo_suggests_the_near_names_only(tmp_path, capsys):
    err = _one_line_error(capsys, ["run", "em_fig", "--out", str(tmp_path / "o")])
    assert "unknown experiment 'em_fig'; did you mean em_fig1, em_fig2 or em_fig4?" in err
    assert "gem_adult" not in err and "ldp_iht" not in err  # not the whole list
    err = _one_line_error(capsys, ["run", "glm_fig", "--out", str(tmp_path / "o")])
    assert "did you mean glm_fig1 or glm_fig2?" in err
    err = _one_line_error(capsys, ["run", "zzz", "--out", str(tmp_path / "o")])
    assert f"unknown experiment 'zzz'; 'dpjax list' shows the {len(registry())} experiments" \
        in err


def test_a_setting_typo_suggests_the_near_setting(tmp_path, capsys):
    base = ["run", "em_fig1", "--out", str(tmp_path / "o")]
    err = _one_line_error(capsys, base + ["--set", "eps_gird=0.5"])
    assert ("--set eps_gird: unknown setting for experiment 'em_fig1'; did you mean eps_grid? "
            "(valid settings: d, eps_base, eps_grid,") in err
    err = _one_line_error(capsys, ["run", "glm_fig1", "--out", str(tmp_path / "o"),
                                   "--set", "t_grid=5"])
    assert "did you mean T_grid" in err


def test_a_rule_across_settings_blames_the_setting_the_user_passed(tmp_path, capsys):
    """glm_fig1's T_grid must contain T: --set T=5 on --quick (T_grid = 20) names T first and
    shows T_grid's value; when the user also set T_grid, the rule's own wording stands."""
    base = ["run", "glm_fig1", "--out", str(tmp_path / "o"), "--quick"]
    err = _one_line_error(capsys, base + ["--set", "T=5"])
    assert err.startswith("dpjax: error: --set T=5: conflicts with T_grid=20, which was left "
                          "unchanged; T_grid: must contain T = 5"), err
    err = _one_line_error(capsys, base + ["--set", "T=5", "--set", "T_grid=10,20"])
    assert err.startswith("dpjax: error: --set T_grid: must contain T = 5"), err
    # of several settings the user passed, those the rule mentions are named
    err = _one_line_error(capsys, base + ["--set", "eta=0.3", "--set", "T=7"])
    assert err.startswith("dpjax: error: --set T=7: conflicts with T_grid=20"), err


def test_a_bound_may_name_another_field():
    """em_rmc declares hd_s <= hd_d on the field (not in a hand-written check): the help text
    shows it, and either side set on the command line is the one named."""
    import dataclasses

    from dpjax.config import Config, ConfigError, param

    exp = registry()["em_rmc"]
    assert exp.config_type.field("hd_s").describe() == "an integer in [1, hd_d]"
    with pytest.raises(ConfigError, match=r"^--set hd_s: must be <= hd_d \(1000\); got 2000$"):
        study.resolve_config(exp, {"hd_s": "2000"})
    with pytest.raises(ConfigError, match=r"^--set hd_d=3: conflicts with hd_s=5, which was "
                        r"left unchanged; hd_s: must be <= hd_d \(3\); got 5$"):
        study.resolve_config(exp, {"hd_d": "3"})

    @dataclasses.dataclass(frozen=True)
    class Grid(Config):
        top: int = param(10, ge=1, doc="")
        sizes: tuple[int, ...] = param((2, 5), ge=1, lt="top", doc="")

    assert Grid().sizes == (2, 5)
    with pytest.raises(ConfigError, match=r"--set sizes: must be < top \(10\); got 2,10"):
        Grid(sizes=(2, 10))

    @dataclasses.dataclass(frozen=True)
    class Bad(Config):
        a: int = param(1, le="nope", doc="")

    with pytest.raises(TypeError, match="names 'nope'"):
        Bad()


def test_inf_is_refused_saying_the_non_private_run_is_always_there(tmp_path, capsys):
    err = _one_line_error(capsys, ["run", "em_fig1", "--out", str(tmp_path / "o"),
                                   "--set", "eps_grid=0.5,inf"])
    assert "got 0.5,inf; em_fig1 always runs the non-private limit (epsilon = inf)" in err
    exp = registry()["iv_card"]  # a rho grid, and a typed (not --set string) value
    with pytest.raises(study.ConfigError, match="iv_card always runs the non-private limit"):
        study.resolve_config(exp, {"rho_grid": (0.1, float("inf"))})
    # gem_mean has no non-private run: the refusal says nothing about one
    with pytest.raises(study.ConfigError) as info:
        study.resolve_config(registry()["gem_mean"], {"eps_grid": "inf"})
    assert "non-private" not in str(info.value)
    # another setting's inf (a step size) gets no such note
    with pytest.raises(study.ConfigError) as info:
        study.resolve_config(registry()["glm_fig1"], {"eta": "inf"})
    assert "non-private" not in str(info.value)


# ---- a finished run: plot, another configuration, file modes ----------------------------------


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A small em_fig1 run, written under umask 022."""
    out = tmp_path_factory.mktemp("cli_errors") / "run"
    old = os.umask(0o022)
    try:
        study.run_experiment(registry()["em_fig1"], out, reps=1, quick=True, overrides=SMALL,
                             progress=False)
    finally:
        os.umask(old)
    return out


def test_results_files_are_readable_like_the_figure(finished):
    mode = {p.name: stat.S_IMODE(p.stat().st_mode) for p in finished.iterdir() if p.is_file()}
    assert mode["figure.png"] == 0o644
    for name in ("results.csv", "summary.csv", "iterations.csv", "config.json"):
        assert mode[name] == 0o644, (name, oct(mode[name]))
    chunk = next(finished.glob("chunks/*/*.npz"))
    assert stat.S_IMODE(chunk.stat().st_mode) == 0o644


@pytest.mark.parametrize("umask,expected", [(0o077, 0o600), (0o027, 0o640), (0o002, 0o664)])
def test_atomic_writes_honour_the_umask(tmp_path, umask, expected):
    old = os.umask(umask)
    try:
        results.write_csv(tmp_path / "t.csv", [{"a": 1}])
        results.write_json(tmp_path / "t.json", {"a": 1})
    finally:
        os.umask(old)
    for name in ("t.csv", "t.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == expected
    assert os.umask(old) == old  # the umask was left as it was
    os.umask(old)


def test_plot_reads_the_experiment_from_config_json(finished, capsys):
    fig = finished / "figure.png"
    fig.unlink()
    assert cli.main(["plot", "--out", str(finished)]) == 0
    assert capsys.readouterr().out == f"wrote {fig}\n" and fig.stat().st_size > 0
    assert cli.main(["plot", "em_fig1", "--out", str(finished)]) == 0  # agreeing name: fine
    capsys.readouterr()


def test_plot_with_another_experiments_name_says_whose_folder_it_is(finished, capsys):
    err = _one_line_error(capsys, ["plot", "glm_fig1", "--out", str(finished)])
    assert f"--out {finished} holds a run of em_fig1, not glm_fig1" in err
    assert "--set" not in err and "delta" not in err
    err = _one_line_error(capsys, ["plot", "em_fig", "--out", str(finished)])
    assert "unknown experiment 'em_fig'; did you mean" in err


def test_plot_mistakes_are_one_line(tmp_path, finished, capsys):
    err = _one_line_error(capsys, ["plot", "--out", str(tmp_path / "none")])
    assert f"--out {tmp_path / 'none'}: no such directory" in err
    err = _one_line_error(capsys, ["plot", "--out", str(tmp_path)])
    assert "no config.json there" in err
    (tmp_path / "config.json").write_text("{not json")
    assert "cannot read config.json" in _one_line_error(capsys, ["plot", "--out", str(tmp_path)])
    meta = json.loads((finished / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(meta | {"experiment": "em_fig99"}))
    err = _one_line_error(capsys, ["plot", "--out", str(tmp_path)])
    assert ("names experiment 'em_fig99', which is neither bundled with dpjax nor offered by "
            "an installed package, and records no file or module it came from" in err)
    meta["config"]["old_setting"] = 1  # written by another version of the experiment
    (tmp_path / "config.json").write_text(json.dumps(meta))
    err = _one_line_error(capsys, ["plot", "--out", str(tmp_path)])
    assert "its config.json does not fit em_fig1" in err and "old_setting" in err
    del meta["config"]["old_setting"]
    (tmp_path / "config.json").write_text(json.dumps(meta))
    err = _one_line_error(capsys, ["plot", "--out", str(tmp_path)])
    assert "iterations.csv is missing" in err


def test_another_configuration_lists_the_settings_that_differ(finished, capsys):
    before = sorted(p.name for p in finished.rglob("*"))
    argv = ["run", "em_fig1", "--out", str(finished), "--quick", "--reps", "1", "--no-progress",
            "--seed", "3"]
    small = [a for k, v in SMALL.items() if k != "eps_grid" for a in ("--set", f"{k}={v}")]
    err = _one_line_error(capsys, argv + small + ["--set", "eps_grid=0.7"])
    # the list settings may change (a study grows): only what blocks the rerun is named
    assert f"{finished} holds results of a different configuration (--seed: 0 -> 3); " \
        "rerun with the same settings to resume (only repetitions and the elements of a list " \
        "setting may change: a study grows)" in err
    assert "fingerprint" not in err
    err = _one_line_error(capsys, ["run", "em_fig4", "--out", str(finished), "--quick",
                                   "--no-progress"])
    assert "(a run of em_fig1, not em_fig4)" in err
    assert sorted(p.name for p in finished.rglob("*")) == before


def test_identity_changes_fall_back_to_config_json_and_cap_the_list(tmp_path):
    new = {"experiment": "x", "seed": 0, "config": {f"k{i}": i for i in range(12)}}
    old = {"experiment": "x", "seed": 0, "config": {f"k{i}": -i for i in range(12)}}
    changes = results._identity_changes(old, new)
    assert changes[:2] == ["k1: -1 -> 1", "k2: -2 -> 2"] and changes[-1] == "and 3 more"
    assert results._identity_changes(
        {"experiment": "x", "config": {"a": [1, 2], "gone": True}},
        {"experiment": "x", "config": {"a": (1,), "new": "s"}},
    ) == ["a: 1,2 -> 1", "new: (none) -> s", "gone: true -> (none)"]
    # a folder of an older dpjax (no chunks/identity.json): read config.json
    (tmp_path / "chunks").mkdir()
    (tmp_path / "chunks" / "fingerprint.txt").write_text("abc\n")
    (tmp_path / "config.json").write_text(json.dumps(old))
    with pytest.raises(results.ConfigError, match=r"different configuration \(k1: -1 -> 1;"):
        results.ChunkStore(tmp_path, "def", identity=new)
    Path(tmp_path, "config.json").unlink()  # nothing to compare with: the fingerprints
    with pytest.raises(results.ConfigError, match="fingerprint abc != def"):
        results.ChunkStore(tmp_path, "def", identity=new)
