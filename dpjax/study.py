"""Experiments: a named configuration, its settings, and the run that writes the results files.

An :class:`Experiment` (one per figure or table of a paper, in ``experiments/``) declares its
configuration with typed defaults, how the configuration becomes a list of
:class:`~dpjax.sweep.Setting` (one compiled shape each), and how to draw its figure.
:func:`run_experiment` resolves the configuration, runs every setting through the sweep engine
with resumable chunks and a progress bar, and writes ``results.csv``, ``iterations.csv``,
``summary.csv``, ``config.json`` and ``figure.png``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from dpjax import _compiles, _memory, _validate, plotting, results, sweep
from dpjax._validate import ConfigError
from dpjax.accounting import PrivacyBudgetError, check_delivers
from dpjax.config import Config, make_config
from dpjax.sweep import Setting

__all__ = [
    "ConfigError",
    "Experiment",
    "StudyOutput",
    "read_run",
    "replot",
    "resolve_config",
    "run_experiment",
]


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A reproducible study.

    Attributes:
        name: the command-line name (``dpjax run NAME``).
        title: one line: what it reproduces.
        defaults: the default configuration, an instance of the experiment's
            :class:`~dpjax.config.Config` dataclass (whose fields declare their types and
            ranges); ``--set key=value`` overrides it. (A plain mapping of typed defaults is
            accepted too, for an ad-hoc study: see :func:`dpjax.config.make_config`.)
        settings: ``settings(config) -> [Setting, ...]``.
        quick: the configuration of ``--quick`` (a reduced run under a minute on 2 CPU cores):
            ``dataclasses.replace(defaults, ...)`` (or a mapping of the values it changes);
            ``None``: the defaults.
        reps, quick_reps: default repetitions.
        plot: ``plot(iteration_rows, summary_rows, config, path)`` draws ``figure.png``.
        description: longer text for ``dpjax list``.
        summary_extra: other recorded metrics to summarise in ``summary.csv`` besides
            ``error`` (columns ``{name}_mean``, ``{name}_se``, ``{name}_sd``).
        on_invalid: what a repetition whose simulated data hold NaN or infinite entries
            does, as in a fit: ``"raise"`` (default: the study stops, naming the setting and
            the repetitions) or ``"clip"`` (the estimators sanitise them, as a fit with
            ``on_invalid="clip"`` does; ``results.csv`` counts them per repetition in
            ``nonfinite_data`` and ``summary.csv`` per level in ``nonfinite_reps``); see
            :func:`run_experiment`.
        compare_atol: ``(metric, atol)`` pairs: the absolute float tolerance with which
            ``dpjax run --all`` compares that metric's means (``"error"`` or a name of
            ``summary_extra``) with the committed report's, for a metric that is float32
            round-off at some settings (e.g. a distance between two solutions that agree in
            exact arithmetic); the default tolerance elsewhere (:mod:`dpjax.reproduce`).
        level_columns: level keys that are columns of the results files only, read by no
            estimator (e.g. the epsilon a zCDP level converts to). Every other key of a level
            must be a hyperparameter of some setting's estimator: a key no estimator reads
            (a typo such as ``truncaton``) is refused before anything compiles.
    """

    name: str
    title: str
    defaults: Config
    settings: Callable[[Config], Sequence[Setting]]
    quick: Config | None = None
    reps: int = 50
    quick_reps: int = 5
    plot: Callable[..., None] | None = None
    description: str = ""
    summary_extra: tuple[str, ...] = ()
    compare_atol: tuple[tuple[str, float], ...] = ()
    level_columns: tuple[str, ...] = ()
    on_invalid: str = "raise"

    def __post_init__(self) -> None:
        _validate.check_on_invalid(self.on_invalid)
        if isinstance(self.level_columns, str) or not all(
                isinstance(k, str) for k in self.level_columns):
            raise TypeError(f"experiment {self.name!r}: level_columns must be a tuple of "
                            f"level keys (strings); got {self.level_columns!r}")
        known = ("error", *self.summary_extra)
        for metric, atol in self.compare_atol:
            if metric not in known:
                raise ValueError(f"experiment {self.name!r}: compare_atol names {metric!r}, "
                                 f"which is not a summarised metric ({', '.join(known)})")
            if not (isinstance(atol, (int, float)) and math.isfinite(atol) and atol >= 0):
                raise ValueError(f"experiment {self.name!r}: compare_atol[{metric!r}] must "
                                 f"be a finite number >= 0; got {atol!r}")
        if not isinstance(self.defaults, Config):
            if not isinstance(self.defaults, Mapping):
                raise TypeError(f"experiment {self.name!r}: defaults must be a "
                                "dpjax.config.Config")
            object.__setattr__(self, "defaults", make_config(f"{self.name}_config",
                                                             self.defaults))
        if self.quick is not None and not isinstance(self.quick, Config):
            object.__setattr__(self, "quick", dataclasses.replace(self.defaults, **self.quick))
        if self.quick is not None and type(self.quick) is not type(self.defaults):
            raise TypeError(f"experiment {self.name!r}: quick must be a "
                            f"{type(self.defaults).__name__} (dataclasses.replace(defaults))")

    @property
    def config_type(self) -> type[Config]:
        """The experiment's configuration dataclass."""
        return type(self.defaults)

    def help_text(self) -> str:
        """The settings of ``--set``, for ``dpjax run NAME --help``."""
        return (f"settings of {self.name} (--set KEY=VALUE, repeatable;\n"
                "a list is comma-separated; an empty value is the empty list):\n"
                + self.defaults.help_text(self.quick))


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


