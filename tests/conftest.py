"""Strict numerics for the whole suite: rank promotion raises, key reuse is checked, and
warnings are errors (pyproject's filterwarnings); and the quick tier (``QUICK`` below)."""

import gc
import os

# Several CPU devices for the sharding tests, and a cheaper XLA backend pass: the suite is
# dominated by compile time at its small shapes. Set before jax initialises its backend.
os.environ.setdefault(
    "XLA_FLAGS", "--xla_force_host_platform_device_count=4 --xla_backend_optimization_level=0"
)

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_debug_key_reuse", True)


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
