"""The suite's XLA flags (tests/xla_flags.py, set by tests/conftest.py) are those the installed
jaxlib accepts, the CPU compiler flags only on the CPU backend: an XLA that does not know a flag
aborts every process, so the tests would not start (XLA 0.11 and
``--xla_cpu_use_fusion_emitters``)."""

import json
import os
import subprocess
import sys

import jax
import pytest

from tests import xla_flags

UNKNOWN = "--xla_dpjax_no_such_flag=true"


@pytest.mark.skipif(os.environ.get("DPJAX_TEST_USER_XLA_FLAGS", "<unset>") != "<unset>",
                    reason="the user's own XLA_FLAGS are left as they are")
def test_the_suite_sets_only_flags_the_installed_xla_accepts():
    # XLA aborts a process that names a flag it does not know ...
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, "-c", "import jax; jax.jit(lambda x: x)(1.0)"],
                          env=env | {"XLA_FLAGS": UNKNOWN}, capture_output=True, text=True)
    assert proc.returncode != 0 and "Unknown flag" in proc.stderr, proc.stderr[-2000:]
    # ... so the probe drops it, and keeps what this XLA knows
    flags, backend = xla_flags.supported_flags(
        (*xla_flags.DEVICE_FLAGS, UNKNOWN, *xla_flags.CPU_COMPILER_FLAGS), env=env)
    assert UNKNOWN not in flags and list(xla_flags.DEVICE_FLAGS) == flags[:1]
    assert backend == jax.default_backend()
    # and this session runs with the probe's flags (the device count: 4 CPU devices)
    suite = json.loads(os.environ["DPJAX_TEST_XLA_FLAGS"])
    assert suite == {"flags": flags, "backend": backend}
    assert os.environ["XLA_FLAGS"].split() == flags
    if backend == "cpu":
        assert len(jax.devices()) == 4
        assert "--xla_backend_optimization_level=0" in flags  # known to every XLA dpjax allows


def test_flags_are_dropped_one_at_a_time_when_xla_names_none(monkeypatch):
    """An XLA whose message names no flag: each flag is tried on its own; CPU compiler flags
    are kept on the CPU backend only."""
    known = {"--a=1", "--cpu=0"}

    def probe(flags, env, backend="cpu"):
        if set(flags) <= known:
            return backend, None
        return None, []  # rejected, no name given

    monkeypatch.setattr(xla_flags, "_probe", probe)
    got = xla_flags.supported_flags(["--a=1", "--b=2", "--cpu=0"], cpu_only=["--cpu=0"])
    assert got == (["--a=1", "--cpu=0"], "cpu")
    monkeypatch.setattr(xla_flags, "_probe", lambda f, e: probe(f, e, backend="gpu"))
    got = xla_flags.supported_flags(["--a=1", "--b=2", "--cpu=0"], cpu_only=["--cpu=0"])
    assert got == (["--a=1"], "gpu")  # on a GPU the CPU compiler flags are not set


def test_cpu_bit_for_bit_tests_are_skipped_on_another_backend(monkeypatch):
    from tests import conftest

    class Item:
        def __init__(self, *marks):
            self.marks = marks

        def get_closest_marker(self, name):
            return name if name in self.marks else None

    for marks in [("cpu_bitwise",), ("production_compiler",)]:
        monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
        conftest.pytest_runtest_setup(Item(*marks))  # on the CPU: runs
        monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
        with pytest.raises(pytest.skip.Exception, match="bit-for-bit .* CPU .* on gpu"):
            conftest.pytest_runtest_setup(Item(*marks))
        conftest.pytest_runtest_setup(Item("quick"))  # any other test runs on any backend


@pytest.mark.slow
def test_the_gpu_quick_tier_script_runs_here(tmp_path):
    """benchmarks/gpu_quick.sh, on this machine's backend with one test of the quick tier: the
    versions, the probed flags and pytest's result in OUTDIR."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "DPJAX_TEST_XLA_FLAGS", "DPJAX_TEST_USER_XLA_FLAGS")}
    env |= {"WORKERS": "1", "PYTHON": sys.executable}
    proc = subprocess.run(["bash", "benchmarks/gpu_quick.sh", str(tmp_path), "240",
                           "-k", "test_a_chunk_round_trips_with_its_header"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "MISSING" not in (tmp_path / "versions.txt").read_text()
    assert "--xla_force_host_platform_device_count=4" in (tmp_path / "flags.txt").read_text()
    result = (tmp_path / "result.txt").read_text()
    assert "1 passed" in result and "pytest exit status 0" in result