def resolve_config(
    experiment: Experiment,
    overrides: Mapping[str, Any] | None = None,
    quick: bool = False,
) -> Config:
    """The defaults (or the ``--quick`` configuration), then ``overrides`` (``--set`` strings
    or typed values), validated: raises :class:`ConfigError` naming the setting and its
    allowed values."""
    base = experiment.quick if quick and experiment.quick is not None else experiment.defaults
    try:
        return base.with_overrides(overrides or {}, experiment=experiment.name)
    except ConfigError as exc:
        note = _inf_note(experiment, base, overrides or {}, str(exc))
        if note is None:
            raise
        raise ConfigError(f"{exc}; {note}") from None


_BUDGET = re.compile(r"(eps|epsilon|rho)(\d|_|$)")


def _inf_note(experiment: Experiment, base: Config, overrides: Mapping[str, Any],
              message: str) -> str | None:
    """Why a privacy level of inf is refused, where the study runs the non-private limit
    anyway (read off its settings: some level has epsilon or rho = inf)."""
    names = set(base)
    for name, value in overrides.items():
        if (name not in names or not _BUDGET.match(name) or base.field(name).con.allow_inf
                or not message.startswith(f"--set {name}:")):
            continue
        values = value.split(",") if isinstance(value, str) else (
            value if isinstance(value, (list, tuple)) else [value])
        if not any(_is_inf(v) for v in values):
            continue
        try:
            levels = [lv for s in experiment.settings(base) for lv in s.levels]
        except Exception:  # noqa: BLE001 - only a hint; the error itself stands
            return None
        if any(math.isinf(float(lv.get(k, 0.0))) for lv in levels for k in ("epsilon", "rho")):
            return (f"{experiment.name} always runs the non-private limit (epsilon = inf) "
                    "beside the private levels: leave inf out")
        return None
    return None


def _is_inf(value: Any) -> bool:
    try:
        return math.isinf(float(value.strip() if isinstance(value, str) else value))
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class StudyOutput:
    """What :func:`run_experiment` wrote, also kept in memory."""

    out_dir: Path
    rows: list[dict[str, Any]]
    iteration_rows: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    config: dict[str, Any]  # what config.json holds (the configuration under "config")
    traces: dict[str, dict[str, np.ndarray]]


# The sweep plans each setting's run (data mode, chunk size, bounds, memory): these names stay
# here for the benchmarks and older callers.
_rep_bytes = sweep.rep_bytes
_auto_chunk = sweep.auto_chunk
_check_memory = sweep.check_memory
default_memory_budget_gb = sweep.default_memory_budget_gb


def _check_callbacks(settings: Sequence[Setting], metrics: Sequence[str] = ()) -> None:
    """The callback contract, checked by abstract evaluation before anything compiles
    (:func:`dpjax.sweep.check_setting`) on the first setting of each method (estimator name,
    simulate, init and record): a mistake in a study is one line naming the function, not a
    traceback from the scan. ``metrics``: what ``record`` must return (``error`` and the
    experiment's ``summary_extra``: what summary.csv and the figure read)."""
    seen: set[tuple[Any, ...]] = set()
    for s in settings:
        ident = (s.estimator.name, *(id(f) for f in (s.simulate, s.init, s.record)))
        if ident not in seen:
            seen.add(ident)
            sweep.check_setting(s)
            _check_metrics(s, metrics)


def _check_metrics(setting: Setting, metrics: Sequence[str]) -> None:
    """``record`` returns every metric of ``metrics`` (abstract evaluation: nothing runs)."""
    if not metrics:
        return
    key = jax.random.key(0)
    truth = setting.example_truth()
    state = jax.eval_shape(
        lambda k: setting.estimator.init(setting.init(k, truth)), key)
    got = jax.eval_shape(setting.record, state, truth)
    missing = [m for m in metrics if m not in got]
    if missing:
        from dpjax.config import _either

        names = ", ".join(repr(m) for m in missing)
        raise ConfigError(
            f"setting {setting.key!r}: record, {sweep.describe_function(setting.record)}, "
            f"returns the metrics {', '.join(repr(k) for k in got)} but not {names}, which "
            f"summary.csv and the figure read; return {_either([repr(m) for m in missing])} "
            "too (the metrics besides 'error' are listed in Experiment(summary_extra=...))")


