"""The ``dpjax`` command.

``dpjax list [my_study.py]``        the experiments (bundled, and installed packages'), or
                                    those a study file or module defines
``dpjax run NAME --out DIR [...]``  run one (resumable; see ``dpjax run --help``); NAME is a
                                    bundled experiment, a study file of your own
                                    (``my_study.py``, ``my_study.py:NAME``), a module
                                    (``package.module:NAME``) or an installed package's
                                    experiment (entry-point group ``dpjax.experiments``)
``dpjax run --all --out DIR``       every committed report again, compared (dpjax.reproduce)
``dpjax plot [NAME] --out DIR``     redraw the figure of a finished run (NAME: a bundled
                                    experiment, a file or module, or the name of the study
                                    whose source DIR/config.json records)
``dpjax demo``                      a short example fit with its privacy ledger
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap

from dpjax._validate import OneLineParser as _Parser
from dpjax._validate import UsageError, fail

__all__ = ["UsageError", "enable_compile_cache", "fail", "main"]


def enable_compile_cache(cache_dir: str | None = None) -> str:
    """Switch on JAX's persistent compilation cache, so a second run of the same study (same
    shapes, same XLA flags) loads its kernels instead of compiling them again.

    The directory is ``cache_dir``, else ``$JAX_COMPILATION_CACHE_DIR`` if set, else
    ``$XDG_CACHE_HOME/dpjax/jax`` (``~/.cache/dpjax/jax``). Every kernel is cached, however
    quick its compile (the default threshold of one second would skip the small ones).
    Returns the directory.
    """
    import jax

    cache_dir = cache_dir or compile_cache_dir()
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return cache_dir


def compile_cache_dir() -> str:
    """The persistent compilation cache's directory: ``$JAX_COMPILATION_CACHE_DIR`` if set,
    else ``$XDG_CACHE_HOME/dpjax/jax`` (``~/.cache/dpjax/jax``)."""
    import os

    cache_dir = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if not cache_dir:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                 ".cache")
        cache_dir = os.path.join(base, "dpjax", "jax")
    return cache_dir


def set_cpu_devices(count: int = 0) -> int | None:
    """Ask JAX for ``count`` CPU devices (0: one per core) before it starts, so that
    ``dpjax run --cpu-devices`` shards repetitions over them (XLA runs one repetition's
    row-blocked products on one thread). Leaves JAX alone if the user chose a device count
    (``XLA_FLAGS=--xla_force_host_platform_device_count``, ``JAX_NUM_CPU_DEVICES``) or JAX has
    already started. Returns the count set, else None."""
    import os

    import jax

    if ("xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
            or "JAX_NUM_CPU_DEVICES" in os.environ):
        return None
    if count <= 0:
        count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
    try:
        jax.config.update("jax_num_cpu_devices", int(count))
    except RuntimeError:  # backends already initialised (e.g. cli.main called in a session)
        return None
    return int(count)


def _experiments():
    try:
        import dpjax.experiments as experiments
    except ImportError as exc:  # pragma: no cover - dpjax.experiments ships with the package
        raise SystemExit(f"dpjax: the experiments package is not importable: {exc}") from exc
    return experiments


def _registry():
    return _experiments().registry()


def _resolve(name: str):
    """``(experiment, source)`` that ``dpjax run NAME`` names (see :mod:`dpjax._sources`), or
    None."""
    from dpjax import _sources

    if name.isidentifier():  # a bundled one: its own module first (one import), else any
        exp = _experiments().find(name, fallback=False) or _registry().get(name)
        if exp is not None:
            return exp, None
    return _sources.resolve(name, bundled=False)


def _find(name: str):
    """The experiment ``name`` names (bundled, a file, a module, a package's), or None."""
    found = _resolve(name)
    return None if found is None else found[0]


def _unknown_experiment(name: str) -> str:
    from dpjax import _sources

    names = sorted({*_registry(), *(e.name for e, _ in _sources.plugin_experiments())})
    from dpjax.config import _either, near

    close = near(name, names)
    if close:

        hint = f"did you mean {_either(close)}? ('dpjax list' shows them all)"
    else:
        hint = (f"'dpjax list' shows the {len(names)} experiments; a study of your own runs "
                "as 'dpjax run my_study.py' or 'dpjax run package.module:NAME'")
    return f"unknown experiment {name!r}; {hint}"


# options of 'dpjax run' that take a value (to find NAME among the arguments)
_RUN_VALUED = ("--out", "--reps", "--seed", "--set", "--chunk-size", "--memory-budget",
               "--cpu-devices", "--data-mode")


def _parse_set(items: list[str]) -> dict[str, str]:
    from dpjax.study import ConfigError

    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set: expected KEY=VALUE; got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _run_name(argv: list[str]) -> str | None:
    """NAME among the arguments of ``dpjax run`` (the first that is no option or value)."""
    args = iter(argv[1:])
    for a in args:
        if a in _RUN_VALUED:
            next(args, None)
        elif not a.startswith("-"):
            return a
    return None


def _experiment_help(argv: list[str]) -> str | None:
    """For ``dpjax run NAME --help``: the settings of experiment NAME (else None)."""
    if argv[:1] != ["run"] or not ({"-h", "--help"} & set(argv)):
        return None
    name = _run_name(argv)
    exp = _find(name) if name is not None else None
    return exp.help_text() if exp is not None else None


class _Suggesting(_Parser):
    """One-line argparse errors with a "did you mean" for a mistyped option or subcommand
    (argparse suggests none before Python 3.14; dpjax supports 3.10+)."""

    def error(self, message: str):
        super().error(message + _suggestion(self, message))


def _suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    from dpjax.config import _either, near

    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:
        options = re.findall(r"'([^']*)'", choice.group(2)) or [
            c.strip() for c in choice.group(2).split(",")]
        close = near(choice.group(1), options)
        return f"; did you mean {_either(close)}?" if close else ""
    unknown = re.search(r"unrecognized arguments: (.*)", message)
    if not unknown:
        return ""
    known: set[str] = set(parser._option_string_actions)
    for action in parser._actions:  # the subcommands' options too
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                known |= set(sub._option_string_actions)
    hints = []
    for arg in unknown.group(1).split():
        if arg.startswith("--"):
            close = near(arg.split("=", 1)[0], sorted(known))
            if close:
                hints.append(f"did you mean {_either(close)} (not {arg})?")
    return "; " + " ".join(hints) if hints else ""


def main(argv: list[str] | None = None) -> int:
    """Run the ``dpjax`` command; returns the exit status (2: the user's mistake, reported as
    one line ``dpjax: error: ...`` on stderr, with no traceback)."""
    from dpjax._validate import ConfigError

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["_run-one-study"]:  # dpjax.reproduce's child process (run --all)
        return _run_one_study(argv[1:])
    try:
        return _main(argv)
    except (UsageError, ConfigError) as exc:
        return fail(exc)


def _run_one_study(argv: list[str]) -> int:
    from dpjax import reproduce

    def setup(cpu_devices: int, cache_dir: str | None = None) -> None:
        set_cpu_devices(cpu_devices)
        enable_compile_cache(cache_dir)

    return reproduce.child(argv, _registry(), setup)


def _build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = _Suggesting(prog="dpjax", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    lister = sub.add_parser("list", help="list the experiments (bundled and installed "
                            "packages'), or those of a study file or module")
    lister.add_argument("source", nargs="?", default=None,
                        help="a study file (my_study.py) or module (package.module): list the "
                        "experiments it defines")
    run = sub.add_parser("run", help="run an experiment and write its results files",
                         epilog=_experiment_help(argv),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("name", help="experiment: a name 'dpjax list' shows; a study file of "
                     "your own, my_study.py (its one Experiment) or my_study.py:NAME; or a "
                     "module, package.module:NAME. 'dpjax run NAME --help' lists its "
                     "settings; 'dpjax run --all --out DIR' runs every committed report again "
                     "('dpjax run --all --help')")
    run.add_argument("--out", required=True, help="output directory (a rerun resumes there)")
    run.add_argument("--reps", type=int, default=None, help="number of repetitions")
    run.add_argument("--seed", type=int, default=0, help="study seed, >= 0 (default 0)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a configuration value (repeatable; 'dpjax run NAME "
                     "--help' lists the settings of NAME)")
    run.add_argument("--chunk-size", type=int, default=None,
                     help="repetitions per compiled call (default: as many as fit the memory "
                     "budget)")
    run.add_argument("--memory-budget", type=float, default=None, metavar="GB",
                     help="memory budget of each device's share of a chunk of repetitions, in "
                     "GB (default: from the device's memory, an eighth of the machine's on "
                     "CPU shared by its devices, a quarter of an accelerator's); ignored with "
                     "--chunk-size")
    run.add_argument("--cpu-devices", type=int, default=0, metavar="N",
                     help="shard repetitions over N JAX CPU devices (default 0: one per core; "
                     "1: JAX's single device). An XLA_FLAGS or JAX_NUM_CPU_DEVICES device "
                     "count wins")
    run.add_argument("--quick", action="store_true", help="a reduced run (under a minute)")
    run.add_argument("--data-mode", choices=["auto", "materialize", "stream"], default="auto",
                     help="generate each batch inside the scan ('stream') or all data first")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--recompute", action="store_true",
                     help="compute again the settings whose results in --out another program "
                     "computed (an edited study file, another dpjax); without it such a run "
                     "stops and names them")
    run.add_argument("--on-invalid", choices=["raise", "clip"], default=None,
                     help="a repetition whose simulated data hold NaN or inf: stop ('raise', "
                     "the default unless the experiment says otherwise) or let the "
                     "estimators sanitise it as a fit with on_invalid='clip' does, counted "
                     "in results.csv ('clip')")
    run.add_argument("--no-compile-cache", action="store_true",
                     help="do not use JAX's persistent compilation cache (default: on, in "
                     "$JAX_COMPILATION_CACHE_DIR or ~/.cache/dpjax/jax)")
    replot = sub.add_parser("plot", help="redraw figure.png of a finished run from its CSV files")
    replot.add_argument("name", nargs="?", default=None,
                        help="the experiment (optional: DIR/config.json says which, and where "
                        "a study of your own came from; if given, it must agree: e.g. "
                        "my_study.py:NAME, for a study file that has moved)")
    replot.add_argument("--out", required=True, metavar="DIR",
                        help="the output directory of a finished 'dpjax run'")
    sub.add_parser("demo", help="fit one estimator and print its privacy ledger "
                   "('dpjax demo --help')")
    return parser


def _main(argv: list[str]) -> int:
    from dpjax._validate import ConfigError

    if argv[:1] == ["demo"]:  # the demo parses its own options (and its own --help)
        from dpjax import demo as demo_mod

        return demo_mod.main(argv[1:])
    if argv[:1] == ["run"] and {"--all", "--compare-only"} & set(argv):
        return _run_all(_all_parser().parse_args(argv[1:]))
    args = _build_parser(argv).parse_args(argv)
    if args.command == "list":
        return _list() if args.source is None else _list_source(args.source)
    if args.command == "plot":
        return _plot(args.name, args.out)

    if args.cpu_devices < 0:
        raise ConfigError(f"--cpu-devices must be >= 0 (0: one per core); got "
                          f"{args.cpu_devices}")
    if args.seed < 0:
        raise ConfigError(f"--seed must be >= 0; got {args.seed}")
    found = _resolve(args.name)
    if found is None:
        raise ConfigError(_unknown_experiment(args.name))
    exp, source = found
    overrides = _parse_set(args.set)
    set_cpu_devices(args.cpu_devices)
    if args.no_compile_cache:  # also overrides JAX_COMPILATION_CACHE_DIR, which jax reads
        import jax

        jax.config.update("jax_enable_compilation_cache", False)
    else:
        enable_compile_cache()
    from dpjax.study import run_experiment

    out = run_experiment(
        exp, args.out, reps=args.reps, seed=args.seed,
        overrides=overrides, chunk_size=args.chunk_size, quick=args.quick,
        progress=not args.no_progress, data_mode=args.data_mode,
        memory_budget_gb=args.memory_budget, source=source,
        recompute=args.recompute, on_invalid=args.on_invalid,
    )
    print(f"wrote {out.out_dir}/results.csv, summary.csv, iterations.csv, config.json"
          + (", figure.png" if exp.plot is not None else ""))
    from dpjax.results import delivered_notes

    for note in delivered_notes(out.summary):  # a paper's calibration: what it really spends
        print(f"note: by the privacy ledger, {note} (summary.csv: epsilon_delivered)")
    return 0


def _all_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="dpjax run --all", description="Run every experiment that has a committed "
                "report, at that report's settings, each in DIR/NAME (a rerun resumes), then "
                "compare each DIR/NAME/summary.csv with the committed one (DIR/comparison.csv). "
                "Exit status 1 only if a study fails.")
    p.add_argument("--all", action="store_true", help="(this command)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--only", default=None, metavar="NAME,NAME", help="these experiments only")
    p.add_argument("--compare-only", action="store_true",
                   help="only compare the summaries already in DIR with the committed ones")
    p.add_argument("--reports", default=None, metavar="DIR",
                   help="the committed reports (default: experiments/reports)")
    p.add_argument("--z", type=float, default=3.0, help="a mean moved if it differs by more "
                   "than z standard errors plus float tolerance (default 3)")
    p.add_argument("--memory-budget", type=float, default=None, metavar="GB")
    p.add_argument("--cpu-devices", type=int, default=0, metavar="N")
    p.add_argument("--data-mode", choices=["auto", "materialize", "stream"], default="auto")
    p.add_argument("--no-progress", action="store_true", help="no per-study progress bar")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="studies run at once, each in its own process, sharing one "
                   "compilation cache (default: half the cores, at most 8; 1 on 2 cores)")
    return p


