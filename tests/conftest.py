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
