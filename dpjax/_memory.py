"""Peak resident memory of this process so far: what ``config.json`` records after each setting
of a study (``peak_rss_gb``) and ``dpjax run --all`` per study process
(``process_peak_rss_gb``), so that a study's memory can be held against its budget.

On Linux it is the kernel's high-water mark of this program's resident memory (``VmHWM`` in
``/proc/self/status``); ``ru_maxrss`` would also count the parent's memory at the moment this
process was started (a child of a process that holds 1 GB reads at least 1 GB). Elsewhere
``ru_maxrss``. The mark is never reset here (resetting it would also hide the peak from the
tools that time a run, such as ``/usr/bin/time``), so a setting's value is the process's peak
up to its end: the setting that raised it is the one whose value jumps.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["process_peak_gb"]

_STATUS = Path("/proc/self/status")


def _high_water() -> int | None:
    """``VmHWM`` in bytes, or None where there is none (not Linux)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def process_peak_gb() -> float | None:
    """This process's peak resident memory so far, in GB (1e9 bytes): its own program's
    (``VmHWM``), else ``ru_maxrss``; None where neither is known."""
    mark = _high_water()
    if mark is not None:
        return round(mark / 1e9, 3)
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(rss * (1 if sys.platform == "darwin" else 1024) / 1e9, 3)  # bytes on macOS