def _run_all(args: argparse.Namespace) -> int:
    """``dpjax run --all --out DIR [--only A,B] [--compare-only]`` (see dpjax.reproduce)."""
    import os

    from dpjax import reproduce

    reports = args.reports or os.path.join(os.path.dirname(_experiments().__file__), "reports")
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    from dpjax._validate import ConfigError

    jobs = reproduce.default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1; got {jobs}")
    # every study runs in its own process (see dpjax.reproduce._run_isolated), which sets up
    # its JAX CPU devices and the compilation cache they all share
    return reproduce.reproduce(_registry(), args.out, reports, only=only,
                               compare_only=args.compare_only, z=args.z,
                               progress=not args.no_progress, isolate=True,
                               cpu_devices=args.cpu_devices, data_mode=args.data_mode,
                               memory_budget_gb=args.memory_budget, jobs=jobs,
                               compile_cache_dir=compile_cache_dir())


def _plot(name: str | None, out_dir: str) -> int:
    """``dpjax plot [NAME] --out DIR``: the experiment is the one DIR/config.json names."""
    from dpjax import _sources
    from dpjax._validate import ConfigError
    from dpjax.study import read_run, replot

    given = None
    if name is not None:
        given = _find(name)
        if given is None:
            given = _recorded(name, out_dir)
        if given is None:
            raise ConfigError(_unknown_experiment(name))
    meta = read_run(out_dir)
    saved, source = meta["experiment"], meta.get("source")
    if given is not None and given.name != saved:
        raise ConfigError(f"--out {out_dir} holds a run of {saved}, not {given.name} (its "
                          f"config.json says so); 'dpjax plot --out {out_dir}' redraws it")
    exp = given
    if exp is None and isinstance(source, dict):
        exp = _sources.load_source(source, f"--out {out_dir}")
    if exp is None:
        exp = _find(saved) if saved.isidentifier() else None
    if exp is None:
        raise ConfigError(f"--out {out_dir}: its config.json names experiment {saved!r}, "
                          "which is neither bundled with dpjax nor offered by an installed "
                          "package, and records no file or module it came from; name it: "
                          f"'dpjax plot my_study.py:{saved} --out {out_dir}'")
    print(f"wrote {replot(exp, out_dir)}")
    return 0


