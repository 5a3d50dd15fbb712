"""Strict numerics for the whole suite: rank promotion raises, key reuse is checked, and
warnings are errors (pyproject's filterwarnings)."""

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
