"""The whole reproduction as one command: ``dpjax run --all --out DIR``.

Every registered experiment that has a committed report (``experiments/reports/NAME/`` with a
``summary.csv``) runs again at the settings of that report, each in ``DIR/NAME`` (so a rerun
resumes every study from its completed chunks, as ``dpjax run NAME`` does), and then each
regenerated ``summary.csv`` is compared with the committed one. Each study runs in its own
process, ``--jobs`` of them at once (:func:`default_jobs`), all on one persistent compilation
cache; each study's line and ``DIR/reproduction.json`` give its time, the programs it compiled
and the seconds spent compiling them (:mod:`dpjax._compiles`).

Settings of a report: its ``config.json`` (the resolved configuration, seed, repetitions and
``--quick`` flag of the committed run) where the folder has one; else the experiment's defaults
with the few options its report's text records (:data:`REPORT_OPTIONS`). A report folder with
no ``summary.csv`` (a figure drawn from another experiment's run, e.g. ``gem_fig2`` from
``gem_fig6``) has nothing to compare and is skipped unless named with ``--only``.

The comparison: a row (a setting and privacy level, matched on every column that is not a
statistic and that both files have) agrees when, for ``mean`` and every ``X_mean`` column,

    |new - old| <= z * sqrt(se_new^2 + se_old^2) + atol + rtol * |old|

(Monte Carlo error plus float tolerance; ``z = 3`` by default; an experiment may raise
``atol`` for a metric that is float32 round-off at some settings, its
:attr:`~dpjax.study.Experiment.compare_atol`) and the counts are equal. What
moved (a mean outside that band, another count, a row only in one of the two files) is listed
with the difference in standard-error units; every compared value goes to
``DIR/comparison.csv``. The exit status is nonzero only on errors (a study that failed, a
committed configuration this version cannot run), not on moved values.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dpjax import results
from dpjax._validate import ConfigError
from dpjax.study import Experiment, run_experiment

__all__ = [
    "REPORT_OPTIONS",
    "Plan",
    "compare_summaries",
    "default_jobs",
    "plan_all",
    "recorded_seconds",
    "reproduce",
]

# Reports whose folders hold no config.json: the options their text records (seed 0 and the
# experiment's defaults otherwise). gem_mean.md: "--reps 100"; ldp_heavy.md and
# ldp_wangxu.md: "--chunk-size 5" (bounds memory; results do not depend on it).
REPORT_OPTIONS: dict[str, dict[str, Any]] = {
    "gem_mean": {"reps": 100},
    "ldp_heavy": {"chunk_size": 5},
    "ldp_wangxu": {"chunk_size": 5},
}

# the hidden CLI command that runs one study in a child process (dpjax.cli dispatches it)
CHILD_COMMAND = "_run-one-study"
DEFAULT_Z = 3.0
DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-9
_STAT_SUFFIXES = ("_mean", "_se", "_sd")


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one experiment is regenerated.

    Attributes:
        name: the experiment.
        reps, seed, quick, overrides, chunk_size: the arguments of its run.
        source: where the settings come from (``config.json``, ``report text``, ``defaults``).
        committed: the committed ``summary.csv`` (None: nothing to compare).
        skip: why it is not run (None: it is).
    """

    name: str
    reps: int | None = None
    seed: int = 0
    quick: bool = False
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    chunk_size: int | None = None
    source: str = "defaults"
    committed: Path | None = None
    skip: str | None = None
    fingerprint: str | None = None  # the committed run's (config.json)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read it ({exc})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
        raise ConfigError(f"{path}: no configuration in it (not written by 'dpjax run')")
    return meta


