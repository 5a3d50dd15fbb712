"""Results files: resumable chunk storage, the tidy table, the summary, and config.json.

Layout of an output directory (DESIGN.md, "Results and the command line"):

* ``results.csv`` -- tidy, one row per (setting, privacy level, repetition), with at least
  ``experiment, method, n, d, s, epsilon, delta, rep, error`` (the final iterate's error) and every
  other swept setting as its own column;
* ``iterations.csv`` -- the same keys plus ``iteration``, one row per recorded iteration
  (``iteration = 0`` is the starting value);
* ``summary.csv`` -- mean, standard error and count of the final error per (setting, level),
  and what its privacy ledger delivers: ``epsilon_delivered`` and ``budget_spent`` (delivered
  over requested; 1 where the noise spends the request, less for a paper's looser calibration);
* ``config.json`` -- the resolved configuration, seed, package versions, machine, timings, and the
  privacy ledger of every (setting, level);
* ``chunks/`` -- one ``.npz`` per completed chunk of repetitions, written atomically (temporary
  file, fsync, rename, fsync of the folder), so a killed run loses at most the chunk in flight and
  a rerun resumes. Each chunk carries the study fingerprint, its setting key and repetition range,
  and a SHA-256 checksum of its content; a chunk that fails verification is reported, moved aside
  (``.corrupt``) and computed again. A failed write (disk full) leaves no partial chunk behind.
  ``chunks/programs.json`` records, per setting, the program that computed its chunks
  (:func:`dpjax.sweep.program_fingerprint`): chunks of another program are never reused.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import hashlib
import json
import math
import os
import platform
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from dpjax._validate import ConfigError

__all__ = [
    "ChunkError",
    "ChunkStore",
    "decode_chunk",
    "encode_chunk",
    "environment",
    "read_csv",
    "summarise",
    "write_csv",
    "write_json",
]


def _safe(name: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in name)
    return f"{keep[:80]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


# --------------------------------------------------------------------------------------------
# Errors and messages
# --------------------------------------------------------------------------------------------


class StorageError(ConfigError, OSError):
    """A results file could not be written (disk full, read-only, ...): an ``OSError`` with its
    ``errno``, and a :class:`~dpjax.config.ConfigError` so that ``dpjax run`` reports it in
    one line. Completed chunks are kept: free space and rerun to resume."""

    __str__ = BaseException.__str__  # the message, not OSError's "[Errno n] ..."


def _storage_error(path: Path, exc: OSError, hint: str = "") -> OSError:
    reason = exc.strerror or str(exc) or type(exc).__name__
    code = errno.errorcode.get(exc.errno, "") if exc.errno is not None else ""
    err = StorageError(
        f"could not write {path}: {reason}" + (f" ({code})" if code else "") + hint
    )
    err.errno, err.strerror, err.filename = exc.errno, exc.strerror, str(path)
    return err


def _user_error(message: str) -> ValueError:
    return ConfigError(message)  # printed as one line by the command line


def _report(message: str) -> None:
    """One line on stderr, above the progress bar if one is showing."""
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with the [experiments] extra
        print(message, file=sys.stderr, flush=True)
    else:
        tqdm.write(message, file=sys.stderr)


def _is_primary() -> bool:
    """Process 0 of a multi-process run (the one that writes chunks), or the only process."""
    import jax

    return jax.process_index() == 0


# --------------------------------------------------------------------------------------------
# Chunks
# --------------------------------------------------------------------------------------------

CHUNK_FORMAT = 1
PROGRAMS_FILE = "programs.json"  # per setting: the program fingerprint of its stored chunks
_RESULTS_FILES = ("results.csv", "iterations.csv", "summary.csv", "config.json")
_META = "__chunk__"  # the archive member holding a chunk's header and checksum (JSON bytes)


class ChunkError(ValueError):
    """A chunk file that cannot be trusted: unreadable, truncated, its checksum does not match,
    or it belongs to another setting, repetition range or configuration."""


def _chunk_header(fingerprint: str, key: str, start: int, stop: int,
                  arrays: Mapping[str, np.ndarray],
                  levels: Sequence[str] | None = None) -> dict[str, Any]:
    header = {
        "format": CHUNK_FORMAT, "fingerprint": fingerprint, "key": key,
        "start": int(start), "stop": int(stop),
        "arrays": {k: {"dtype": v.dtype.str, "shape": list(v.shape)}
                   for k, v in sorted(arrays.items())},
    }
    if levels is not None:  # the levels along axis 1 of every array (sweep.level_label)
        header["levels"] = [str(lv) for lv in levels]
    return header


def _chunk_digest(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 of the header (which names every array's dtype and shape) and the arrays'
    bytes in C order, arrays by sorted name."""
    h = hashlib.sha256(json.dumps(header, sort_keys=True).encode())
    for name in sorted(arrays):
        h.update(np.ascontiguousarray(arrays[name]).tobytes())
    return h.hexdigest()