# --------------------------------------------------------------------------------------------
# The settings and their levels, checked before anything compiles
# --------------------------------------------------------------------------------------------


def _study_settings(experiment: Experiment, config: Config,
                    overrides: Mapping[str, Any] | None = None) -> list[Setting]:
    """``experiment.settings(config)`` as a list (one :class:`~dpjax.sweep.Setting` is
    accepted too); a settings function that raises, or returns anything but settings, is one
    :class:`ConfigError` naming it (and the ``--set`` values the configuration came from)."""
    fn = experiment.settings
    where = f"experiment {experiment.name}: settings, {sweep.describe_function(fn)}"
    given = _given(overrides)
    try:
        out = fn(config)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code: one line, not a traceback
        raise ConfigError(f"{where}, fails on this configuration{given}: "
                          f"{sweep._first_line(exc)}") from None
    if isinstance(out, Setting):
        return [out]
    try:
        items = list(out)
    except TypeError:
        items = None
    if items is None or not items or not all(isinstance(x, Setting) for x in items):
        got = type(out).__name__ if items is None or not items else (
            f"a list holding {type(next(x for x in items if not isinstance(x, Setting))).__name__}")
        raise ConfigError(f"{where}, returned {'nothing' if items == [] else got}; it must "
                          "return a dpjax.sweep.Setting or a list of them")
    return items


def _given(overrides: Mapping[str, Any] | None) -> str:
    """`` (--set a=1 --set b=2)``: the overrides a configuration came from, for a message."""
    if not overrides:
        return ""
    return " (" + " ".join(f"--set {k}={_show_value(v)}" for k, v in overrides.items()) + ")"


