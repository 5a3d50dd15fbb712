"""The XLA flags of the test suite, checked against the installed jaxlib (no jax import here:
tests/conftest.py sets ``XLA_FLAGS`` from these before JAX starts).

XLA aborts a process whose ``XLA_FLAGS`` names a flag it does not know ("Unknown flag in
XLA_FLAGS"), and flags come and go between releases (``--xla_cpu_use_fusion_emitters`` is gone
from XLA 0.11). So the suite's flags are probed once, in a subprocess with the installed jaxlib:
flags that XLA rejects are dropped, and the CPU compiler flags are kept only when the tests run
on the CPU backend (on a GPU they would change that backend's compiler, or mean nothing)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

#: several CPU devices for the sharding tests (read by XLA's CPU client only: harmless on any
#: other backend)
DEVICE_FLAGS = ("--xla_force_host_platform_device_count=4",)
#: cheaper compiles for the CPU backend: the suite is dominated by compile time at its small
#: shapes. The backend pass at level 0, and XLA's older LLVM IR emitters instead of its MLIR
#: fusion emitters (the same programs, compiled in about half the time; test_dp_iv +
#: test_robust_mean + test_ldp_sparse 142 s -> 102 s on 2 cores) where this XLA has the choice.
CPU_COMPILER_FLAGS = ("--xla_backend_optimization_level=0",
                      "--xla_cpu_use_fusion_emitters=false")

# Set before jax is imported: the probe initialises the backend and compiles one small program
# (XLA parses XLA_FLAGS when the client starts and when the first program compiles), and prints
# the backend it got. GPU memory is not preallocated by a probe.
_PROBE = """
import jax, json
jax.jit(lambda x: x + 1)(1.0).block_until_ready()
print(json.dumps({"backend": jax.default_backend()}))
"""
_UNKNOWN = re.compile(r"Unknown flags? in XLA_FLAGS:?(.*)")


def _probe(flags: list[str], env: dict[str, str]) -> tuple[str | None, list[str] | None]:
    """``(backend, None)`` when a process with ``XLA_FLAGS=flags`` starts JAX and compiles;
    ``(None, rejected)`` when XLA rejects flags (``rejected``: those its message names, empty
    when it names none); ``(None, None)`` when the process fails for another reason."""
    run_env = dict(env, XLA_FLAGS=" ".join(flags), XLA_PYTHON_CLIENT_PREALLOCATE="false")
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=run_env, capture_output=True,
                          text=True, timeout=300)
    if proc.returncode == 0:
        try:
            return json.loads(proc.stdout.strip().splitlines()[-1])["backend"], None
        except (IndexError, ValueError, KeyError):
            return None, None
    text = proc.stderr + proc.stdout
    found = _UNKNOWN.search(text)
    if found is None:
        return None, None
    named = [f.split("=", 1)[0] for f in found.group(1).split() if f.startswith("--")]
    return None, [f for f in flags if f.split("=", 1)[0] in named]


def supported_flags(candidates: tuple[str, ...] | list[str] = (*DEVICE_FLAGS,
                                                             *CPU_COMPILER_FLAGS),
                    *, cpu_only: tuple[str, ...] | list[str] = CPU_COMPILER_FLAGS,
                    env: dict[str, str] | None = None) -> tuple[list[str], str | None]:
    """``(flags, backend)``: the ``candidates`` that the installed XLA accepts, without the
    ``cpu_only`` ones unless the default backend (which ``backend`` names; None if JAX could
    not start at all) is the CPU. A flag XLA rejects is dropped: by the name its error message
    gives, else by trying the flags one at a time."""
    env = dict(os.environ if env is None else env)
    flags = list(candidates)
    backend, rejected = _probe(flags, env)
    for _ in range(len(candidates)):
        if backend is not None or not rejected:
            break
        flags = [f for f in flags if f not in rejected]
        backend, rejected = _probe(flags, env)
    if backend is None and flags:  # no name to go by: each flag on its own
        flags = [f for f in flags if _probe([f], env)[0] is not None]
        backend = _probe(flags, env)[0]
    if backend != "cpu":
        flags = [f for f in flags if f not in cpu_only]
    return flags, backend
