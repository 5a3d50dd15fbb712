"""Peak resident memory of this process, and of one stretch of it (a setting of a study):
what ``config.json`` records per setting (``peak_rss_gb``) and ``dpjax run --all`` per study
process (``process_peak_rss_gb``), so that a study's memory can be checked against its budget.

On Linux the peak is the kernel's own high-water mark of this program's resident memory
(``VmHWM`` in ``/proc/self/status``), which :func:`stretch` resets at its start (``5`` written
to ``/proc/self/clear_refs``) to read the peak of the stretch alone; :func:`process_peak_gb`
keeps the largest mark seen before a reset, so the process's peak stays whole. Elsewhere
``ru_maxrss`` gives the process's peak, and a stretch's is not measured (``None``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["Stretch", "process_peak_gb", "stretch"]

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_before_reset = 0  # the largest high-water mark read before a reset (bytes)


def _high_water() -> int | None:
    """``VmHWM`` in bytes, or None where there is none (not Linux)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset() -> bool:
    """Reset the high-water mark to the current resident memory; False where it cannot be."""
    global _before_reset
    mark = _high_water()
    if mark is None:
        return False
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    _before_reset = max(_before_reset, mark)
    return True


def process_peak_gb() -> float | None:
    """This process's peak resident memory so far, in GB (1e9 bytes): its own program's only
    (``VmHWM``; ``ru_maxrss`` on Linux would also count its parent's memory at the moment it
    was started), or ``ru_maxrss`` where there is no ``VmHWM``; None where neither is known."""
    mark = _high_water()
    if mark is not None:
        return round(max(mark, _before_reset) / 1e9, 3)
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(rss * (1 if sys.platform == "darwin" else 1024) / 1e9, 3)  # bytes on macOS


@dataclasses.dataclass
class Stretch:
    """The peak resident memory of the process while a :func:`stretch` ran, in GB (what was
    resident at its start included); None while it runs, and where it cannot be measured."""

    peak_gb: float | None = None


@contextlib.contextmanager
def stretch() -> Iterator[Stretch]:
    """Measure the peak resident memory of the process over the ``with`` block (Linux)."""
    out = Stretch()
    measured = _reset()
    try:
        yield out
    finally:
        if measured:
            mark = _high_water()
            out.peak_gb = None if mark is None else round(mark / 1e9, 3)