def _show_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_show_value(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _check_levels(experiment: Experiment, settings: Sequence[Setting],
                  overrides: Mapping[str, Any] | None = None) -> None:
    """Every level of every setting, through the checks a fit makes on its hyperparameters
    (:func:`dpjax._validate.check_hparams`: the budgets by name and the type's ``POSITIVE``
    fields; then the estimator's own ``check`` hook on ``n``, the level and the data's dtype),
    before anything compiles: a bad level is one :class:`ConfigError` naming the setting, the
    level, the key and its allowed range, and the ``--set`` it came from. A level key that no
    estimator of the study reads (nor ``experiment.level_columns`` lists) is refused, with a
    "did you mean" for a typo; a hyperparameter a level lacks likewise."""
    read = {f for s in settings for f in s.hparams_type._fields} | set(experiment.level_columns)
    for s in settings:
        fields = s.hparams_type._fields
        dtype = None
        for i, level in enumerate(s.levels):
            where = (f"setting {s.key!r}, level {i + 1} of {len(s.levels)} "
                     f"({_level_text(level)})")
            if not isinstance(level, Mapping):
                raise ConfigError(f"{where}: a level must be a dict of hyperparameter values; "
                                  f"got {type(level).__name__}")
            _check_level_keys(s, level, read, where)
            try:
                values = dict(zip(fields, map(np.float64,
                                              sweep.level_values(s.hparams_type, level))))
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{where}: every value must be a number ({exc})") from None
            hp = s.hparams_type(*(values[f] for f in fields))
            try:
                _validate.check_hparams(hp)
                if s.estimator.check is not None:
                    if dtype is None:
                        dtype = _data_dtype(s)
                    s.estimator.check(s.n, hp, dtype)
            except (ValueError, TypeError) as exc:
                message = re.sub(r"\bhparams\.(\w+)", r"level key \1", str(exc))
                named = re.search(r"level key (\w+)", message)
                bad = level.get(named.group(1)) if named else None
                raise ConfigError(f"{where}: {message}{_from_set(overrides, bad)}") from None


def _level_text(level: Any) -> str:
    """``epsilon=0.5, delta=0.001, eta=4``: a level as the user wrote it, for a message."""
    if not isinstance(level, Mapping):
        return repr(level)

    def show(v: Any) -> str:
        try:
            return f"{float(v):g}"
        except (TypeError, ValueError):
            return repr(v)

    return ", ".join(f"{k}={show(v)}" for k, v in level.items())


def _check_level_keys(s: Setting, level: Mapping[str, Any], read: set[str], where: str) -> None:
    from dpjax.config import _either, near

    fields = s.hparams_type._fields
    unknown = [k for k in level if k not in read]
    optional = sweep.derived_defaults(s.hparams_type)
    missing = [f for f in fields if f not in level and f not in optional]
    listing = f"{s.hparams_type.__name__}: {', '.join(fields)}"
    for key in unknown:
        close = near(str(key), fields)
        hint = f"did you mean {_either(close)}? " if close else ""
        raise ConfigError(
            f"{where}: level key {key!r} is read by no estimator of the study; {hint}"
            f"estimator {s.estimator.name} reads {listing} (a key meant as a column only is "
            "listed in Experiment(level_columns=...))")
    if missing:
        raise ConfigError(f"{where}: the level lacks {_either([repr(m) for m in missing])}; "
                          f"estimator {s.estimator.name} reads {listing}")


def _data_dtype(s: Setting) -> Any:
    """The dtype of the data ``simulate`` returns (abstract evaluation), which an estimator's
    ``check`` hook reads like a fit does."""
    truth = s.example_truth()
    block = jax.eval_shape(lambda k: s.simulate(k, s.plan.block_size, truth),
                           jax.random.key(0))
    return jax.numpy.result_type(*jax.tree_util.tree_leaves(block))


def _from_set(overrides: Mapping[str, Any] | None, value: Any) -> str:
    """`` (from --set KEY=VALUE)`` for the overrides whose values hold ``value``."""
    if not overrides or value is None:
        return ""
    try:
        target = float(value)
    except (TypeError, ValueError):
        return ""
    hits = []
    for key, given in overrides.items():
        items = given.split(",") if isinstance(given, str) else (
            list(given) if isinstance(given, (list, tuple)) else [given])
        for item in items:
            try:
                same = float(item.strip() if isinstance(item, str) else item) == target
            except (TypeError, ValueError):
                continue
            if same or (math.isnan(target) and math.isnan(float(item))):
                hits.append(f"--set {key}={_show_value(given)}")
                break
    return f" (from {' and '.join(hits)})" if hits else ""


def _check_out_dir(out: Path) -> None:
    """``--out`` must be a directory or creatable as one; checked before anything is computed."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a directory")
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: {probe} is not a writable directory")


def _make_out_dir(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot create the directory ({exc.strerror})") from None


def _level_columns(setting: Setting, level: Mapping[str, float]) -> dict[str, Any]:
    return {k: _as_given(v) for k, v in level.items()}


def _as_given(value: Any) -> float:
    """A level's value as the user wrote it: a float32 (or float16) number, e.g. a NumPy or
    JAX scalar, becomes the float64 of its shortest decimal (``0.001``, not the
    ``0.0010000000474974513`` of its binary value), so results.csv shows ``delta = 0.001``."""
    arr = np.asarray(value)
    if arr.dtype.kind == "f" and arr.dtype.itemsize < 8 and np.isfinite(arr).all():
        return float(np.format_float_positional(arr[()], unique=True, trim="-"))
    return float(value)


def run_experiment(
    experiment: Experiment,
    out_dir: str | os.PathLike,
    *,
    reps: int | None = None,
    seed: int = 0,
    overrides: Mapping[str, Any] | None = None,
    chunk_size: int | None = None,
    quick: bool = False,
    progress: bool = True,
    data_mode: str = "auto",
    memory_budget_gb: float | None = None,
    num_devices: int | None = None,
    source: Mapping[str, Any] | None = None,
    recompute: bool = False,
    on_invalid: str | None = None,
) -> StudyOutput:
    """Run an experiment and write its results files (see :mod:`dpjax.results`).

    Args:
        experiment: the experiment.
        out_dir: the output directory; rerunning the same command there resumes.
        reps: repetitions (default: the experiment's, or its ``quick_reps`` with ``quick``).
        seed: the study seed.
        overrides: ``--set`` values.
        chunk_size: repetitions per kernel call; default: as many as fit ``memory_budget_gb``.
        quick: apply the experiment's reduced configuration.
        progress: show a progress bar on stderr.
        data_mode: ``"auto"`` (stream batches inside the scan where the estimator allows it),
            ``"materialize"`` or ``"stream"``.
        memory_budget_gb: the memory budget of each device's share of a chunk
            (``--memory-budget``): without ``chunk_size``, each setting runs in chunks of as
            many repetitions as fit it
            (default: :func:`default_memory_budget_gb`).
        num_devices: devices to shard repetitions over (default: all local devices).
        source: where the experiment came from, recorded in ``config.json`` so that ``dpjax
            plot --out DIR`` can load it again (``{"file": PATH, "name": NAME}``, ``{"module":
            MODULE, "name": NAME}``; None: bundled with dpjax). ``dpjax run`` fills it in.
        recompute: compute again the settings whose stored results another program computed
            (``--recompute``; see below) instead of refusing them.
        on_invalid: ``"raise"`` or ``"clip"`` (``--on-invalid``; default: the experiment's
            :attr:`Experiment.on_invalid`, ``"raise"`` unless it says otherwise): the policy of
            a fit for bad records, applied to every repetition's simulated data. With
            ``"raise"`` a repetition whose data hold NaN or infinite entries stops the study
            (a :class:`ConfigError` naming the setting and the repetitions; nothing of its
            chunk is stored); with ``"clip"`` the estimators sanitise those entries inside
            their bounded statistics, as a fit with ``on_invalid="clip"`` does, and the run
            says so: ``results.csv`` and ``iterations.csv`` get a column ``nonfinite_data``
            (1 where the repetition's data held a NaN or infinite entry, else 0), ``summary.csv`` a
            column ``nonfinite_reps`` (how many of the level's repetitions had any), and a
            line on stderr names the settings concerned.

    A rerun in the same ``out_dir`` resumes, and a study grows there: with more repetitions,
    or more elements in a list setting (a grid of levels, e.g. ``eps_grid``, or of settings,
    e.g. ``n_grid``), every finished (setting, level, repetition) is read back exactly as it
    was and only the new ones are computed (the draws are keyed by them: see
    :mod:`dpjax.sweep`); a line on stderr says how many were reused and computed. Fewer
    repetitions or elements report only those asked for and keep the others' chunks for a
    later run. A change to anything else is refused, naming what differs.

    A stored result is reused only if the same program produced it: each setting's program
    (:func:`dpjax.sweep.program_fingerprint`: its traced computation, with the values of its
    constants, and its ledger code) is recorded with its chunks, and where it differs (an
    edited study file, estimator argument, ``init``, ``record`` or calibration, or another
    version of dpjax) the run stops before computing anything, with one line naming those
    settings, and touches no stored file; ``recompute=True`` computes them again there.

    A level repeated within a setting (``--set eps_grid=1,1``, or ``inf`` where the study
    appends the non-private limit itself) runs and counts once, with a note on stderr.
    """
    on_invalid = _validate.check_on_invalid(experiment.on_invalid if on_invalid is None
                                            else on_invalid)
    config = resolve_config(experiment, overrides, quick)
    reps = (experiment.quick_reps if quick else experiment.reps) if reps is None else reps
    if reps < 1:
        raise ConfigError(f"--reps must be >= 1; got {reps}")
    if not 0 <= seed < 2**63:
        raise ConfigError(f"--seed must be an integer in [0, 2^63); got {seed}")
    if chunk_size is not None and chunk_size < 1:
        raise ConfigError(f"--chunk-size must be >= 1; got {chunk_size}")
    if memory_budget_gb is None:
        memory_budget_gb = default_memory_budget_gb()
    if not memory_budget_gb > 0:
        raise ConfigError(f"--memory-budget must be > 0 (GB); got {memory_budget_gb}")
    out = Path(out_dir)
    _check_out_dir(out)
    t0 = time.perf_counter()
    with _compiles.tally() as compiles:  # JAX's compile events: programs and their seconds
        rows, iter_rows, by, setting_meta, fp, traces = _run_settings(
            experiment, config, out, reps, seed, chunk_size, progress, data_mode,
            memory_budget_gb, num_devices, overrides, recompute, on_invalid,
        )
    timing = {"seconds": round(time.perf_counter() - t0, 3), **compiles.to_dict()}
    if jax.process_index() != 0:  # multi-host: process 0 holds the gathered results and writes
        return StudyOutput(out, [], [], [], {}, {})
    summary = results.summarise(rows, by, extra=experiment.summary_extra)
    if on_invalid == "clip":
        _count_nonfinite_reps(summary, rows, by)
    results.add_delivered(summary, by, experiment.name, setting_meta)  # the ledgers' budgets
    results.write_csv(out / "results.csv", rows)
    results.write_csv(out / "iterations.csv", iter_rows)
    results.write_csv(out / "summary.csv", summary)
    meta = {
        "experiment": experiment.name,
        "title": experiment.title,
        "config": config.to_dict(),
        "reps": reps,
        "seed": seed,
        "quick": quick,
        "fingerprint": fp,
        "on_invalid": on_invalid,
        **({"source": dict(source)} if source is not None else {}),
        "environment": results.environment(),
        "timing": timing,
        "settings": setting_meta,
    }
    results.write_json(out / "config.json", meta)
    if experiment.plot is not None:
        with plotting.figure_notes(results.delivered_notes(summary)):
            experiment.plot(iter_rows, summary, config, out / "figure.png")
    return StudyOutput(out, rows, iter_rows, summary, meta, traces)


def read_run(out_dir: str | os.PathLike) -> dict[str, Any]:
    """``config.json`` of a finished run in ``out_dir`` (it names the experiment and holds its
    configuration); a :class:`ConfigError` naming ``--out`` when there is none to read."""
    import json

    out = Path(out_dir)
    path = out / "config.json"
    if not out.is_dir():
        raise ConfigError(f"--out {out}: no such directory")
    if not path.is_file():
        raise ConfigError(f"--out {out}: no config.json there (not the folder of a finished "
                          "'dpjax run')")
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"--out {out}: cannot read config.json ({exc})") from None
    if (not isinstance(meta, dict) or not isinstance(meta.get("experiment"), str)
            or not isinstance(meta.get("config"), dict)):
        raise ConfigError(f"--out {out}: config.json names no experiment and configuration "
                          "(not written by 'dpjax run')")
    return meta


def replot(experiment: Experiment, out_dir: str | os.PathLike) -> Path:
    """Draw ``figure.png`` again from the CSV files of a finished run (no recomputation), with
    the configuration its ``config.json`` records. Raises :class:`ConfigError` when
    ``out_dir`` holds no finished run of ``experiment``."""
    out = Path(out_dir)
    meta = read_run(out)
    if meta["experiment"] != experiment.name:
        raise ConfigError(f"--out {out} holds a run of {meta['experiment']}, not "
                          f"{experiment.name} (its config.json says so); 'dpjax plot --out "
                          f"{out}' redraws it")
    if experiment.plot is None:
        raise ConfigError(f"experiment {experiment.name} has no figure")
    try:
        config = experiment.defaults.with_overrides(meta["config"], experiment=experiment.name)
    except ConfigError as exc:
        detail = str(exc).removeprefix("--set ")
        raise ConfigError(f"--out {out}: its config.json does not fit {experiment.name} as this "
                          f"version of dpjax defines it ({detail})") from None
    tables = []
    for name in ("iterations.csv", "summary.csv"):
        if not (out / name).is_file():
            raise ConfigError(f"--out {out}: {name} is missing; run the experiment again with "
                              "'dpjax run' to write it")
        tables.append(results.read_csv(out / name))
    with plotting.figure_notes(results.delivered_notes(tables[1])):
        experiment.plot(*tables, config, out / "figure.png")
    return out / "figure.png"


def _run_settings(experiment, config, out, reps, seed, chunk_size, progress, data_mode,
                  memory_budget_gb, num_devices, overrides=None, recompute=False,
                  on_invalid="raise"):
    settings = _study_settings(experiment, config, overrides)
    _check_levels(experiment, settings, overrides)
    keys = [s.key for s in settings]
    if len(set(keys)) != len(keys):
        raise ValueError(f"experiment {experiment.name!r} has duplicate setting keys")
    settings = _merge_repeated_levels(settings)
    fp, store_fp, grids = _fingerprints(experiment, config, seed, settings)
    _check_callbacks(settings, ("error", *experiment.summary_extra))
    _check_memory(settings)
    traces_seen: dict[Any, str] = {}  # one trace per function and shape
    fingerprints = {s.key: sweep.program_fingerprint(s, traces_seen) for s in settings}
    _make_out_dir(out)
    # refuses another configuration's directory, naming the settings that differ, and
    # results another program computed (before touching a file), unless recompute
    store = results.ChunkStore(out, store_fp, identity={
        "experiment": experiment.name, "config": config.to_dict(), "seed": seed},
        growable=grids, programs=fingerprints, recompute=recompute)
    store.check_settings({s.key: _signature(s) for s in settings})
    show = progress and jax.process_index() == 0
    bar = sweep.default_progress(reps * len(settings), experiment.name) if show else None
    traces: dict[str, dict[str, np.ndarray]] = {}
    setting_meta = []
    programs = sweep.plan_programs(settings)  # settings that share a compiled program
    try:
        for s in settings:
            traces[s.key], meta = _run_one(
                s, store, reps=reps, seed=seed, chunk_size=chunk_size,
                memory_budget_gb=memory_budget_gb, num_devices=num_devices,
                data_mode=data_mode, progress=bar.update if bar is not None else None,
                on_invalid=on_invalid, program=programs.get(s.key))
            setting_meta.append(meta | {"fingerprint": fingerprints[s.key]["program"]})
    finally:
        if bar is not None:
            bar.close()
    if store.reused and jax.process_index() == 0:
        results._report(f"dpjax: {out}: reused {store.reused} finished (setting, level, "
                        f"repetition) results, computed {store.computed}")
    if jax.process_index() != 0:
        return [], [], [], setting_meta, fp, traces
    rows, iter_rows = _tidy(experiment.name, settings, traces)
    level_keys = sorted({k for s in settings for lv in s.levels for k in lv})
    col_keys = list(dict.fromkeys(k for s in settings for k in s.columns))
    by = ["experiment", *col_keys, *level_keys]
    return rows, iter_rows, by, setting_meta, fp, traces


def _fingerprints(experiment, config, seed, settings) -> tuple[str, str, list[str]]:
    """``(fp, store_fp, grids)``: config.json's fingerprint (everything that changes results,
    not reps or chunking, which only add or split work; ``dpjax run --all`` compares it with
    the committed run's), the chunk store's (the same, except what a study may grow: the list
    settings, ``grids``, whether grids of levels or of settings). Each stored chunk names its
    setting, its repetitions and its levels, and ``check_settings`` refuses a setting whose
    shape changed, so a grown study reuses exactly the (setting, level, repetition) results it
    shares with the stored ones."""
    fp = results.fingerprint(
        {"experiment": experiment.name, "config": config.to_dict(), "seed": seed, "format": 2,
         "settings": [[s.key, s.columns, list(s.levels)] for s in settings]}
    )
    grids = [f.name for f in config.fields() if f.is_list]
    store_fp = results.fingerprint(
        {"experiment": experiment.name, "seed": seed, "format": 3,
         "config": {k: v for k, v in config.to_dict().items() if k not in grids}}
    )
    return fp, store_fp, grids


def _run_one(s: Setting, store: Any, *, reps: int, seed: int, chunk_size: int | None,
             memory_budget_gb: float | None, num_devices: int | None, data_mode: str,
             progress: Any, on_invalid: str = "raise", program: Any = None
             ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """One setting through the sweep: its metrics and its entry of config.json's settings
    (with every level's ledger, and the program it ran: its id and whether this run compiled
    it). A level the ledger refuses discards the setting's chunks."""
    # the sweep plans the run once: data mode, chunk size, and the chunks (stored ones keep
    # their ranges, new repetitions are cut into chunks that fit the budget)
    plan = sweep.plan_run(s, reps, stored=store.ranges(s.key), chunk_size=chunk_size,
                          memory_budget_gb=memory_budget_gb, num_devices=num_devices,
                          data_mode=data_mode, program=program)
    store.prune(s.key, plan.bounds)
    store.set_bounds(s.key, plan.bounds)
    t0 = time.perf_counter()
    ran: dict[str, Any] = {}
    with _compiles.tally() as compiles:
        trace = sweep.run_setting(s, reps=reps, seed=seed, plan=plan, store=store,
                                  progress=progress, num_devices=num_devices,
                                  on_invalid=on_invalid, program=program, programs=ran)
    peak = _memory.process_peak_gb()  # the process's peak so far (a jump: this setting's)
    metrics, events = sweep.split_events(trace, sweep.event_structure(s))
    if on_invalid == "clip" and sweep.NONFINITE_DATA in trace:
        metrics[NONFINITE_COLUMN] = _nonfinite_column(s, trace[sweep.NONFINITE_DATA], metrics)
    try:
        levels = [{"hparams": dict(lv), "ledger": _ledger(s, lv, li, events)}
                  for li, lv in enumerate(s.levels)]
    except PrivacyBudgetError:  # nothing is returned: the chunks go too
        if jax.process_index() == 0:
            store.discard(s.key)
        raise
    return metrics, {"key": s.key, "columns": s.columns, "chunk_size": plan.chunk_size,
                     "data_mode": plan.data_mode, **ran,
                     "seconds": round(time.perf_counter() - t0, 3), **compiles.to_dict(),
                     **({} if peak is None else {"peak_rss_gb": peak}),
                     "levels": levels}


NONFINITE_COLUMN = "nonfinite_data"  # results.csv, with on_invalid="clip"
NONFINITE_REPS = "nonfinite_reps"  # summary.csv, with on_invalid="clip"


def _nonfinite_column(s: Setting, counts: np.ndarray, metrics: Mapping[str, np.ndarray]
                      ) -> np.ndarray:
    """The data check of each repetition (1: its data held a NaN or infinite entry) as a
    metric (axes ``(reps, L, iterations + 1)``), and a line on stderr where any did."""
    per_rep = np.asarray(counts)[:, 0].astype(np.int64)
    bad = int(np.count_nonzero(per_rep))
    if bad and jax.process_index() == 0:
        results._report(
            f"dpjax: setting {s.key!r}: {bad} of {per_rep.size} repetitions had NaN or "
            "infinite entries in their simulated data; with on_invalid='clip' "
            "the estimators sanitised them, as a fit with on_invalid='clip' does (results.csv: "
            f"{NONFINITE_COLUMN}; summary.csv: {NONFINITE_REPS})")
    shape = next(iter(metrics.values())).shape[:3]
    return np.broadcast_to(per_rep[:, None, None], shape).astype(np.float64)


def _count_nonfinite_reps(summary: Sequence[dict[str, Any]], rows: Sequence[Mapping[str, Any]],
                          by: Sequence[str]) -> None:
    """Add ``nonfinite_reps`` to every summary row: its repetitions with non-finite data."""
    counts: dict[tuple, int] = {}
    for r in rows:
        k = tuple(r[c] for c in by)
        counts[k] = counts.get(k, 0) + int(float(r.get(NONFINITE_COLUMN, 0)) > 0)
    for row in summary:
        row[NONFINITE_REPS] = counts.get(tuple(row[c] for c in by), 0)


def _merge_repeated_levels(settings: Sequence[Setting]) -> list[Setting]:
    """Each setting with every level once: a level asked for twice (``--set eps_grid=1,1``,
    or ``inf`` beside a study that appends the non-private limit itself) would run the same
    draws twice and count them twice in ``summary.csv`` (a count of 2R from R repetitions,
    standard errors too small). Merged, with one note on stderr."""
    out, repeated = [], {}
    for s in settings:
        first: dict[str, dict[str, float]] = {}
        times: dict[str, int] = {}
        for lv in s.levels:
            label = sweep.level_label(lv)
            first.setdefault(label, lv)
            times[label] = times.get(label, 0) + 1
        if len(first) == len(s.levels):
            out.append(s)
            continue
        out.append(dataclasses.replace(s, levels=tuple(first.values())))
        for label, k in times.items():
            if k > 1:
                repeated.setdefault(f"{_show_level(first[label])} ({k} times)", []).append(s.key)
    if repeated and jax.process_index() == 0:
        what = "; ".join(f"{level} in {_names(keys)}" for level, keys in repeated.items())
        results._report(f"dpjax: note: a repeated level runs and counts once: {what}")
    return out


def _names(keys: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(repr(k) for k in keys[:limit])
    return f"setting {shown}" if len(keys) == 1 else (
        f"settings {shown}" + (f" and {len(keys) - limit} more" if len(keys) > limit else ""))


def _show_level(level: Mapping[str, float]) -> str:
    """The privacy part of a level for a message: ``epsilon=1`` (the swept budget keys, or
    every key when it has none)."""
    keys = [k for k in level if _BUDGET.match(k)] or list(level)
    return ", ".join(f"{k}={float(level[k]):g}" for k in keys)


def _signature(s: Setting) -> dict[str, Any]:
    """What fixes a setting's results besides its levels and repetitions (checked against
    the stored chunks of a setting with the same key)."""
    truth = ("drawn per repetition" if s.draw_truth is not None
             else results.fingerprint(np.asarray(s.truth, np.float64).tolist()))
    return {"columns": s.columns, "estimator": s.estimator.name,
            "steps": s.estimator.num_steps, "batching": s.estimator.batching,
            "plan": [s.plan.num_blocks, s.plan.block_size], "n": s.n, "truth": truth,
            "hparams": list(s.hparams_type._fields), "data_group": s.data_group,
            "final_only": s.final_only}


def _ledger(setting: Setting, level: Mapping[str, float], index: int,
            events: Any) -> dict[str, Any] | None:
    """The ledger of level ``index``, composed from the privacy events the runs drew (axes
    ``(reps, L, T)``). Repetitions whose events coincide share one ledger; where they differ
    (a sensitivity that depends on the public iterate), the weakest guarantee is reported."""
    fn = setting.estimator.ledger
    if fn is None:
        return None
    hp = setting.hparams_type(
        *(np.asarray(v, np.float64) for v in sweep.level_values(setting.hparams_type, level))
    )
    leaves, treedef = jax.tree_util.tree_flatten(events)
    rows = np.concatenate([np.asarray(x[:, index], np.float64).reshape(x.shape[0], -1)
                           for x in leaves], axis=1)
    _, first = np.unique(rows, axis=0, return_index=True)
    ledgers = [fn(setting.n, hp, jax.tree_util.tree_unflatten(
        treedef, [np.asarray(x[r, index]) for x in leaves])) for r in sorted(first)]
    worst = max(ledgers, key=lambda led: led.approx_dp.epsilon)
    check_delivers(worst)
    out = worst.to_dict()
    if len(ledgers) > 1:
        out["notes"].append(f"the repetitions drew {len(ledgers)} different event sequences "
                            "(iterate-dependent sensitivities): the weakest guarantee is shown")
    return out


def _tidy(name: str, settings: Sequence[Setting], traces: Mapping[str, Mapping[str, np.ndarray]]):
    rows, iter_rows = [], []
    for s in settings:
        metrics = traces[s.key]
        first = next(iter(metrics.values()))
        R, L, T1 = first.shape[:3]
        for li, level in enumerate(s.levels):
            base = {"experiment": name} | dict(s.columns) | _level_columns(s, level)
            for r in range(R):
                rows.append(
                    base | {"rep": r, "iterations": T1 - 1}
                    | {m: float(v[r, li, -1]) for m, v in metrics.items()}
                )
                for t in range(T1):
                    iter_rows.append(
                        base | {"rep": r, "iteration": t}
                        | {m: float(v[r, li, t]) for m, v in metrics.items()}
                    )
    return rows, iter_rows