def encode_chunk(path: str | os.PathLike, fingerprint: str, key: str, start: int, stop: int,
                 arrays: Mapping[str, np.ndarray], levels: Sequence[str] | None = None) -> None:
    """Write a chunk atomically: an ``.npz`` of ``arrays`` plus a member ``__chunk__`` holding
    the header (format, fingerprint, key, repetition range, dtype and shape of every array,
    and, if given, the labels of the ``levels`` along each array's axis 1) and the SHA-256 of
    header and data. The file appears under its name complete or not at
    all (temporary file, fsync, rename, fsync of the folder)."""
    arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    for k, v in arrays.items():
        if not isinstance(k, str) or k == _META:
            raise ValueError(f"chunk {key!r}: invalid metric name {k!r}")
        if v.dtype.hasobject or v.ndim < 1 or v.shape[0] != stop - start:
            raise ValueError(f"chunk {key!r} [{start}, {stop}): metric {k!r} has shape "
                             f"{v.shape} and dtype {v.dtype}; expected {stop - start} "
                             "repetitions of numbers")
        if levels is not None and (v.ndim < 2 or v.shape[1] != len(levels)):
            raise ValueError(f"chunk {key!r}: metric {k!r} has shape {v.shape}; expected "
                             f"{len(levels)} levels along axis 1")
    header = _chunk_header(fingerprint, key, start, stop, arrays, levels)
    meta = header | {"sha256": _chunk_digest(header, arrays)}
    blob = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), np.uint8)
    _atomic_write(Path(path), lambda f: np.savez(f, **arrays, **{_META: blob}), hint=(
        "; completed chunks are kept: free some space and rerun the same command to resume"))


def decode_chunk(path: str | os.PathLike, fingerprint: str, key: str, start: int,
                 stop: int) -> dict[str, np.ndarray]:
    """Read and verify a chunk written by :func:`encode_chunk`; raises :class:`ChunkError`
    unless the file is complete, its checksum matches, and it holds repetitions
    ``[start, stop)`` of setting ``key`` under ``fingerprint``."""
    return _decode_chunk(path, fingerprint, key, start, stop)[0]


def _decode_chunk(path: str | os.PathLike, fingerprint: str, key: str, start: int,
                  stop: int) -> tuple[dict[str, np.ndarray], list[str] | None]:
    """:func:`decode_chunk`, and the labels of the levels the chunk holds (None: not
    recorded)."""
    try:
        with open(path, "rb") as fh:
            obj = np.load(fh, allow_pickle=False)
            if not isinstance(obj, np.lib.npyio.NpzFile):
                raise ChunkError("not an .npz archive")
            with obj:
                names = list(obj.files)
                if _META not in names:
                    raise ChunkError("no checksum (written by an older dpjax?)")
                blob = obj[_META]
                arrays = {k: obj[k] for k in names if k != _META}
    except ChunkError:
        raise
    except Exception as exc:  # truncated or damaged archive: zipfile, zlib, numpy errors
        raise ChunkError(f"unreadable: {type(exc).__name__}: {exc}") from exc
    try:
        if blob.dtype != np.uint8 or blob.ndim != 1:
            raise ValueError("not bytes")
        meta = json.loads(blob.tobytes().decode())
        if not isinstance(meta, dict):
            raise ValueError("not an object")
        digest = meta.pop("sha256")
    except (ValueError, KeyError) as exc:
        raise ChunkError(f"damaged header: {exc}") from exc
    levels = meta.get("levels")
    if levels is not None and (not isinstance(levels, list)
                               or not all(isinstance(x, str) for x in levels)):
        raise ChunkError("damaged header: its level labels are not a list of strings")
    header = _chunk_header(fingerprint, key, start, stop, arrays, levels)
    if meta.get("format") != CHUNK_FORMAT:
        raise ChunkError(f"unknown chunk format {meta.get('format')!r}")
    for field in ("fingerprint", "key", "start", "stop"):
        if meta.get(field) != header[field]:
            raise ChunkError(f"holds {field} {meta.get(field)!r}, expected {header[field]!r}")
    if meta != header:  # the arrays present, their dtypes and shapes
        raise ChunkError("its arrays differ from the ones its header lists")
    for k, v in arrays.items():
        if v.ndim < 1 or v.shape[0] != stop - start:
            raise ChunkError(f"metric {k!r} has shape {v.shape}, not {stop - start} repetitions")
        if levels is not None and (v.ndim < 2 or v.shape[1] != len(levels)):
            raise ChunkError(f"metric {k!r} has shape {v.shape}, not {len(levels)} levels")
    if _chunk_digest(header, arrays) != digest:
        raise ChunkError("checksum mismatch")
    return arrays, levels


