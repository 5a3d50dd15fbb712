"""Results files: resumable chunk storage, the tidy table, the summary, and config.json.

Layout of an output directory (DESIGN.md, "Results and the command line"):

* ``results.csv`` -- tidy, one row per (setting, privacy level, repetition), with at least
  ``experiment, method, n, d, s, epsilon, delta, rep, error`` (the final iterate's error) and every
  other swept setting as its own column;
* ``iterations.csv`` -- the same keys plus ``iteration``, one row per recorded iteration
  (``iteration = 0`` is the starting value);
* ``summary.csv`` -- mean, standard error and count of the final error per (setting, level);
* ``config.json`` -- the resolved configuration, seed, package versions, machine, timings, and the
  privacy ledger of every (setting, level);
* ``chunks/`` -- one ``.npz`` per completed chunk of repetitions, written atomically, so a killed
  run loses at most the chunk in flight and a rerun resumes.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import platform
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ChunkStore",
    "environment",
    "read_csv",
    "summarise",
    "write_csv",
    "write_json",
]


def _safe(name: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in name)
    return f"{keep[:80]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


class ChunkStore:
    """Completed chunks of a study, one file each, written atomically.

    A chunk is identified by its setting and its repetition range, so a rerun with the same
    chunk size reuses every completed chunk, and a rerun with more repetitions reuses the
    chunks it shares. The store refuses to mix results of different configurations: the
    ``fingerprint`` (a hash of everything that changes results) is checked on open.
    """

    def __init__(self, out_dir: str | os.PathLike, fingerprint: str) -> None:
        self.root = Path(out_dir) / "chunks"
        self.root.mkdir(parents=True, exist_ok=True)
        marker = self.root / "fingerprint.txt"
        if marker.exists():
            old = marker.read_text().strip()
            if old != fingerprint:
                raise ValueError(
                    f"{out_dir} holds results of a different configuration (fingerprint {old} "
                    f"!= {fingerprint}); choose another --out directory or delete it"
                )
        else:
            _atomic_write_text(marker, fingerprint + "\n")
        self.fingerprint = fingerprint
        self.bounds: dict[tuple[str, int], tuple[int, int]] = {}

    def _path(self, key: str, start: int, stop: int) -> Path:
        return self.root / _safe(key) / f"reps-{start:07d}-{stop:07d}.npz"

    def set_bounds(self, key: str, bounds: Sequence[tuple[int, int]]) -> None:
        for i, b in enumerate(bounds):
            self.bounds[(key, i)] = b

    def has(self, key: str, i: int) -> bool:
        return self._path(key, *self.bounds[(key, i)]).exists()

    def load(self, key: str, i: int) -> dict[str, np.ndarray]:
        with np.load(self._path(key, *self.bounds[(key, i)])) as f:
            return {k: f[k] for k in f.files}

    def save(self, key: str, i: int, arr: Mapping[str, np.ndarray]) -> None:
        path = self._path(key, *self.bounds[(key, i)])
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arr)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def completed(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.npz"))


def fingerprint(obj: Any) -> str:
    """A short hash of a JSON-serialisable object (sorted keys)."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_csv(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]],
              columns: Sequence[str] | None = None) -> None:
    """Write dict rows as CSV atomically; columns default to the union in first-seen order."""
    rows = list(rows)
    if columns is None:
        columns = []
        for r in rows:
            columns.extend(k for k in r if k not in columns)
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="raise")
            w.writeheader()
            for r in rows:
                w.writerow({k: _fmt(r.get(k, "")) for k in columns})
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fmt(v: Any) -> Any:
    if isinstance(v, (float, np.floating)):
        v = float(v)
        return "inf" if v == math.inf else ("-inf" if v == -math.inf else repr(v))
    if isinstance(v, np.integer):
        return int(v)
    return v


def read_csv(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a CSV written by :func:`write_csv`, converting numeric fields back to numbers."""
    with open(path, newline="") as f:
        return [{k: _parse(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _parse(v: str) -> Any:
    try:
        i = int(v)
        return i
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def write_json(path: str | os.PathLike, obj: Any) -> None:
    _atomic_write_text(Path(path), json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def summarise(
    rows: Sequence[Mapping[str, Any]], by: Sequence[str], value: str = "error",
    extra: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Mean, standard error (sd / sqrt(count)) and count of ``value`` grouped by ``by``.

    For each name in ``extra`` (another metric of the rows), also ``{name}_mean``, ``{name}_se``
    and ``{name}_sd`` (the standard deviation over the group's rows).
    """
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in by), []).append(r)
    out = []
    for k, grp in groups.items():
        a = np.asarray([float(r[value]) for r in grp])
        se = float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else float("nan")
        row = dict(zip(by, k)) | {"mean": float(a.mean()), "se": se, "count": int(a.size)}
        for name in extra:
            b = np.asarray([float(r[name]) for r in grp])
            sd = float(b.std(ddof=1)) if b.size > 1 else float("nan")
            row |= {f"{name}_mean": float(b.mean()), f"{name}_se": sd / math.sqrt(b.size),
                    f"{name}_sd": sd}
        out.append(row)
    return out


def environment() -> dict[str, Any]:
    """Package versions and the machine, for config.json."""
    from importlib import metadata

    import jax
    import jaxlib

    try:
        version = metadata.version("dpjax")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source tree, not installed
        version = "unknown"
    info: dict[str, Any] = {
        "dpjax": version,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "process_count": jax.process_count(),
    }
    return info
