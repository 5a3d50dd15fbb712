"""``dpjax run --all``: every committed report regenerated at its settings and compared
(dpjax.reproduce). The command runs here on two quick experiments against a tmp "committed"
folder; the comparison's band and the plans of the real committed reports are checked on their
own."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import pytest

from dpjax import cli, reproduce
from dpjax.study import resolve_config

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "experiments" / "reports"


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _chunks(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns
            for p in folder.rglob("reps-*.npz")}


def test_own_usage_is_the_process_own_peak_memory():
    """A study process's peak memory is its own: a child that allocates 400 MB reads at least
    that, and a small child of this (large, JAX-importing) process reads small (``ru_maxrss``
    on Linux would count this process's memory at the moment the child started)."""
    import subprocess
    import sys

    def usage(code: str) -> dict:
        out = subprocess.run([sys.executable, "-c", "import json\nfrom dpjax.reproduce import "
                              f"own_usage\n{code}\nprint(json.dumps(own_usage()))"],
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    touch = "x = bytearray(400_000_000)\nx[::4096] = b'1' * len(x[::4096])"
    big = usage(touch)
    assert big["process_peak_rss_gb"] >= 0.4
    x = bytearray(400_000_000)  # this process now holds at least 0.4 GB when it starts one
    x[::4096] = b"1" * len(x[::4096])
    small = usage("")
    del x
    if sys.platform == "linux":  # VmHWM: elsewhere ru_maxrss, whose inheritance differs
        assert small["process_peak_rss_gb"] < 0.35, small
    assert big["process_cpu_seconds"] >= small["process_cpu_seconds"] >= 0


def test_run_all_regenerates_resumes_and_lists_what_moved(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "cache"))
    names = ["dp_mean", "glm_real"]
    committed, out = tmp_path / "reports", tmp_path / "out"
    for name in names:  # the settings of the "committed" runs: quick, 2 repetitions, seed 3
        (committed / name).mkdir(parents=True)
        (committed / name / "config.json").write_text(json.dumps(
            {"experiment": name, "config": {}, "reps": 2, "seed": 3, "quick": True}))
    argv = ["run", "--all", "--only", ",".join(names), "--reports", str(committed), "--out",
            str(out), "--no-progress", "--cpu-devices", "1", "--jobs", "2"]
    assert cli.main(argv) == 0
    for name in names:
        meta = json.loads((out / name / "config.json").read_text())
        assert (meta["reps"], meta["seed"], meta["quick"]) == (2, 3, True)
        assert {r["count"] for r in _rows(out / name / "summary.csv")} == {"2"}
        assert meta["timing"]["programs_compiled"] >= 1  # JAX's compile events, recorded
    printed = capsys.readouterr()
    assert "no committed summary.csv to compare with" in printed.out
    timings = json.loads((out / "reproduction.json").read_text())["experiments"]
    assert set(timings) == set(names)
    # each study ran in its own process (import and compile included in its whole time)
    assert all(t["first_process_seconds"] > t["first_seconds"] > 0 for t in timings.values())
    # and its own peak memory and CPU seconds (a process that imports JAX: over 50 MB)
    for t in timings.values():
        assert 0.05 < t["first_process_peak_rss_gb"] < 24
        assert t["first_process_cpu_seconds"] > 0
        assert f"peak memory {t['first_process_peak_rss_gb']:.2f} GB" in printed.err
    # its programs compiled and compile seconds are in the timing line and the timings
    for name, t in timings.items():
        n, secs = t["first_programs_compiled"], t["first_compile_seconds"]
        assert n >= 1 and 0 < secs < t["first_seconds"]
        assert f"{name}: done in {t['first_seconds']:.1f} s, {n} programs compiled in " \
               f"{secs:.1f} s" in printed.err
    # one persistent compilation cache, shared by the study processes
    assert any((tmp_path / "cache").iterdir())

    # the regenerated summaries become the committed ones: all agree
    for name in names:
        (committed / name / "summary.csv").write_text((out / name / "summary.csv").read_text())
    assert cli.main(["run", "--compare-only", "--only", ",".join(names), "--reports",
                     str(committed), "--out", str(out)]) == 0
    table = _rows(out / "comparison.csv")
    assert {r["experiment"] for r in table} == set(names)
    assert len(table) >= 4 and {r["status"] for r in table} == {"ok"}
    capsys.readouterr()

    # one committed mean moved by 50 standard errors: listed (and only it); exit status 0
    path = committed / "dp_mean" / "summary.csv"
    rows = _rows(path)
    rows[1]["mean"] = repr(float(rows[1]["mean"]) + 50 * float(rows[1]["se"]))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    before = _chunks(out)
    assert before  # the studies' chunk stores
    assert cli.main(argv) == 0  # a rerun resumes: no chunk computed again
    assert _chunks(out) == before
    printed = capsys.readouterr().out
    moved = [r for r in _rows(out / "comparison.csv") if r["status"] != "ok"]
    assert len(moved) == 1, moved
    (m,) = moved
    assert m["experiment"] == "dp_mean" and m["metric"] == "mean"
    assert f"epsilon={float(rows[1]['epsilon']):.10g}" in m["key"]
    assert float(m["se_units"]) == pytest.approx(-50 / math.sqrt(2), rel=1e-3)
    assert "dp_mean: " in printed and "1 moved" in printed and "-35.4 s.e." in printed

    # mistakes: an unknown experiment (status 2), a summary missing for the comparison (1)
    assert cli.main([*argv[:3], "dp_mean,nope", *argv[4:]]) == 2
    assert cli.main(["run", "--compare-only", "--only", "dp_mean", "--reports", str(committed),
                     "--out", str(tmp_path / "empty")]) == 1


def test_run_all_runs_jobs_studies_at_once(tmp_path, monkeypatch):
    """``jobs`` study processes at a time (never more), each told its share of the memory, of
    the cores and of an accelerator's memory; one at a time with ``jobs=1``."""
    import threading
    import time

    names = ["a", "b", "c", "d", "e"]
    committed = tmp_path / "reports"
    for name in names:
        (committed / name).mkdir(parents=True)
        (committed / name / "config.json").write_text(json.dumps(
            {"experiment": name, "config": {}, "reps": 2, "seed": 0, "quick": True}))
    lock, running, seen = threading.Lock(), [0], []

    def fake(plan, out, progress, run_kwargs, cpu_devices, env=None):
        with lock:
            running[0] += 1
            seen.append((running[0], progress, run_kwargs["memory_share"], cpu_devices,
                         run_kwargs["compile_cache_dir"],
                         (env or {}).get("XLA_PYTHON_CLIENT_MEM_FRACTION")))
        time.sleep(0.3)
        with lock:
            running[0] -= 1
        return {"seconds": 0.3, "fingerprint": None, "reps": 2, "process_seconds": 0.4,
                "timing": {"seconds": 0.3, "programs_compiled": 3, "compile_seconds": 0.2,
                           "programs_from_cache": 1}}

    monkeypatch.setattr(reproduce, "_run_isolated", fake)
    monkeypatch.setattr(reproduce, "_cores", lambda: 16)
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    experiments = dict.fromkeys(names)
    for jobs, peak in [(2, 2), (1, 1), (8, 5)]:
        seen.clear()
        assert reproduce.reproduce(experiments, tmp_path / f"out{jobs}", committed, only=names,
                                   isolate=True, jobs=jobs, compile_cache_dir="/the/cache",
                                   echo=lambda m: None) == 0
        assert max(s[0] for s in seen) == peak and len(seen) == len(names)
        assert {s[1:] for s in seen} == {
            (jobs == 1, jobs, 16 // jobs if jobs > 1 else 0, "/the/cache",
             f"{0.75 / jobs:.3f}" if jobs > 1 else None)}
        timing = json.loads((tmp_path / f"out{jobs}" / "reproduction.json").read_text())
        assert timing["experiments"]["c"]["first_programs_compiled"] == 3
        assert timing["experiments"]["c"]["last_programs_from_cache"] == 1
    assert reproduce.default_jobs(2) == 1 and reproduce.default_jobs(16) == 8
    assert reproduce.default_jobs(64) == 8 and reproduce.default_jobs(1) == 1
    with pytest.raises(ValueError, match="--jobs must be an integer >= 1; got 0"):
        reproduce.reproduce(experiments, tmp_path / "x", committed, isolate=True, jobs=0)


def test_jobs_below_one_is_a_one_line_error(tmp_path, capsys):
    assert cli.main(["run", "--all", "--out", str(tmp_path), "--jobs", "0"]) == 2
    assert "--jobs must be >= 1; got 0" in capsys.readouterr().err


def _summary(mean, se, count=10, **key):
    return {"experiment": "e", "method": "m", **key, "mean": mean, "se": se, "count": count}


def test_comparison_band_is_z_standard_errors_plus_float_tolerance():
    old = [_summary(1.0, 0.1, epsilon=0.5), _summary(2.0, 0.0, epsilon=math.inf),
           _summary(3.0, 0.1, epsilon=1.0)]
    band = 3 * math.sqrt(0.1**2 + 0.1**2)
    new = [_summary(1.0 + 0.99 * band, 0.1, epsilon=0.5),
           _summary(2.0 * (1 + 1e-6), 0.0, epsilon=math.inf),  # float rounding, se 0
           _summary(3.0 + 1.01 * band, 0.1, epsilon=1.0)]
    got = {r["key"]: r for r in reproduce.compare_summaries("e", old, new)}
    assert [got[k]["status"] for k in sorted(got)] == ["ok", "moved", "ok"]
    assert got["experiment=e; method=m; epsilon=1"]["se_units"] == pytest.approx(1.01 * 3)
    # a tighter z moves the first too; another count is reported; a lost row is listed
    assert reproduce.compare_summaries("e", old[:1], new[:1], z=2)[0]["status"] == "moved"
    assert reproduce.compare_summaries("e", old[:1], [{**old[0], "count": 9}])[0][
        "status"] == "count"
    lost = reproduce.compare_summaries("e", old, new[:2])
    assert [r["status"] for r in lost] == ["ok", "ok", "missing"]
    # keys written with other float digits still match; extra metrics are compared too
    a = [{**_summary(1.0, 0.1, epsilon=0.1 + 0.2), "x_mean": 5.0, "x_se": 0.01, "x_sd": 1.0}]
    b = [{**_summary(1.0, 0.1, epsilon=0.3), "x_mean": 5.5, "x_se": 0.01, "x_sd": 1.0}]
    assert [(r["metric"], r["status"]) for r in reproduce.compare_summaries("e", a, b)] == [
        ("mean", "ok"), ("x_mean", "moved")]


def test_an_experiment_can_widen_the_float_tolerance_of_one_metric():
    """compare_atol: a metric that is float32 round-off at some settings (IV's error_2sls at
    epsilon = inf: about 1e-6 either way) is compared within its own atol, the others not."""
    old = [{**_summary(1.0, 0.1, epsilon=math.inf), "d_mean": 1.3e-6, "d_se": 5e-8,
            "d_sd": 5e-7}]
    new = [{**_summary(1.0, 0.1, epsilon=math.inf), "d_mean": 3.2e-7, "d_se": 5e-8,
            "d_sd": 5e-7}]
    plain = reproduce.compare_summaries("e", old, new)
    assert [r["status"] for r in plain] == ["ok", "moved"]
    wide = reproduce.compare_summaries("e", old, new, metric_atol={"d": 1e-5})
    assert [r["status"] for r in wide] == ["ok", "ok"]
    # it widens only the metric it names: "error" (the mean column) is compared as before
    moved_error = [{**new[0], "mean": 2.0}]
    got = reproduce.compare_summaries("e", old, moved_error, metric_atol={"d": 1e-5})
    assert [r["status"] for r in got] == ["moved", "ok"]
    # the IV studies declare it for error_2sls only, and an unknown metric is refused
    registry = cli._registry()
    assert dict(registry["iv_fig4"].compare_atol) == {"error_2sls": 1e-5}
    assert dict(registry["em_fig1"].compare_atol) == {}
    with pytest.raises(ValueError, match="compare_atol names 'nope'"):
        dataclasses.replace(registry["iv_fig4"], compare_atol=(("nope", 1e-5),))
    with pytest.raises(ValueError, match="finite number >= 0"):
        dataclasses.replace(registry["iv_fig4"], compare_atol=(("error_2sls", -1.0),))


def test_every_committed_report_has_a_plan_this_version_can_run():
    """The settings of every committed summary resolve against today's experiments (the
    command would run them), from config.json or the report text; the reports without a
    summary are skipped with a reason."""
    registry = cli._registry()
    plans = reproduce.plan_all(list(registry), REPORTS)
    run = [p for p in plans if p.skip is None]
    assert {p.name for p in run} == {
        d.name for d in REPORTS.iterdir() if (d / "summary.csv").is_file()}
    for p in run:
        config = resolve_config(registry[p.name], p.overrides, p.quick)
        if p.source == "config.json":
            committed = json.loads((REPORTS / p.name / "config.json").read_text())
            assert config.to_dict() == resolve_config(
                registry[p.name], committed["config"]).to_dict()
            assert p.reps == committed["reps"] and p.seed == committed["seed"]
    by = {p.name: p for p in plans}
    assert by["gem_mean"].reps == 100 and by["ldp_heavy"].chunk_size == 5
    assert by["gem_fig2"].skip and by["dp_mean"].skip == "no committed report"
    assert set(reproduce.recorded_seconds(REPORTS)) <= {p.name for p in run}
