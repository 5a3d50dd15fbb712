r"""The exact support of the floating-point noise samplers dpjax draws from, and the privacy
floor that support implies.

The default noise path draws ``jax.random.normal`` (through :func:`dpjax._cpu_prng.normal`,
the same values) and ``jax.random.laplace`` in the dtype of the statistic. Both turn ``m``
random mantissa bits (``m = 23`` in float32, ``52`` in float64, ``7`` in bfloat16) into a
uniform ``u`` on a grid of ``2^m`` points and apply a monotone transform (``sqrt 2 erf_inv(u)``;
``sign(u) log1p(-|u|)``), so the noise takes at most ``2^m`` values, each with probability a
multiple of ``2^-m``, inside a bounded support ``[z_min, z_max]``: float32 normal
``[-5.4200, 5.2201]``, float32 Laplace ``[-15.54, 16.64]``, float64 normal ``[-8.29, 8.16]``.

For neighbours whose statistics differ by ``Delta`` in one coordinate, the event "output >
f(D') + z_max scale" has probability 0 under ``D'`` and ``P(Z > z_max - Delta / scale)`` under
``D``: whatever epsilon a ledger claims, the implemented release's delta is at least that
(:func:`delta_floor`). Every value here is computed by evaluating the sampler's own transform
(the same operations as JAX, in the same dtype) at its bit patterns, not from the
continuous distribution.
"""

from __future__ import annotations

import contextlib
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["SAMPLERS", "delta_floor", "describe", "mantissa_bits", "smallest_normal", "support",
           "tail_count"]

#: the noise kinds of the floating-point path and the JAX sampler each draws from
SAMPLERS: dict[str, str] = {
    "gaussian": "normal", "gaussian-zcdp": "normal", "laplace": "laplace", "noisy-ht": "laplace",
}

_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def _dtype(dtype) -> np.dtype:
    return jnp.dtype(dtype)


def smallest_normal(dtype) -> float:
    """The smallest normal number of ``dtype``: a noise scale below it is flushed to zero in
    the draw (XLA on CPU)."""
    return float(jnp.finfo(_dtype(dtype)).tiny)


def mantissa_bits(dtype) -> int:
    """The random bits per value of JAX's uniform in ``dtype`` (its mantissa width)."""
    return int(jnp.finfo(_dtype(dtype)).nmant)


@functools.cache
def _transform(sampler: str, dtype_name: str):
    """``k -> value``: JAX's ``normal`` / ``laplace`` from the mantissa index ``k`` (the random
    bits shifted right, as ``jax._src.random._uniform`` does), operation for operation."""
    dtype = _dtype(dtype_name)
    fi = jnp.finfo(dtype)
    uint = _UINT[fi.bits]
    one_bits = np.array(1.0, dtype).view(uint)
    if sampler == "normal":
        lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype), dtype=dtype)
    elif sampler == "laplace":
        lo = np.array(-1.0 + float(fi.epsneg), dtype)
    else:
        raise ValueError(f"unknown sampler {sampler!r}")
    hi = np.array(1.0, dtype)

    def f(k):
        float_bits = lax.bitwise_or(k.astype(uint), jnp.asarray(one_bits, dtype=uint))
        floats = lax.bitcast_convert_type(float_bits, dtype) - jnp.array(1.0, dtype)
        u = lax.max(jnp.asarray(lo), floats * (jnp.asarray(hi) - jnp.asarray(lo))
                    + jnp.asarray(lo))
        if sampler == "normal":
            return lax.mul(jnp.asarray(np.array(np.sqrt(2), dtype)), lax.erf_inv(u))
        return lax.mul(lax.sign(u), lax.log1p(lax.neg(lax.abs(u))))

    return jax.jit(f)


def _values(sampler: str, dtype, k) -> np.ndarray:
    """The sampler's values at mantissa indices ``k`` (as float64, exactly)."""
    dtype = _dtype(dtype)
    uint = _UINT[jnp.finfo(dtype).bits]
    # float64 draws happen only under x64; their ledger may be read outside it
    with jax.enable_x64(True) if dtype.itemsize == 8 else contextlib.nullcontext():
        out = _transform(sampler, dtype.name)(jnp.asarray(np.asarray(k, dtype=uint)))
        return np.asarray(out).astype(np.float64)


@functools.cache
def support(sampler: str, dtype=jnp.float32) -> tuple[float, float]:
    """``(z_min, z_max)``: the smallest and largest value the sampler can return in ``dtype``
    (its transform at the extreme bit patterns; the transform is monotone)."""
    m = mantissa_bits(dtype)
    v = _values(sampler, dtype, [0, 2**m - 1])
    return float(v.min()), float(v.max())


def _increasing(sampler: str) -> bool:
    return sampler == "normal"  # laplace: sign(u) log1p(-|u|) decreases in u


@functools.lru_cache(maxsize=4096)
def tail_count(sampler: str, dtype, t: float, upper: bool) -> int:
    """How many of the ``2^m`` equally likely bit patterns give a value ``> t`` (``upper``)
    or ``< t`` (not ``upper``): a bisection over the monotone transform (values compared in
    float64, exactly)."""
    m = mantissa_bits(dtype)
    n = 2**m
    inc = _increasing(sampler)

    def pred(k: int) -> bool:  # monotone in k: False ... False True ... True
        v = float(_values(sampler, dtype, [k])[0])
        hit = v > t if upper else v < t
        return hit if inc == upper else not hit

    lo, hi = 0, n  # the first k with pred(k) lies in [lo, hi] (hi = n: none)
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return n - lo if inc == upper else lo


def delta_floor(kind: str, ratio: float, dtype=jnp.float32) -> float:
    """The delta below which the implemented release of ``kind`` cannot go, at any epsilon.

    ``ratio = Delta / scale``: the true sensitivity over the noise scale drawn. With
    ``[z_min, z_max]`` the sampler's exact support in ``dtype``, two neighbours whose
    statistics differ by ``Delta`` in one coordinate (in either direction) give
    ``max(P(Z > z_max - ratio), P(Z < z_min + ratio))``, with ``Z`` the implemented sampler
    (probabilities exact multiples of ``2^-m``). 0 for kinds without a floating-point sampler
    (exact discrete noise, the l2-ball randomizer's integer coin); 1 where no noise is drawn
    (``ratio`` infinite: no guarantee).
    """
    sampler = SAMPLERS.get(kind)
    if sampler is None:
        return 0.0
    if not ratio < math.inf:
        return 1.0
    if not ratio > 0:
        return 0.0
    z_min, z_max = support(sampler, dtype)
    n = 2 ** mantissa_bits(dtype)
    above = tail_count(sampler, _dtype(dtype).name, z_max - ratio, True)
    below = tail_count(sampler, _dtype(dtype).name, z_min + ratio, False)
    return max(above, below) / n


def describe(kind: str, dtype=jnp.float32) -> str:
    """The sampler a kind draws from, its random bits and its exact support, in words."""
    sampler = SAMPLERS.get(kind)
    if sampler is None:
        return ""
    name = _dtype(dtype).name
    z_min, z_max = support(sampler, dtype)
    unit = "sigma" if sampler == "normal" else "b"
    return (f"JAX {name} {sampler} ({mantissa_bits(dtype)} random bits per value): support "
            f"[{z_min:.4f}, {z_max:.4f}] {unit}")