def plan_one(name: str, reports: Path, explicit: bool = False) -> Plan:
    """The plan of experiment ``name`` from its committed report in ``reports``."""
    folder = reports / name
    summary = folder / "summary.csv"
    committed = summary if summary.is_file() else None
    if (folder / "config.json").is_file():
        meta = _read_json(folder / "config.json")
        return Plan(name, reps=int(meta["reps"]), seed=int(meta.get("seed", 0)),
                    quick=bool(meta.get("quick", False)), overrides=dict(meta["config"]),
                    source="config.json", committed=committed, fingerprint=meta.get(
                        "fingerprint"),
                    skip=None if committed or explicit else "no committed summary.csv")
    options = REPORT_OPTIONS.get(name, {})
    source = "report text" if options else "defaults"
    if committed is None and not explicit:
        why = ("no committed report" if not folder.is_dir() else
               "no committed summary.csv (its report draws on another run; see "
               f"{name}.md)")
        return Plan(name, source=source, skip=why)
    return Plan(name, reps=options.get("reps"), chunk_size=options.get("chunk_size"),
                source=source, committed=committed)


def plan_all(names: Sequence[str], reports: Path,
             only: Sequence[str] | None = None) -> list[Plan]:
    """The plans of ``names`` (sorted), or of ``only`` (each must be one of ``names``)."""
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise ConfigError(f"--only: unknown experiment(s) {', '.join(unknown)} ('dpjax list' "
                              "shows them all)")
        return [plan_one(n, reports, explicit=True) for n in dict.fromkeys(only)]
    return [plan_one(n, reports) for n in sorted(names)]


def recorded_seconds(reports: Path) -> dict[str, float]:
    """Per experiment, the sum of the per-setting ``seconds`` its committed config.json
    records (the study's compute in that run; not import, plotting or a resumed chunk)."""
    out = {}
    for path in sorted(reports.glob("*/config.json")):
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        secs = [s.get("seconds") for s in meta.get("settings", []) if isinstance(s, dict)]
        if secs and all(isinstance(x, int | float) for x in secs):
            out[path.parent.name] = float(sum(secs))
    return out


# --------------------------------------------------------------------------------------------
# The comparison
# --------------------------------------------------------------------------------------------


def _is_stat(column: str) -> bool:
    return column in ("mean", "se", "count") or column.endswith(_STAT_SUFFIXES)