class ChunkStore:
    """Completed chunks of a study, one file each, written atomically and verified on read.

    A chunk is identified by its setting and its repetition range, and holds every level it
    was run for (their labels are in its header): a rerun reuses every completed chunk, and a
    study grows (more repetitions, more levels) around them -- a stored chunk keeps its range
    (:func:`dpjax.sweep.plan_bounds`), a new level's repetitions are added to the chunks
    already there, and a chunk file no run plan uses any more is deleted (:meth:`prune`).
    The store refuses to mix results of different configurations: the ``fingerprint`` (a hash
    of everything that changes results, except what may grow) is checked on open, and every
    chunk carries it, with its setting key, repetition range and a SHA-256 checksum (see
    :func:`encode_chunk`); :meth:`check_settings` refuses a setting whose shape changed.
    A chunk that fails verification is reported on stderr, moved aside to ``NAME.corrupt``
    and computed again; it is never used.

    ``growable``: the configuration fields that may change between runs in one directory
    (list fields: the grids); a refusal names the other fields that differ.

    ``programs``: per setting key, what computes its results
    (:func:`dpjax.sweep.program_fingerprint`), recorded in ``chunks/programs.json``. A stored
    result is reused only if the same program produced it: where a setting of this run has
    stored chunks from another program (its traced computation or its ledger code changed,
    e.g. an edited study file or another dpjax), opening the store raises a one-line error
    naming those settings before any file is touched, or, with ``recompute``, deletes their
    chunks so that they are computed again.
    """

    def __init__(self, out_dir: str | os.PathLike, fingerprint: str,
                 identity: Mapping[str, Any] | None = None,
                 growable: Iterable[str] = (),
                 programs: Mapping[str, Mapping[str, Any]] | None = None,
                 recompute: bool = False) -> None:
        self.root = Path(out_dir) / "chunks"
        self.fingerprint = fingerprint
        self.bounds: dict[tuple[str, int], tuple[int, int]] = {}
        self._verified: dict[tuple[str, int], dict[str, np.ndarray]] = {}
        self._levels: dict[tuple[str, int], list[str] | None] = {}
        self._pending_levels: dict[tuple[str, int], list[str]] = {}
        self._schema: dict[str, dict[str, Any]] = {}
        self._primary = _is_primary()
        self.reused = 0  # (repetition, level) results read from stored chunks
        self.computed = 0  # and computed by this run
        try:
            _make_dirs(self.root)
        except OSError as exc:
            raise _storage_error(self.root, exc) from exc
        marker = self.root / "fingerprint.txt"
        described = self.root / "identity.json"
        if marker.exists():
            old = marker.read_text().strip()
            if old != fingerprint:
                changes = _identity_changes(_read_identity(Path(out_dir)), identity,
                                            skip=tuple(growable))
                what = "; ".join(changes) if changes else f"fingerprint {old} != {fingerprint}"
                grow = (" (only repetitions and the elements of a list setting may change: "
                        "a study grows)" if growable else "")
                raise _user_error(
                    f"{out_dir} holds results of a different configuration ({what}); "
                    f"rerun with the same settings to resume{grow}, or choose another --out "
                    "directory (or delete this one)"
                )
        # the programs that computed the stored chunks: checked before any file is touched
        changed = {} if programs is None else self._changed_programs(programs)
        if changed and not recompute:
            names = [f"{k!r} ({why})" for k, why in changed.items()]
            if len(names) > 4:
                names[4:] = [f"and {len(names) - 4} more"]
            raise _user_error(
                f"{out_dir} holds results of {len(changed)} setting(s) computed by another "
                f"program than this run's: {', '.join(names)}; rerun with --recompute to "
                "compute them again there (run_experiment(..., recompute=True)), or choose "
                "another --out directory")
        if identity is not None and self._primary:
            # what the fingerprint hashes (to name what differs), as of the latest run
            _atomic_write_text(described, json.dumps(identity, indent=1, default=str) + "\n")
        if not marker.exists():
            _atomic_write_text(marker, fingerprint + "\n")
        if self._primary:  # temporary files of a killed run: never a completed chunk
            stale = [*self.root.glob("*.tmp"), *self.root.glob("*/*.tmp")]
            for name in _RESULTS_FILES:  # and of the results files (see _atomic_write)
                stale.extend(self.root.parent.glob(f".{name}.*.tmp"))
            for tmp in stale:
                tmp.unlink(missing_ok=True)
        if programs is not None:
            self._record_programs(programs, changed)

    def _read_programs(self) -> dict[str, Any]:
        try:
            obj = json.loads((self.root / PROGRAMS_FILE).read_text())
        except (OSError, ValueError):
            return {}
        settings = obj.get("settings") if isinstance(obj, dict) else None
        return settings if isinstance(settings, dict) else {}

    def _changed_programs(self, programs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
        """The settings asked for whose stored chunks another program computed (setting key
        -> what differs): their traced computation, their ledger code at a level both runs
        hold, or no record of it (chunks of a dpjax before program fingerprints)."""
        old = self._read_programs()
        out = {}
        for key, new in programs.items():
            if not self.ranges(key):
                continue  # nothing stored: nothing to mix with
            before = old.get(key)
            if not isinstance(before, dict):
                out[key] = "stored without a program fingerprint, by an older dpjax"
            elif before.get("program") != new["program"]:
                out[key] = "its traced computation changed"
            elif any(before.get("ledgers", {}).get(label, digest) != digest
                     for label, digest in new["ledgers"].items()):
                out[key] = "its ledger code changed"
        return out

    def _record_programs(self, programs: Mapping[str, Mapping[str, Any]],
                         changed: Mapping[str, str]) -> None:
        """Delete the chunks of the ``changed`` settings (``--recompute``) and record the
        programs of this run's settings (a setting's ledger digests per level accumulate as
        its levels grow)."""
        if not self._primary:
            return
        for key in changed:
            self.discard(key)
        old = self._read_programs()
        merged = dict(old)
        for key, new in programs.items():
            before = old.get(key)
            keep = (isinstance(before, dict) and key not in changed
                    and before.get("program") == new["program"])
            ledgers = {**(before.get("ledgers", {}) if keep else {}), **new["ledgers"]}
            merged[key] = {"program": new["program"], "ledgers": ledgers}
        if merged != old:
            _atomic_write_text(self.root / PROGRAMS_FILE, json.dumps(
                {"format": 1, "settings": merged}, indent=1, sort_keys=True) + "\n")

    def _path(self, key: str, start: int, stop: int) -> Path:
        return self.root / _safe(key) / f"reps-{start:07d}-{stop:07d}.npz"

    def set_bounds(self, key: str, bounds: Sequence[tuple[int, int]]) -> None:
        for i, b in enumerate(bounds):
            self.bounds[(key, i)] = b

    def ranges(self, key: str) -> list[tuple[int, int]]:
        """The repetition ranges of the chunk files stored for setting ``key``."""
        out = []
        for path in (self.root / _safe(key)).glob("reps-*-*.npz"):
            parts = path.stem.split("-")
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                out.append((int(parts[1]), int(parts[2])))
        return sorted(out)

    def prune(self, key: str, bounds: Sequence[tuple[int, int]]) -> int:
        """Delete the chunk files of ``key`` that the plan ``bounds`` does not use and that
        overlap it (a chunking the study has outgrown); chunks past the plan's end (the
        repetitions of a larger earlier run) are kept for a later run that asks for them.
        Returns how many were deleted."""
        if not self._primary:
            return 0
        keep = set(bounds)
        end = max((b for _, b in bounds), default=0)
        gone = 0
        for a, b in self.ranges(key):
            if (a, b) not in keep and a < end:
                (self.root / _safe(key) / f"reps-{a:07d}-{b:07d}.npz").unlink(missing_ok=True)
                gone += 1
        if gone:
            _fsync_dir(self.root / _safe(key))
        return gone

    def check_settings(self, signatures: Mapping[str, Mapping[str, Any]]) -> None:
        """Refuse when a setting stored here has changed shape (``signatures``: setting key ->
        what fixes its results besides its levels: columns, estimator, data plan, truth);
        record the new ones. Settings stored but not asked for are kept."""
        path = self.root / "settings.json"
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = {}
        if not isinstance(old, dict):
            old = {}
        new = json.loads(json.dumps(dict(signatures), default=str))
        for key, sig in new.items():
            before = old.get(key)
            if before is not None and before != sig:
                diff = "; ".join(f"{k}: {_show(before.get(k))} -> {_show(sig.get(k))}"
                                 for k in dict.fromkeys([*sig, *before])
                                 if before.get(k) != sig.get(k))
                raise _user_error(
                    f"{self.root.parent} holds results of setting {key!r} as it was before "
                    f"({diff}); rerun with the same settings to resume, or choose another "
                    "--out directory (or delete this one)")
        if self._primary and {**old, **new} != old:
            _atomic_write_text(path, json.dumps({**old, **new}, indent=1) + "\n")

    def tally(self, reused: int = 0, computed: int = 0) -> None:
        """Count (repetition, level) results read from chunks and computed (for the run's
        one line of what it reused)."""
        self.reused += reused
        self.computed += computed

    def levels_of(self, key: str, i: int) -> list[str] | None:
        """The labels of the levels stored chunk ``i`` of ``key`` holds (None: not recorded,
        a chunk of an older dpjax: the levels asked for)."""
        if (key, i) not in self._levels:
            path = self._path(key, *self.bounds[(key, i)])
            try:
                with np.load(path, allow_pickle=False) as obj:
                    meta = json.loads(obj[_META].tobytes().decode())
                levels = meta.get("levels")
            except Exception:  # noqa: BLE001 - verified by has() on process 0
                levels = None
            self._levels[(key, i)] = levels
        return self._levels[(key, i)]

    def save_levels(self, key: str, i: int, labels: Sequence[str]) -> None:
        """The levels of the chunk that the next :meth:`save` of ``(key, i)`` writes."""
        self._pending_levels[(key, i)] = list(labels)

    def has(self, key: str, i: int) -> bool:
        """Whether chunk ``i`` of ``key`` is complete and verified (a damaged one is moved
        aside, reported, and counts as missing)."""
        path = self._path(key, *self.bounds[(key, i)])
        if not path.is_file():
            return False
        if not self._primary:  # process 0 reads and decides (see sweep.run_setting)
            return True
        arrays = self._read(key, i, path)
        if arrays is None:
            return False
        self._verified[(key, i)] = arrays
        return True

    def load(self, key: str, i: int) -> dict[str, np.ndarray]:
        arrays = self._verified.pop((key, i), None)
        if arrays is None:
            path = self._path(key, *self.bounds[(key, i)])
            arrays = self._read(key, i, path)
            if arrays is None:
                raise ChunkError(f"chunk {path} was damaged (moved aside); compute it again")
        return arrays

    def save(self, key: str, i: int, arr: Mapping[str, np.ndarray]) -> None:
        start, stop = self.bounds[(key, i)]
        arrays = {k: np.asarray(v) for k, v in arr.items()}
        self._check_schema(key, arrays, "computed")
        levels = self._pending_levels.pop((key, i), None)
        encode_chunk(self._path(key, start, stop), self.fingerprint, key, start, stop, arrays,
                     levels)
        self._levels[(key, i)] = levels

    def discard(self, key: str) -> None:
        """Delete every chunk of setting ``key`` (a refused level's values never stay on
        disk)."""
        folder = self.root / _safe(key)
        for path in folder.glob("*.npz"):
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # gone, or holding other files (kept)
            folder.rmdir()

    def completed(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.npz"))

    def _read(self, key: str, i: int, path: Path) -> dict[str, np.ndarray] | None:
        start, stop = self.bounds[(key, i)]
        try:
            arrays, levels = _decode_chunk(path, self.fingerprint, key, start, stop)
        except ChunkError as exc:
            self._quarantine(path, str(exc))
            return None
        self._levels[(key, i)] = levels
        self._check_schema(key, arrays, f"stored in {path}")
        return arrays

    def _quarantine(self, path: Path, reason: str) -> None:
        dest = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, dest)
            _fsync_dir(path.parent)
            done = f"moved it to {dest.name}"
        except FileNotFoundError:
            done = "it is gone"
        except OSError as exc:
            try:
                path.unlink()
                done = f"deleted it (could not move it: {exc.strerror or exc})"
            except OSError as exc2:
                raise _storage_error(path, exc2, f" (a damaged chunk: {reason})") from exc2
        _report(f"dpjax: warning: damaged chunk {path} ({reason}); {done}; computing it again")

    def _check_schema(self, key: str, arrays: Mapping[str, np.ndarray], what: str) -> None:
        """Every chunk of a setting holds the same metrics with the same trailing shapes
        (beyond the level axis, whose length grows with the study)."""
        schema = {k: [v.dtype.str, list(v.shape[2:])] for k, v in sorted(arrays.items())}
        known = self._schema.setdefault(key, schema)
        if known != schema:
            raise _user_error(
                f"{self.root}: the chunks of setting {key!r} disagree: metrics {known} "
                f"elsewhere but {schema} {what} (written by another version of dpjax?); "
                "delete the directory or choose another --out"
            )


def _read_identity(out_dir: Path) -> Mapping[str, Any] | None:
    """What an earlier run in ``out_dir`` was (experiment, config, seed): from
    ``chunks/identity.json``, else from a finished run's ``config.json``."""
    for path in (out_dir / "chunks" / "identity.json", out_dir / "config.json"):
        try:
            obj = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(obj, dict) and isinstance(obj.get("config"), dict):
            return obj
    return None


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_show(v) for v in value) if value else "(empty)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _identity_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None,
                      limit: int = 8, skip: Sequence[str] = ()) -> list[str]:
    """``name: old -> new`` for each setting (and the seed) that differs between two runs
    (those named in ``skip`` only when nothing else does)."""
    if old is None or new is None:
        return []
    new = json.loads(json.dumps(new, default=str))  # tuples as lists, as stored
    if old.get("experiment") != new.get("experiment"):
        return [f"a run of {old.get('experiment')}, not {new.get('experiment')}"]
    out = []
    if old.get("seed") != new.get("seed"):
        out.append(f"--seed: {old.get('seed')} -> {new.get('seed')}")
    before, after = old["config"], new.get("config", {})
    missing = object()
    for name in dict.fromkeys([*after, *before]):
        a, b = before.get(name, missing), after.get(name, missing)
        if a != b and (name not in skip or (a is missing) != (b is missing)):
            out.append(f"{name}: {'(none)' if a is missing else _show(a)} -> "
                       f"{'(none)' if b is missing else _show(b)}")
    if not out and skip:
        return _identity_changes(old, new, limit)
    if len(out) > limit:
        out[limit:] = [f"and {len(out) - limit} more"]
    return out


