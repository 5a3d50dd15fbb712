"""Run a module (``-m NAME ...``) or a script (``PATH ...``) as ``__main__`` and, at exit, write
this process's peak resident memory in MB to the file named by ``$BENCH_PEAK_FILE``.

Why not ``os.wait4``'s ``ru_maxrss``: Linux carries the memory high-water mark of the image a
child had before ``exec`` into its ``ru_maxrss``, and a child forked (or vforked) from the
harness starts as a copy of the harness, so a 129 MB script launched from a 300 MB harness
reported 301 MB. ``VmHWM`` in ``/proc/self/status`` belongs to the exec'd image alone.
"""

import atexit
import os
import resource
import runpy
import sys


def peak_rss_mb() -> float:
    """This image's peak RSS (``VmHWM``; ``ru_maxrss`` where ``/proc`` is missing)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _write() -> None:
    path = os.environ.get("BENCH_PEAK_FILE")
    if path:
        with open(path, "w") as f:
            f.write(f"{peak_rss_mb()}\n")


if __name__ == "__main__":
    atexit.register(_write)
    if sys.argv[1] == "-m":
        sys.argv = [sys.argv[2], *sys.argv[3:]]
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    else:
        sys.argv = sys.argv[1:]
        runpy.run_path(sys.argv[0], run_name="__main__")