def _norm(value: Any) -> str:
    """A key value, so that two writes of the same number match (10 significant digits)."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int | float):
        f = float(value)
        if math.isnan(f) or math.isinf(f):
            return str(f)
        return f"{f:.10g}"
    return str(value)


def _key(row: Mapping[str, Any], columns: Sequence[str]) -> tuple[str, ...]:
    return tuple(_norm(row.get(c, "")) for c in columns)


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _key_columns(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]
                 ) -> list[str]:
    """The columns that match a row of one table with a row of the other: the non-statistic
    columns both tables have (a column only one file has -- e.g. ``epsilon_delivered``, which
    older committed summaries lack -- is not compared), unless those leave two rows of a table
    with one key; then every non-statistic column of either table."""
    cols = [list(dict.fromkeys(c for r in t for c in r if not _is_stat(c))) for t in (old, new)]
    shared = [c for c in cols[0] if c in cols[1]]
    if all(len({_key(r, shared) for r in t}) == len(t) for t in (old, new)):
        return shared
    return list(dict.fromkeys([*cols[0], *cols[1]]))


def compare_summaries(experiment: str, old: Sequence[Mapping[str, Any]],
                      new: Sequence[Mapping[str, Any]], z: float = DEFAULT_Z,
                      rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                      metric_atol: Mapping[str, float] | None = None
                      ) -> list[dict[str, Any]]:
    """One row per (summary row, statistic) of the two ``summary.csv`` tables: ``experiment``,
    ``key`` (the row's non-statistic columns, ``name=value; ...``), ``metric`` (``mean`` or
    ``X_mean``), ``old``, ``new``, ``diff``, ``se_units`` (the difference over
    ``sqrt(se_old^2 + se_new^2)``) and ``status``: ``ok``, ``moved`` (outside the band),
    ``count`` (other repetition counts), ``missing`` (only in the committed file) or ``new``
    (only in the regenerated one). ``metric_atol``: a larger ``atol`` for the named metrics
    (``"error"`` for ``mean``, ``"X"`` for ``X_mean``)."""
    metric_atol = dict(metric_atol or {})
    columns = _key_columns(old, new)
    old_by = {_key(r, columns): r for r in old}
    new_by = {_key(r, columns): r for r in new}
    metrics = list(dict.fromkeys(c for r in [*old, *new] for c in r
                                 if c == "mean" or c.endswith("_mean")))
    out = []
    for k in list(dict.fromkeys([*old_by, *new_by])):
        label = "; ".join(f"{c}={v}" for c, v in zip(columns, k) if v != "")
        a, b = old_by.get(k), new_by.get(k)
        for m in metrics:
            se = "se" if m == "mean" else m.removesuffix("_mean") + "_se"
            tol = max(atol, metric_atol.get("error" if m == "mean" else m.removesuffix("_mean"),
                                            atol))
            row = {"experiment": experiment, "key": label, "metric": m, "old": "", "new": "",
                   "diff": "", "se_units": "", "status": ""}
            if a is None or b is None:
                row |= {"status": "new" if a is None else "missing",
                        "old": "" if a is None else a.get(m, ""),
                        "new": "" if b is None else b.get(m, "")}
                out.append(row)
                continue
            x, y = _num(a.get(m)), _num(b.get(m))
            sa, sb = _num(a.get(se)), _num(b.get(se))
            spread = math.sqrt(sum(s * s for s in (sa, sb) if math.isfinite(s)))
            diff = y - x
            if (math.isnan(x) and math.isnan(y)) or x == y:
                ok, diff = True, 0.0
            elif math.isfinite(diff):
                ok = abs(diff) <= z * spread + tol + rtol * abs(x)
            else:
                ok = False
            units = diff / spread if spread > 0 and math.isfinite(diff) else (
                0.0 if diff == 0 else math.inf)
            status = "ok" if ok else "moved"
            if status == "ok" and a.get("count") != b.get("count"):
                status = "count"
            row |= {"old": x, "new": y, "diff": diff, "se_units": units, "status": status}
            out.append(row)
    return out


def _describe(row: Mapping[str, Any]) -> str:
    where = f"{row['experiment']} [{row['key']}] {row['metric']}"
    if row["status"] in ("missing", "new"):
        which = "committed" if row["status"] == "missing" else "regenerated"
        return f"{where}: only in the {which} summary.csv"
    extra = " (repetition counts differ)" if row["status"] == "count" else ""
    return (f"{where}: {row['old']:.6g} -> {row['new']:.6g} (diff {row['diff']:+.3g}, "
            f"{row['se_units']:+.1f} s.e.){extra}")


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _run_one(exp: Experiment, plan: Plan, out: Path, progress: bool,
             run_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    res = run_experiment(exp, out, reps=plan.reps, seed=plan.seed, overrides=plan.overrides,
                         chunk_size=plan.chunk_size, quick=plan.quick, progress=progress,
                         **run_kwargs)
    return {"seconds": round(time.perf_counter() - t0, 3),
            "fingerprint": res.config.get("fingerprint"), "reps": res.config.get("reps"),
            "timing": res.config.get("timing", {})}


def default_jobs(cores: int | None = None) -> int:
    """Studies ``dpjax run --all`` runs at once by default: half the cores (a study's compile
    is mostly one thread, its kernels use one thread per CPU device), at least 1 and at most
    8; so 1 on a 2-core machine, where a second process would only share the two cores and
    double the memory."""
    return max(1, min(8, (_cores() if cores is None else cores) // 2))


def _cores() -> int:
    return (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1)


def _plan_json(plan: Plan) -> str:
    return json.dumps({"name": plan.name, "reps": plan.reps, "seed": plan.seed,
                       "quick": plan.quick, "overrides": dict(plan.overrides),
                       "chunk_size": plan.chunk_size})


def _run_isolated(plan: Plan, out: Path, progress: bool, run_kwargs: Mapping[str, Any],
                  cpu_devices: int, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """:func:`_run_one` in a child process (``python -m dpjax.cli _run-one-study ...``, which
    calls :func:`child`), which imports
    dpjax, compiles the study and exits, as ``dpjax run NAME`` does. One process for the whole
    set ran out of memory maps: every compiled kernel stays mapped for the life of the
    process, and after about 19 experiments LLVM could not map another one (``Cannot
    allocate memory``, then a segmentation fault). The child's progress bar and messages go
    to this process's stderr; its result comes back as the last line of its stdout. ``env``:
    the child's environment (default: this process's)."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "dpjax.cli", CHILD_COMMAND, _plan_json(plan), str(out),
           json.dumps({"progress": progress, "cpu_devices": cpu_devices, **run_kwargs})]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True,
                          env=None if env is None else dict(env))
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        why = lines[-1] if lines else f"exit status {proc.returncode}"
        raise RuntimeError(f"the study's process failed: {why}")
    info = json.loads(lines[-1])
    if "error" in info:
        raise RuntimeError(info["error"])
    return info | {"process_seconds": round(time.perf_counter() - t0, 3)}


