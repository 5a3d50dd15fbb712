"""Where an experiment comes from: bundled with dpjax, a user's file, a module, or a plugin.

``dpjax run`` (and ``dpjax plot``) accept, besides a bundled experiment's name:

* ``my_study.py``: the one :class:`~dpjax.study.Experiment` that file defines, in a
  module-level ``EXPERIMENTS`` list (as the bundled modules have) or as module-level
  ``Experiment`` instances; ``my_study.py:NAME`` picks one of several by its ``name`` (or the
  attribute's name). The file may live anywhere; while it is loaded its folder is on
  ``sys.path``, so it can import the files beside it.
* ``package.module:NAME`` (or ``package.module``: its one experiment): an importable module;
  the current directory is on the path.
* an experiment that an installed package offers through the entry-point group
  ``dpjax.experiments`` (each entry point loads an ``Experiment`` or a list of them), e.g. in
  its ``pyproject.toml``::

      [project.entry-points."dpjax.experiments"]
      my_studies = "my_package.studies:EXPERIMENTS"

Each is resolved to ``(experiment, source)``, where ``source`` is what ``config.json`` records
(``None`` for a bundled experiment; ``{"file": ..., "name": ...}``, ``{"module": ...,
"name": ...}`` or ``{"entry_point": ..., "distribution": ..., "name": ...}`` otherwise), so that
``dpjax plot --out DIR`` loads the experiment again from where it came.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dpjax._validate import ConfigError

GROUP = "dpjax.experiments"

__all__ = ["GROUP", "experiments_in", "load_source", "plugins", "resolve"]


def _bundled():
    import dpjax.experiments as experiments

    return experiments


def _is_experiment(obj: Any) -> bool:
    from dpjax.study import Experiment

    return isinstance(obj, Experiment)


def experiments_of(module: Any) -> dict[str, Any]:
    """``{attribute or list position: Experiment}`` a module defines: its ``EXPERIMENTS`` list
    if it has one, else its module-level ``Experiment`` instances (in definition order, each
    once)."""
    listed = getattr(module, "EXPERIMENTS", None)
    if listed is not None:
        items = list(listed) if isinstance(listed, (list, tuple)) else [listed]
        bad = [x for x in items if not _is_experiment(x)]
        if bad:
            raise ConfigError(f"{_where(module)}: EXPERIMENTS holds {type(bad[0]).__name__}, "
                              "not a dpjax.study.Experiment")
        return {f"EXPERIMENTS[{i}]": x for i, x in enumerate(items)}
    out: dict[str, Any] = {}
    seen: set[int] = set()
    for attr, value in vars(module).items():
        if _is_experiment(value) and id(value) not in seen:
            seen.add(id(value))
            out[attr] = value
    return out


def _where(module: Any) -> str:
    return getattr(module, "__file__", None) or module.__name__


def _pick(module: Any, name: str | None, spec: str, base: str) -> Any:
    found = experiments_of(module)
    if not found:
        raise ConfigError(f"{spec}: defines no experiment (a module-level dpjax.study."
                          "Experiment, or a list of them named EXPERIMENTS)")
    if name is None:
        if len(found) == 1:
            return next(iter(found.values()))
        names = ", ".join(e.name for e in found.values())
        raise ConfigError(f"{spec} defines {len(found)} experiments ({names}); choose one "
                          f"with {base}:NAME")
    for attr, exp in found.items():
        if exp.name == name or attr == name:
            return exp
    for attr, value in vars(module).items():  # EXPERIMENTS given, but named by attribute
        if attr == name and _is_experiment(value):
            return value
    from dpjax.config import _either, near

    names = [e.name for e in found.values()]
    close = near(name, names)
    hint = f"did you mean {_either(close)}?" if close else f"it defines {', '.join(names)}"
    raise ConfigError(f"{base} has no experiment named {name!r}; {hint}")


@contextlib.contextmanager
def _on_path(folder: str) -> Iterator[None]:
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)


def _load_file(path: Path) -> Any:
    """Import the file at ``path`` as a module of its own (once per path and content)."""
    path = path.resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    modname = f"_dpjax_study_{path.stem if path.stem.isidentifier() else 'file'}_{digest}"
    mtime = path.stat().st_mtime_ns
    old = sys.modules.get(modname)
    if old is not None and getattr(old, "__dpjax_mtime__", None) == mtime:
        return old
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path}: cannot be loaded as a Python file")
    module = importlib.util.module_from_spec(spec)
    module.__dpjax_mtime__ = mtime
    sys.modules[modname] = module  # dataclasses look their module up while the file runs
    try:
        with _on_path(str(path.parent)):
            spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(modname, None)
        if isinstance(exc, Exception):
            raise ConfigError(_load_error(path, exc)) from None
        raise
    return module


def _load_error(path: Path, exc: Exception) -> str:
    """``file:line: Kind: message`` of an error raised while a study file loads: where a
    syntax error is, or the line of the study file (the last one in the traceback) that
    raised."""
    if isinstance(exc, SyntaxError):
        where = f"{exc.filename or path}:{exc.lineno}" if exc.lineno else str(path)
        return f"{where}: {type(exc).__name__}: {exc.msg}"
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).resolve() == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    where = f"{path}:{line}" if line is not None else str(path)
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{where}: {type(exc).__name__}: {text} (while loading the study file)"


def _split(spec: str) -> tuple[str, str | None]:
    """``"a/b.py:NAME"`` -> ``("a/b.py", "NAME")``; ``"pkg.mod:NAME"`` likewise; else no name."""
    base, sep, name = spec.rpartition(":")
    if sep and base and name and ("/" not in name and "\\" not in name):
        return base, name
    return spec, None


def _from_file(spec: str) -> tuple[Any, dict[str, Any]]:
    base, name = _split(spec)
    path = Path(base).expanduser()
    if not path.is_file():
        raise ConfigError(f"{base}: no such file" + ("" if base.endswith(".py") else
                                                     " (a study file ends in .py)"))
    module = _load_file(path)
    exp = _pick(module, name, base, base)
    return exp, {"file": str(path.resolve()), "name": exp.name}


def _from_module(spec: str) -> tuple[Any, dict[str, Any]]:
    base, name = _split(spec)
    module = _import(base, spec)
    exp = _pick(module, name, spec, base)
    return exp, {"module": base, "name": exp.name}


def _import(base: str, spec: str) -> Any:
    """Import the module ``base`` (the current directory on the path)."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(base)
    except ModuleNotFoundError as exc:
        if exc.name is not None and base.startswith(exc.name):
            raise ConfigError(f"{spec}: no module named {exc.name!r} (on the Python path or "
                              "in the current directory)") from None
        raise ConfigError(f"{spec}: {type(exc).__name__}: {exc} (while importing the "
                          "module)") from None
    except SyntaxError as exc:
        raise ConfigError(_load_error(Path(exc.filename or base), exc)) from None
    except Exception as exc:  # noqa: BLE001 - the user's module: one line, not a traceback
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigError(f"{spec}: {type(exc).__name__}: {text} (while importing the "
                          "module)") from None
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(cwd)
    return module


