"""Strict numerics for the whole suite: rank promotion raises, key reuse is checked, and
warnings are errors (pyproject's filterwarnings); and the quick tier (``QUICK`` below)."""

import gc
import json
import os

from tests.xla_flags import CPU_COMPILER_FLAGS, supported_flags

# XLA flags, set before jax initialises its backend (tests/xla_flags.py): several CPU devices
# for the sharding tests, and cheaper compiles on the CPU backend (the suite is dominated by
# compile time at its small shapes). Only the flags the installed XLA accepts, and the CPU
# compiler flags only when the tests run on the CPU backend: probed once, in a subprocess, by
# the session's first process; xdist workers and the subprocesses below inherit the result
# (DPJAX_TEST_XLA_FLAGS) with the environment. A user's own XLA_FLAGS are left as they are.
# A test marked ``production_compiler`` asserts bit-for-bit equality of two programs, which
# holds for the compiler users run, not for every compiler setting (the older emitters fuse
# differently: 1 ulp apart); it runs in a subprocess with XLA's defaults (the device count
# aside), see ``pytest_pyfunc_call`` below. It and a test marked ``cpu_bitwise`` assert CPU
# bit-for-bit equality: skipped, with the reason, on another backend.
os.environ.setdefault("DPJAX_TEST_USER_XLA_FLAGS", os.environ.get("XLA_FLAGS", "<unset>"))
_USER_XLA_FLAGS = os.environ["DPJAX_TEST_USER_XLA_FLAGS"]
_PRODUCTION = os.environ.get("DPJAX_TEST_PRODUCTION_COMPILER") == "1"
if _USER_XLA_FLAGS == "<unset>":
    if "DPJAX_TEST_XLA_FLAGS" not in os.environ:
        _flags, _backend = supported_flags()
        os.environ["DPJAX_TEST_XLA_FLAGS"] = json.dumps({"flags": _flags, "backend": _backend})
    _SUITE_FLAGS = json.loads(os.environ["DPJAX_TEST_XLA_FLAGS"])["flags"]
    os.environ["XLA_FLAGS"] = " ".join(
        f for f in _SUITE_FLAGS if not (_PRODUCTION and f in CPU_COMPILER_FLAGS))

import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_debug_key_reuse", True)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Run a ``production_compiler`` test in a fresh process with XLA's default compiler
    settings (4 CPU devices, as here), unless this process already has them."""
    if _PRODUCTION or pyfuncitem.get_closest_marker("production_compiler") is None:
        return None
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if _USER_XLA_FLAGS != "<unset>":
        env["XLA_FLAGS"] = _USER_XLA_FLAGS
    env["DPJAX_TEST_PRODUCTION_COMPILER"] = "1"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-m", "production_compiler", pyfuncitem.nodeid],
        cwd=pyfuncitem.config.rootpath, env=env, capture_output=True, text=True)
    if out.returncode != 0 or not re.search(r"(^|\s)1 passed", out.stdout, re.MULTILINE):
        pytest.fail(f"in a process with XLA's default compiler settings:\n"
                    f"{out.stdout[-4000:]}{out.stderr[-2000:]}", pytrace=False)
    return True


def pytest_runtest_setup(item):
    """A CPU bit-for-bit assertion (``cpu_bitwise``, ``production_compiler``) is skipped on
    another backend, saying why."""
    if (item.get_closest_marker("cpu_bitwise") or item.get_closest_marker(
            "production_compiler")) and jax.default_backend() != "cpu":
        pytest.skip(f"asserts bit-for-bit equality of XLA CPU programs; the tests run on "
                    f"{jax.default_backend()}")


@pytest.fixture
def key():
    return jax.random.key(20261122)


@pytest.fixture(autouse=True)
def _no_persistent_compile_cache(monkeypatch):
    """In-process CLI calls must not switch JAX's persistent compilation cache on for the rest
    of the test session (tests/test_cli.py checks the cache in a subprocess)."""
    import dpjax.cli

    monkeypatch.setattr(dpjax.cli, "enable_compile_cache", lambda cache_dir=None: None)


def _mapped_regions() -> int | None:
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:  # no procfs (macOS, Windows): nothing to bound
        return None


def _max_map_count() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 65530


_REGION_LIMIT = _max_map_count() // 2


@pytest.fixture(autouse=True)
def _bounded_compiled_code():
    """XLA's CPU backend maps every compiled executable's code into memory regions of its own,
    and JAX keeps every executable alive in its caches. A test worker compiles thousands of
    them; past the kernel's limit on a process's mapped regions (vm.max_map_count, 65530 by
    default) the next compile segfaults inside XLA. Two CI runs crashed this way at about 90%
    of the suite (the surviving worker then held 28k regions and 5.6 GB); with the limit
    lowered to 12000, tests/test_ldp_gem.py + tests/test_dp_gem.py segfault in a compile
    without this fixture and pass with it. When a worker has used half of the limit, drop
    JAX's caches (60 DP-GEM tests: 14.9k regions, 1.7k after clearing)."""
    yield
    regions = _mapped_regions()
    if regions is not None and regions > _REGION_LIMIT:
        jax.clear_caches()
        gc.collect()


# ------------------------------------------------------------------------------------------
# The quick tier: ``python -m pytest -m quick -n 2`` after each change (README, Development).
# ------------------------------------------------------------------------------------------

#: The tests of the quick tier, by file: ``None`` for every test of the file, else the names of
#: its test functions (every parametrisation of each). Kept here, in one place, rather than as
#: marks scattered over files that others edit: the tier is every registered estimator's
#: conformance, every command-line contract and every results-file contract. A name that no
#: longer matches a test is an error, so a renamed test cannot drop out of the tier silently.
QUICK: dict[str, tuple[str, ...] | None] = {
    # every registered estimator: one run kernel and one vmapped kernel each
    "test_conformance.py": None,
    # the command line: every subcommand, error line and the installed script
    "test_cli.py": None,
    "test_cli_errors.py": None,
    # results files: the contract columns, resuming, checksummed chunks, file modes
    "test_sweep.py": ("test_results_files_have_the_contract_columns",
                      "test_rerun_resumes_from_completed_chunks"),
    "test_crash_safety.py": ("test_a_chunk_round_trips_with_its_header",
                             "test_every_truncation_is_detected",
                             "test_a_flipped_byte_is_detected_or_harmless",
                             "test_the_checksum_covers_the_data_not_just_the_zip_crc",
                             "test_a_chunk_of_another_setting_range_or_configuration_is_refused",
                             "test_files_that_are_not_verified_chunks_are_refused"),
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects: every collected test is seen here
def pytest_collection_modifyitems(config, items):
    """Mark the tests of ``QUICK`` with ``quick``; a ``QUICK`` name that matches no collected
    test of its (collected) file, or a quick test marked slow, is an error."""
    modules = {}
    for item in items:
        path = getattr(item, "path", None)
        if path is None or path.name not in QUICK:
            continue
        modules[path.name] = getattr(item, "module", None)
        wanted = QUICK[path.name]
        if wanted is None or getattr(item, "originalname", item.name) in wanted:
            if item.get_closest_marker("slow") is not None:
                raise pytest.UsageError(f"{item.nodeid} is marked slow and listed in QUICK")
            item.add_marker(pytest.mark.quick)
    for file, module in modules.items():
        stale = [n for n in QUICK[file] or () if not callable(getattr(module, n, None))]
        if stale:
            raise pytest.UsageError(f"tests/conftest.py QUICK names no test of {file}: {stale}")
