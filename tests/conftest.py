"""Strict numerics for the whole suite: rank promotion raises, key reuse is checked, and
warnings are errors (pyproject's filterwarnings)."""

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