def child(argv: Sequence[str], experiments: Mapping[str, Experiment],
          setup: Callable[[int, str | None], None]) -> int:
    """One study of ``dpjax run --all`` in its own process (see :func:`_run_isolated`):
    ``argv = [PLAN_JSON, OUT, KWARGS_JSON]``; ``setup(cpu_devices, compile_cache_dir)``
    prepares JAX (the CLI's device count and the compilation cache every study of the run
    shares). With ``memory_share`` studies at once, the default memory budget is this
    process's share of the machine's (:func:`dpjax.sweep.default_memory_budget_gb`). Prints
    the result (or the error) as JSON on stdout."""
    plan_d, out, kwargs = json.loads(argv[0]), Path(argv[1]), json.loads(argv[2])
    setup(kwargs.pop("cpu_devices", 0), kwargs.pop("compile_cache_dir", None))
    progress = kwargs.pop("progress", True)
    share = kwargs.pop("memory_share", 1)
    if kwargs.get("memory_budget_gb") is None and share > 1:
        from dpjax.sweep import default_memory_budget_gb

        kwargs["memory_budget_gb"] = default_memory_budget_gb(share)
    plan = Plan(**plan_d)
    try:
        info = _run_one(experiments[plan.name], plan, out, progress, kwargs)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {' '.join(str(exc).split())}"}))
        return 1
    print(json.dumps(info | own_usage()))
    return 0


def own_usage() -> dict[str, float]:
    """This process's own resources so far: ``process_peak_rss_gb``, its peak resident memory
    (:func:`dpjax._memory.process_peak_gb`: its own program's, not its parent's), and
    ``process_cpu_seconds``, its user and system CPU time; what cannot be read is left out."""
    from dpjax import _memory

    out: dict[str, float] = {}
    peak = _memory.process_peak_gb()
    if peak is not None:
        out["process_peak_rss_gb"] = peak
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return out
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return out | {"process_cpu_seconds": round(ru.ru_utime + ru.ru_stime, 1)}