def experiments_in(spec: str) -> tuple[str, dict[str, Any]]:
    """``(file or module, {attribute: Experiment})`` of what a study file (``my_study.py``) or
    module (``package.module``) defines, for ``dpjax list SPEC``; a one-line
    :class:`~dpjax.config.ConfigError` when it defines none or cannot be loaded."""
    base, _ = _split(spec)
    if base.endswith(".py") or os.sep in base or "/" in base:
        path = Path(base).expanduser()
        if not path.is_file():
            raise ConfigError(f"{base}: no such file" + ("" if base.endswith(".py") else
                                                         " (a study file ends in .py)"))
        module = _load_file(path)
    else:
        module = _import(base, spec)
    found = experiments_of(module)
    if not found:
        raise ConfigError(f"{base}: defines no experiment (a module-level dpjax.study."
                          "Experiment, or a list of them named EXPERIMENTS)")
    return base, found


def plugins() -> list[tuple[Any, Any]]:
    """``[(entry point, loaded value or the exception raised loading it), ...]`` of the group
    ``dpjax.experiments``."""
    from importlib import metadata

    try:
        eps = metadata.entry_points(group=GROUP)
    except TypeError:  # pragma: no cover - Python < 3.10
        eps = metadata.entry_points().get(GROUP, [])
    out = []
    for ep in sorted(eps, key=lambda e: e.name):
        try:
            out.append((ep, ep.load()))
        except Exception as exc:  # noqa: BLE001 - reported by 'dpjax list', not fatal
            out.append((ep, exc))
    return out


def _dist(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return getattr(dist, "name", None) or ep.value.split(":")[0].split(".")[0]


def plugin_experiments() -> list[tuple[Any, dict[str, Any]]]:
    """``[(experiment, source), ...]`` offered by installed packages."""
    out = []
    for ep, value in plugins():
        if isinstance(value, Exception):
            continue
        items = value if isinstance(value, (list, tuple)) else [value]
        for exp in items:
            if _is_experiment(exp):
                out.append((exp, {"entry_point": ep.name, "distribution": _dist(ep),
                                  "value": ep.value, "name": exp.name}))
    return out


def resolve(spec: str, bundled: bool = True) -> tuple[Any, dict[str, Any] | None] | None:
    """``(experiment, source)`` for what ``dpjax run SPEC`` names, or None if nothing is
    called so (a bundled name, unless ``bundled`` is false; a file, a module, or an installed
    package's experiment). Raises :class:`~dpjax.config.ConfigError` when the file or module
    cannot give one."""
    if bundled and spec.isidentifier():
        exp = _bundled().find(spec)
        if exp is not None:
            return exp, None
    base, _ = _split(spec)
    if base.endswith(".py") or os.sep in base or "/" in base:
        return _from_file(spec)
    if ":" in spec or "." in base:
        return _from_module(spec)
    for exp, source in plugin_experiments():
        if exp.name == spec:
            return exp, source
    return None


def load_source(source: dict[str, Any], where: str) -> Any:
    """The experiment ``config.json``'s ``source`` names, loaded again; a one-line
    :class:`~dpjax.config.ConfigError` saying where it was looked for when it is gone."""
    name = source.get("name")
    try:
        if "file" in source:
            path = Path(str(source["file"]))
            if not path.is_file():
                raise ConfigError(f"{where}: its config.json says experiment {name!r} came from "
                                  f"the file {path}, which is no longer there (give its new "
                                  "place: 'dpjax plot FILE.py:NAME --out DIR')")
            return _from_file(f"{path}:{name}")[0]
        if "module" in source:
            return _from_module(f"{source['module']}:{name}")[0]
        if "entry_point" in source:
            for exp, _src in plugin_experiments():
                if exp.name == name:
                    return exp
            raise ConfigError(f"{where}: its config.json says experiment {name!r} came from "
                              f"the installed package {source.get('distribution')!r} (entry "
                              f"point {source.get('entry_point')!r}), which offers it no more")
    except ConfigError as exc:
        if str(exc).startswith(where):
            raise
        raise ConfigError(f"{where}: cannot load experiment {name!r} from where its "
                          f"config.json says it came from ({exc})") from None
    raise ConfigError(f"{where}: its config.json records an unknown source {source!r}")