def fingerprint(obj: Any) -> str:
    """A short hash of a JSON-serialisable object (sorted keys)."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# Atomic writes
# --------------------------------------------------------------------------------------------


def _fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in ``path`` durable (no-op where directories cannot be
    opened, e.g. Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platform without directory file descriptors
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_dirs(path: Path) -> None:
    """``mkdir -p`` that also makes each new directory's entry durable."""
    if path.is_dir():
        return
    _make_dirs(path.parent)
    try:
        path.mkdir()
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    _fsync_dir(path.parent)


def _atomic_write(path: Path, write: Callable[[IO[Any]], None], text: bool = False,
                  hint: str = "") -> None:
    """Write ``path`` as a whole or not at all: ``write`` fills a temporary file in the same
    folder, which is flushed to disk, renamed over ``path``, and the folder synced. A failure
    (an ``OSError`` becomes a :class:`StorageError`) removes the temporary file and leaves any
    previous ``path`` as it was."""
    try:
        _make_dirs(path.parent)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise _storage_error(path, exc, hint) from exc
    try:
        # mkstemp creates the file 0600; give it the mode open() would (0666 less the umask),
        # so results files are as readable as figure.png
        with contextlib.suppress(OSError, AttributeError):
            os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w" if text else "wb", **({"newline": ""} if text else {})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, StorageError):
            raise _storage_error(path, exc, hint) from exc
        raise