def reproduce(
    experiments: Mapping[str, Experiment],
    out_dir: str | Path,
    reports: str | Path,
    *,
    only: Sequence[str] | None = None,
    compare_only: bool = False,
    z: float = DEFAULT_Z,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    progress: bool = True,
    echo: Callable[[str], None] = print,
    isolate: bool = False,
    cpu_devices: int = 0,
    jobs: int = 1,
    compile_cache_dir: str | None = None,
    **run_kwargs: Any,
) -> int:
    """Regenerate every experiment of ``experiments`` that has a committed report in
    ``reports`` (or those named in ``only``) in ``out_dir/NAME``, then compare the summaries
    (``out_dir/comparison.csv``; what moved is printed). Returns the exit status: 1 if a
    study failed or a summary could not be compared, else 0 (moved values included).
    ``run_kwargs`` go to :func:`dpjax.study.run_experiment` (``data_mode``,
    ``memory_budget_gb``). ``isolate``: each study in its own process (the registered
    experiment of that name, with ``cpu_devices`` JAX CPU devices; what ``dpjax run --all``
    does), else in this one (``experiments`` may then be any mapping). ``jobs``: with
    ``isolate``, how many study processes run at once (their compiles overlap; see
    :func:`default_jobs`): each then gets ``cores // jobs`` CPU devices unless
    ``cpu_devices`` says, its share of the CPU memory budget and of an accelerator's memory
    (``XLA_PYTHON_CLIENT_MEM_FRACTION``, unless set), and no progress bar.
    ``compile_cache_dir``: the persistent compilation cache every study process uses (a
    program one study compiled, another loads)."""
    out, reports = Path(out_dir), Path(reports)
    if not reports.is_dir():
        raise ConfigError(f"--reports {reports}: no such directory (the committed reports, "
                          "experiments/reports in the repository)")
    if not z > 0:
        raise ConfigError(f"--z must be > 0; got {z}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"--jobs must be an integer >= 1; got {jobs}")
    jobs = jobs if isolate else 1
    plans = plan_all(list(experiments), reports, only)
    todo = [p for p in plans if p.skip is None]
    for p in plans:
        if p.skip is not None:
            echo(f"skip {p.name}: {p.skip}")
    errors: dict[str, str] = {}
    if not compare_only:

        child_kwargs = dict(run_kwargs, compile_cache_dir=compile_cache_dir, memory_share=jobs)
        child_env = None
        devices = cpu_devices
        if jobs > 1:
            child_env = dict(os.environ)
            if not {"XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE"} & set(
                    child_env):  # an accelerator's memory, shared (JAX's default takes 75%)
                child_env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{0.75 / jobs:.3f}"
            if devices == 0:  # the cores, shared out (0 would give each one per core)
                devices = max(1, _cores() // jobs)

        def run(p: Plan) -> dict[str, Any]:
            return (_run_isolated(p, out / p.name, progress and jobs == 1, child_kwargs,
                                  devices, child_env)
                    if isolate else
                    _run_one(experiments[p.name], p, out / p.name, progress, run_kwargs))

        _run_studies(todo, run, out, echo, errors, jobs)
    rows = _compare_all(todo, experiments, out, z, rtol, atol, echo, errors)
    return _write_comparison(out, rows, errors, echo)


def _run_studies(todo: Sequence[Plan], run: Callable[[Plan], dict[str, Any]], out: Path,
                 echo: Callable[[str], None], errors: dict[str, str], jobs: int = 1) -> None:
    """Run the planned studies, ``jobs`` at a time (``run(plan)`` returns its info); a failed
    study's error goes to ``errors`` and does not stop the others. The times go to
    ``out/reproduction.json`` after each study (:func:`_record_time`)."""
    out.mkdir(parents=True, exist_ok=True)
    timing_file = out / "reproduction.json"
    timings = _read_timings(timing_file)
    start = time.perf_counter()
    lock = threading.Lock()

    def one(i: int, p: Plan) -> None:
        head = f"[{i}/{len(todo)}] {p.name}"
        what = (f"reps {p.reps if p.reps is not None else 'default'}, seed {p.seed}"
                f"{', quick' if p.quick else ''}; settings from {p.source}")
        _log(f"{head}: {what}")
        try:
            info = run(p)
        except Exception as exc:  # one failed study does not stop the others
            with lock:
                errors[p.name] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            _log(f"{head}: FAILED ({errors[p.name]})")
            return
        total = time.perf_counter() - start
        memory = (f", peak memory {info['process_peak_rss_gb']:.2f} GB"
                  if "process_peak_rss_gb" in info else "")
        _log(f"{head}: done in {info['seconds']:.1f} s{_compile_note(info)}{memory} "
             f"(elapsed {total:.0f} s)")
        with lock:
            if p.fingerprint and info["fingerprint"] != p.fingerprint:
                echo(f"note: {p.name}: the study's fingerprint {info['fingerprint']} is not "
                     f"the committed run's {p.fingerprint} (its settings or keys changed)")
            _record_time(timings, p.name, info)
            results.write_json(timing_file, {"experiments": timings})

    if jobs == 1:
        for i, p in enumerate(todo, 1):
            one(i, p)
        return
    # threads that wait on the study processes: the compiles overlap in the processes
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for f in [pool.submit(one, i, p) for i, p in enumerate(todo, 1)]:
            f.result()


def _compile_note(info: Mapping[str, Any]) -> str:
    """``", 12 programs compiled in 40.3 s"`` from a study's ``timing`` (JAX's compile
    events; see :mod:`dpjax._compiles`), plus the programs loaded from the persistent cache."""
    t = info.get("timing") or {}
    if "programs_compiled" not in t:
        return ""
    cached = t.get("programs_from_cache", 0)
    return (f", {t['programs_compiled']} programs compiled in {t['compile_seconds']:.1f} s"
            + (f" ({cached} from the compilation cache)" if cached else ""))


def _read_timings(timing_file: Path) -> dict[str, Any]:
    """The times an earlier run into the same folder recorded (a resumed run keeps the times
    of the first); empty when there are none or they cannot be read."""
    if not timing_file.is_file():
        return {}
    try:
        return json.loads(timing_file.read_text()).get("experiments", {})
    except (OSError, ValueError):
        return {}


def _record_time(timings: dict[str, Any], name: str, info: Mapping[str, Any]) -> None:
    """A study's time into ``timings``: the last run's and, kept from the first, the first's
    (the study's seconds; with ``isolate``, the whole process's too)."""
    timings[name] = timings.get(name, {}) | {"last_seconds": info["seconds"]}
    timings[name].setdefault("first_seconds", info["seconds"])
    # the whole process (import, compile, study, files): seconds, peak memory, CPU seconds
    for k in ("process_seconds", "process_peak_rss_gb", "process_cpu_seconds"):
        if k in info:
            timings[name][f"last_{k}"] = info[k]
            timings[name].setdefault(f"first_{k}", info[k])
    for k, v in (info.get("timing") or {}).items():  # programs compiled, compile seconds
        if k != "seconds":
            timings[name][f"last_{k}"] = v
            timings[name].setdefault(f"first_{k}", v)


def _compare_all(todo: Sequence[Plan], experiments: Mapping[str, Experiment], out: Path,
                 z: float, rtol: float, atol: float, echo: Callable[[str], None],
                 errors: dict[str, str]) -> list[dict[str, Any]]:
    """Compare each regenerated ``out/NAME/summary.csv`` with the committed one
    (:func:`compare_summaries`) and print what moved; the rows of every compared value. A
    study that failed is left out; a missing regenerated summary goes to ``errors``."""
    rows: list[dict[str, Any]] = []
    for p in todo:
        if p.name in errors:
            continue
        new = out / p.name / "summary.csv"
        if p.committed is None:
            echo(f"{p.name}: no committed summary.csv to compare with")
            continue
        if not new.is_file():
            errors[p.name] = f"{new} missing (run without --compare-only first)"
            continue
        exp = experiments.get(p.name)
        got = compare_summaries(p.name, results.read_csv(p.committed), results.read_csv(new),
                                z, rtol, atol, dict(getattr(exp, "compare_atol", ())))
        rows.extend(got)
        bad = [r for r in got if r["status"] != "ok"]
        echo(f"{p.name}: {len(got)} values, " + (
            f"all within {z:g} s.e. (+ float tolerance)" if not bad else f"{len(bad)} moved"))
        for r in bad:
            echo(f"  {_describe(r)}")
    return rows


def _write_comparison(out: Path, rows: list[dict[str, Any]], errors: Mapping[str, str],
                      echo: Callable[[str], None]) -> int:
    """``out/comparison.csv``, the summary line and the errors; the exit status (1 if any)."""
    out.mkdir(parents=True, exist_ok=True)
    results.write_csv(out / "comparison.csv", rows, columns=[
        "experiment", "key", "metric", "old", "new", "diff", "se_units", "status"])
    moved = sum(r["status"] != "ok" for r in rows)
    echo(f"comparison: {len(rows)} values of {len({r['experiment'] for r in rows})} "
         f"experiments, {moved} moved; {out / 'comparison.csv'}")
    for name, why in errors.items():
        echo(f"error: {name}: {why}")
    return 1 if errors else 0