def _recorded(name: str, out_dir: str):
    """The experiment ``name`` loaded from where DIR/config.json says it came from (a study
    file or module), when the run there is one of ``name``; else None."""
    from dpjax import _sources
    from dpjax._validate import ConfigError
    from dpjax.study import read_run

    try:
        meta = read_run(out_dir)
    except ConfigError:
        return None
    source = meta.get("source")
    if meta["experiment"] != name or not isinstance(source, dict):
        return None
    return _sources.load_source(source, f"--out {out_dir}")


_REPORT = re.compile(r"experiments/reports/(\w+)\.md")


def _list() -> int:
    """``dpjax list``: the bundled experiments, then those of installed packages (entry-point
    group ``dpjax.experiments``) with the package each comes from."""
    from dpjax import _sources

    reg = _registry()
    extra = [(e, s) for e, s in _sources.plugin_experiments() if e.name not in reg]
    broken = [(ep, v) for ep, v in _sources.plugins() if isinstance(v, Exception)]
    width = max(len(n) for n in [*reg, *(e.name for e, _ in extra)])

    def show(name: str, title: str, description: str) -> None:
        print(f"{name:<{width}}  {title}")
        if description:
            # the reports are files of the repository (and pages of the docs site), not of
            # the installed package
            text = _REPORT.sub(r"the \1 report (experiments/reports/\1.md in the dpjax "
                               "repository, and on its docs site)", description)
            print(textwrap.indent(textwrap.fill(text, 88), " " * (width + 2)))

    for name, exp in sorted(reg.items()):
        show(name, exp.title, exp.description)
    if extra or broken:
        print("\nfrom installed packages (entry-point group dpjax.experiments):")
    for exp, src in sorted(extra, key=lambda x: x[0].name):
        show(exp.name, f"{exp.title} [package {src['distribution']}, entry point "
             f"{src['entry_point']}]", exp.description)
    for ep, exc in broken:
        print(f"{ep.name:<{width}}  (entry point {ep.value} could not be loaded: "
              f"{type(exc).__name__}: {exc})")
    print("\na study of your own: dpjax run my_study.py --out DIR (or my_study.py:NAME, "
          "package.module:NAME)")
    return 0


def _list_source(spec: str) -> int:
    """``dpjax list my_study.py`` (or ``package.module``): the experiments that file or module
    defines, each with the command that runs it."""
    import os

    from dpjax import _sources

    base, found = _sources.experiments_in(spec)
    width = max(len(exp.name) for exp in found.values())
    for attr, exp in found.items():
        named = "" if attr == exp.name or attr.startswith("EXPERIMENTS[") else f" [{attr}]"
        print(f"{exp.name:<{width}}  {exp.title}{named}")
        if exp.description:
            print(textwrap.indent(textwrap.fill(exp.description, 88), " " * (width + 2)))
    is_file = base.endswith(".py") or "/" in base or os.sep in base
    one = next(iter(found.values())).name
    # 'dpjax run' reads a dotted or a NAME-suffixed spec as a module, anything else as a file
    run = f"{base}:NAME" if len(found) > 1 else base if is_file else f"{base}:{one}"
    print(f"\nrun one: dpjax run {run} --out DIR ('dpjax run {run} --help' lists its settings)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