def _umask() -> int:
    """The process's umask, read without changing it where the platform allows (Linux: from
    /proc; elsewhere set and restored at once)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _atomic_write_text(path: Path, text: str) -> None:
    _atomic_write(path, lambda f: f.write(text), text=True)


def write_csv(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]],
              columns: Sequence[str] | None = None) -> None:
    """Write dict rows as CSV atomically; columns default to the union in first-seen order."""
    rows = list(rows)
    if columns is None:
        columns = []
        for r in rows:
            columns.extend(k for k in r if k not in columns)

    def write(f: IO[str]) -> None:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="raise")
        w.writeheader()
        for r in rows:
            w.writerow({k: _fmt(r.get(k, "")) for k in columns})

    _atomic_write(Path(path), write, text=True)


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


#: the ``summary.csv`` columns read off each row's privacy ledger: ``epsilon_delivered`` (the
#: epsilon the noise drawn delivers, at the ledger's delta) and ``budget_spent`` (delivered over
#: requested, in the request's units: epsilon, or rho for a zCDP request)
DELIVERED_COLUMNS = ("epsilon_delivered", "budget_spent")
#: ``budget_spent`` further than this from 1 is reported (``dpjax run``, the figure's caption)
SPENT_RTOL = 0.01


def _ledger_float(budget: Mapping[str, Any] | None, name: str) -> float:
    try:
        return float(budget[name]) if budget else math.nan
    except (KeyError, TypeError, ValueError):
        return math.nan


def delivered(ledger: Mapping[str, Any] | None) -> dict[str, float]:
    """The :data:`DELIVERED_COLUMNS` of one (setting, level) from its ledger (``to_dict``
    form); ``nan`` where there is no ledger or nothing was requested."""
    if not ledger:
        return dict.fromkeys(DELIVERED_COLUMNS, math.nan)
    eps = _ledger_float(ledger.get("approx_dp"), "epsilon")
    req = ledger.get("requested") or {}
    if req.get("type") == "zcdp":
        got, asked = _ledger_float(ledger.get("guarantee"), "rho"), _ledger_float(req, "rho")
    else:
        got, asked = eps, _ledger_float(req, "epsilon")
    spent = got / asked if math.isfinite(asked) and asked > 0 else math.nan
    return {"epsilon_delivered": eps, "budget_spent": spent}


def add_delivered(summary: Sequence[dict[str, Any]], by: Sequence[str], experiment: str,
                  settings: Sequence[Mapping[str, Any]]) -> None:
    """Add the :data:`DELIVERED_COLUMNS` to every ``summary`` row (in place), from the ledgers
    of ``settings`` (``config.json``'s ``settings``: each with ``columns`` and ``levels``, a level
    with its ``hparams`` and ``ledger``)."""
    lookup = {}
    for s in settings:
        for lv in s.get("levels", ()):
            base = {"experiment": experiment} | dict(s.get("columns", {})) | {
                k: float(v) for k, v in lv.get("hparams", {}).items()}
            lookup[tuple(base.get(k) for k in by)] = lv.get("ledger")
    for row in summary:
        row.update(delivered(lookup.get(tuple(row.get(k) for k in by))))


def delivered_notes(summary: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per method whose rows deliver a budget other than the requested one (beyond
    :data:`SPENT_RTOL`): what a paper calibration or a paper-literal variant really spends."""
    by_method: dict[str, list[tuple[float, float, float]]] = {}
    for r in summary:
        spent = _num(r.get("budget_spent"))
        if not math.isfinite(spent) or abs(spent - 1) <= SPENT_RTOL:
            continue
        by_method.setdefault(str(r.get("method", r.get("experiment", ""))), []).append(
            (spent, _num(r.get("epsilon")), _num(r.get("epsilon_delivered"))))
    out = []
    for method, vals in by_method.items():
        lo, hi = min(v[0] for v in vals), max(v[0] for v in vals)
        frac = f"{lo:.2g}" if f"{lo:.2g}" == f"{hi:.2g}" else f"{lo:.2g}-{hi:.2g}"
        pairs = sorted({(e, d) for _, e, d in vals if math.isfinite(e) and math.isfinite(d)})
        ex = ", ".join(f"{e:g} -> {d:.3g}" for e, d in pairs[:4])
        out.append(f"{method}: the noise delivers {frac} of the requested budget"
                   + (f" (epsilon {ex}{', ...' if len(pairs) > 4 else ''})" if ex else ""))
    return out


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


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
