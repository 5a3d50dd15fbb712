"""Programs compiled and seconds spent compiling, counted from JAX's own compile events
(``jax.monitoring``): what a study's time goes to on an accelerator, recorded in each run's
``config.json`` (``timing``) and in ``dpjax run --all``'s timing lines.

JAX records one backend-compile duration per program it builds for a device, whether XLA
compiles it or the persistent compilation cache supplies it (then a cache hit is recorded
too, and the duration is the load's); so ``compiled = programs - cache hits``. Every program
counts: the study's kernels and the small ones that host-side array operations build.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["CompileTally", "tally"]

_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT = "/jax/compilation_cache/cache_hits"

_lock = threading.Lock()
_active: list[CompileTally] = []
_registered = False


@dataclasses.dataclass(eq=False)  # removed from _active by identity, not by its counts
class CompileTally:
    """The compile events seen while it was active (see :func:`tally`).

    Attributes:
        programs: programs built for a device (compiled, or loaded from the persistent cache).
        seconds: their durations, in seconds (a cache hit's is the load's).
        cache_hits: programs loaded from the persistent compilation cache.
    """

    programs: int = 0
    seconds: float = 0.0
    cache_hits: int = 0

    @property
    def compiled(self) -> int:
        """Programs XLA compiled (not loaded from the cache)."""
        return max(self.programs - self.cache_hits, 0)

    def to_dict(self) -> dict[str, Any]:
        """``programs_compiled``, ``compile_seconds``, ``programs_from_cache`` (config.json)."""
        return {"programs_compiled": self.compiled, "compile_seconds": round(self.seconds, 3),
                "programs_from_cache": self.cache_hits}


def _on_duration(event: str, duration: float, *args: Any, **kwargs: Any) -> None:
    if event == _BACKEND_COMPILE:
        with _lock:
            for t in _active:
                t.programs += 1
                t.seconds += float(duration)


def _on_event(event: str, *args: Any, **kwargs: Any) -> None:
    if event == _CACHE_HIT:
        with _lock:
            for t in _active:
                t.cache_hits += 1


def _register() -> None:
    """One listener of each kind for the life of the process (JAX has no public way to
    remove one); they do nothing while no tally is active."""
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_on_duration)
    jax.monitoring.register_event_listener(_on_event)


@contextlib.contextmanager
def tally() -> Iterator[CompileTally]:
    """Count the programs JAX compiles (in any thread) inside the ``with`` block; tallies
    nest (an outer one counts what an inner one counts)."""
    _register()
    t = CompileTally()
    with _lock:
        _active.append(t)
    try:
        yield t
    finally:
        with _lock:
            _active.remove(t)
