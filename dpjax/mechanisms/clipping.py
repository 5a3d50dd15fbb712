"""Clipping: the maps that bound what one record can put into a statistic.

Every per-record quantity that enters a privatised statistic passes through :func:`sanitize`
(directly or through the clipping below), so no record, however extreme, can put a NaN or an
infinity into a sum; :func:`clip_l2` and :func:`clip_linf` then bound it, without over- or
underflow for any input. :func:`clipped_outer_mean` is the clipped mean of rank-one per-record
terms, returned with its sensitivity; :func:`records_dot` is the sum over records of such terms
(``X^T X``, ``X^T y``) that every bundled estimator forms over many records, summed in blocks so
that float32 keeps its accuracy at any number of records (see its docstring).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from dpjax.mechanisms.statistics import BoundedStatistic

__all__ = ["clip_l2", "clip_linf", "clipped_outer_mean", "clipped_outer_mean_from_sum",
           "clipped_outer_sum", "l2_norm", "records_dot", "rows_dot", "sanitize"]

# the most records one matrix product sums: XLA's CPU dot of a batch (a vmap over repetitions)
# with a contraction of about 1e6 records lost 5e-4 of its value in float32 (measured, jax 0.10,
# two columns: a sum of positive terms); its error grows with the contraction (blocks of 1024:
# 1.3e-7, 4096: 2.4e-7, 32768: 3.6e-6)
RECORDS_BLOCK = 4096
# the most elements of the blocks' products held at once (16 MB in float32): a wide product
# takes larger blocks (the wide products measured there kept about 1e-6 unblocked)
RECORDS_PARTS = 1 << 22
# the records of one product in rows_dot: every block the same compiled product
ROWS_BLOCK = 256


def rows_dot(x: jax.Array, w: jax.Array) -> jax.Array:
    """``x @ w`` for records ``x`` of shape ``(n, k)`` and ``w`` of shape ``(k,)`` or ``(k, m)``,
    each record's products computed alike whatever ``n``: the first ``r`` rows of
    ``rows_dot(x, w)`` are ``rows_dot(x[:r], w)`` bit for bit. XLA's CPU matrix product is not
    so (it picks its blocking and vectorisation from the whole shape, and a multiply-and-sum
    likewise: the first records of a larger product differ in their last bits), so this one
    runs the product over blocks of :data:`ROWS_BLOCK` records in a loop, every block the same
    compiled product (the last padded with zero records, dropped). A simulator that says it is
    prefix-stable (:func:`dpjax.models.prefix_stable`) forms its records' products with it
    (measured on the bundled studies' simulators: within 20% of the plain product, most of a
    draw's time being its random numbers)."""
    x, w = jnp.asarray(x), jnp.asarray(w)
    if x.ndim != 2 or w.ndim not in (1, 2) or x.shape[1] != w.shape[0]:
        raise ValueError(f"rows_dot needs x of shape (n, k) and w of shape (k,) or (k, m); "
                         f"got {x.shape} and {w.shape}")
    n, k = x.shape
    blocks = -(-n // ROWS_BLOCK)
    xb = jnp.pad(x, ((0, blocks * ROWS_BLOCK - n), (0, 0))).reshape(blocks, ROWS_BLOCK, k)
    out = jax.lax.map(lambda block: block @ w, xb)
    return out.reshape((blocks * ROWS_BLOCK,) + out.shape[2:])[:n]


def records_dot(a: jax.Array, b: jax.Array, records_axis: int = 0) -> jax.Array:
    """``sum_i a_i b_i^T`` over the records ``i``: ``a^T b`` for ``(n, k)`` and ``(n, m)``
    factors (``b`` may be ``(n,)``: then ``a^T b``, shape ``(k,)``), or ``a b^T`` for ``(k, n)``
    and ``(m, n)`` with ``records_axis=1``.

    Summed in blocks of :data:`RECORDS_BLOCK` records whose products a reduction then adds:
    one matrix product over a million records in float32 loses about 5e-4 of a sum of positive
    terms on XLA's CPU backend once it runs batched (under ``vmap``, as every study's
    repetitions do), enough to move an ``epsilon = inf`` error by several standard errors at
    ``n = 1e7``; blocked, the sum keeps about 2e-7. The blocks' products take at most
    :data:`RECORDS_PARTS` elements (a wide product takes fewer, larger blocks). Up to
    :data:`RECORDS_BLOCK` records it is one plain product (``a^T b``, or ``b a`` for a vector
    ``b``: the faster layout of XLA's CPU dot there).
    Padding the last block with zero records adds nothing.
    """
    if records_axis not in (0, 1):
        raise ValueError(f"records_dot: records_axis must be 0 or 1; got {records_axis}")
    if records_axis == 1:
        a, b = a.T, b.T
    vector = b.ndim == 1
    if a.ndim != 2 or b.ndim not in (1, 2) or a.shape[0] != b.shape[0]:
        raise ValueError(f"records_dot needs factors with one records axis of the same length; "
                         f"got {a.shape} and {b.shape}")
    n = a.shape[0]
    width = a.shape[1] * (1 if vector else b.shape[1])
    blocks = min(-(-n // RECORDS_BLOCK), max(1, RECORDS_PARTS // max(width, 1)))
    if blocks < 2:
        # a vector as the left factor: XLA's CPU dot of a.T @ b took 1.65x the time of b @ a
        # for 32 x 10,000 blocks of a design (measured, jax 0.10)
        return b @ a if vector else a.T @ b
    # a number of equal blocks that divides n where one is near (padding copies the factors:
    # measured on a large design, XLA then holds it twice), else balanced blocks, padded
    blocks = next((g for g in range(blocks, blocks + blocks // 4 + 1) if n % g == 0), blocks)
    size = -(-n // blocks)
    pad = blocks * size - n
    if pad:
        a = jnp.pad(a, ((0, pad), (0, 0)))
        b = jnp.pad(b, ((0, pad),) + ((0, 0),) * (b.ndim - 1))
    a = a.reshape(blocks, size, a.shape[1])
    if vector:
        parts = jnp.einsum("gr,gri->gi", b.reshape(blocks, size), a)
    else:
        parts = jnp.einsum("gri,grj->gij", a, b.reshape(blocks, size, b.shape[1]))
    return jnp.sum(parts, axis=0)


def sanitize(x: jax.Array) -> jax.Array:
    """Map NaN to 0 and +-inf to +-the largest finite value of ``x``'s dtype (elementwise).

    A deterministic function of its input that is the identity on finite values. Every per-record
    quantity that enters a privatised statistic passes through it (directly or through the
    clipping helpers below), so no record, however extreme, can put a NaN or an infinity into a
    sum: ``inf - inf`` or ``0 * inf`` inside an E-step weight, an overflowing inner product or
    an overflowing residual all become finite values, which the clipping then bounds. The
    mapped value need not be "right" for such a record: privacy only needs every record's
    contribution to be finite and inside the declared bound.
    """
    return jnp.nan_to_num(x, nan=0.0)


def clip_linf(x: jax.Array, bound: Any) -> jax.Array:
    """Coordinate-wise projection onto ``[-bound, bound]`` (the papers' ``Pi_T``).

    Non-finite entries are first mapped by :func:`sanitize` (NaN to 0, +-inf to +-max), so the
    result is finite and inside the box for every input. ``bound = inf`` leaves finite values
    unchanged.
    """
    return jnp.clip(sanitize(x), -bound, bound)


def _pow2(k: jax.Array, dtype) -> jax.Array:
    """``2 ** k`` built from its exponent bits: exact, for integer ``k`` in the normal range
    (XLA's ``exp2`` and the reciprocals it substitutes for divisions are not exact)."""
    fi = jnp.finfo(dtype)
    itype = {2: jnp.int16, 4: jnp.int32, 8: jnp.int64}[jnp.dtype(dtype).itemsize]
    bias = fi.maxexp - 1
    return jax.lax.bitcast_convert_type((k + bias).astype(itype) << fi.nmant, dtype)


def _scaled_l2(x: jax.Array, axis) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(u, k, r)`` with ``u = x * 2**k`` and ``r = ||u||_2`` along ``axis`` (keepdims), so
    ``||x||_2 = r * 2**-k``, computed without overflow or underflow.

    The naive ``sqrt(sum x^2)`` overflows to inf for entries beyond ~1e19 (float32) and
    underflows to 0 below ~1e-19 (XLA on CPU flushes denormals to zero): a clip factor
    ``min(1, C / norm)`` would then be 1 and let an unclipped term through. Dividing by the
    largest magnitude is not safe either: XLA turns ``x / m`` into ``x * (1 / m)``, and ``1 / m``
    is flushed to zero for ``m`` beyond ~3e38. So ``x`` is scaled by an exact power of two,
    ``2**k`` with ``k`` read off the exponent bits of ``max |x|`` and chosen so that
    ``2**k`` is a normal number and ``max |u|`` lies in ``[2, 4)``: then ``2 <= r <= 4 sqrt(n)``
    for a row with a normal largest entry, and ``r`` is tiny or 0 only for rows of denormals.
    Non-finite entries are sanitised first.
    """
    x = sanitize(x)
    m = jnp.max(jnp.abs(x), axis=axis, keepdims=True)
    fi = jnp.finfo(x.dtype)
    itype = {2: jnp.int16, 4: jnp.int32, 8: jnp.int64}[x.dtype.itemsize]
    bias = fi.maxexp - 1
    biased = jnp.maximum((jax.lax.bitcast_convert_type(m, itype) >> fi.nmant) & (2 * bias + 1), 1)
    k = bias + 1 - biased  # in [-(bias - 1), bias]: 2**k is normal
    u = x * _pow2(k, x.dtype)
    r = jnp.sqrt(jnp.sum(jnp.square(u), axis=axis, keepdims=True))
    return u, k, r


def _log2_norm(k: jax.Array, r: jax.Array) -> jax.Array:
    """``log2`` of the norm ``r * 2**-k`` (``-inf`` for a zero row); finite where the norm is."""
    return jnp.log2(r) - k.astype(r.dtype)


def l2_norm(x: jax.Array, axis: int | tuple[int, ...] = -1) -> jax.Array:
    """The l2 norm along ``axis`` without intermediate overflow or underflow.

    The result is ``inf`` only when the norm itself exceeds the dtype's range; it is never NaN
    (non-finite entries are sanitised first).
    """
    _, k, r = _scaled_l2(x, axis)
    half = k // 2  # two exact factors, each a normal number
    return jnp.squeeze(r * _pow2(-half, r.dtype) * _pow2(half - k, r.dtype), axis=axis)


def clip_l2(x: jax.Array, bound: Any, axis: int | tuple[int, ...] = -1) -> jax.Array:
    """Project onto the l2 ball of radius ``bound`` along ``axis`` (per record).

    ``axis=(-2, -1)`` clips matrices in Frobenius norm. A row inside the ball is returned
    unchanged; a row outside is ``u * (bound / r)`` with ``u = x * 2**k`` and ``r = ||u||``
    (see :func:`_scaled_l2`), whose norm is ``bound`` up to rounding for every input: entries
    near the dtype's maximum, denormals, rows whose naive squared norm over- or underflows, and
    NaN or infinities (sanitised). Zero rows stay zero; ``bound = inf`` leaves finite rows
    unchanged. The inside/outside test compares ``log2`` of the norm with ``log2(bound)``, so it
    cannot over- or underflow.
    """
    u, k, r = _scaled_l2(x, axis)
    bound = jnp.asarray(bound, x.dtype)
    inside = _log2_norm(k, r) <= jnp.log2(bound)
    clipped = u * (bound / jnp.where(r > 0, r, jnp.ones_like(r)))
    return jnp.where(inside, sanitize(x), clipped)


def clipped_outer_mean(a: jax.Array, b: jax.Array, bound: Any, records_axis: int = 0,
                       count: Any = None) -> BoundedStatistic:
    r"""``(1/n) sum_i CLIP_bound(a_i b_i^T)`` in Frobenius norm, with its replace-one sensitivity.

    Each record contributes the rank-one matrix ``a_i b_i^T`` (``a`` is ``(n, k)``, ``b`` is
    ``(n, m)``), clipped to the Frobenius ball of radius ``bound``:
    ``CLIP_C(G) = G min(1, C / ||G||_F)``. For a rank-one matrix
    ``||a_i b_i^T||_F = ||a_i||_2 ||b_i||_2``, so the clipped mean is
    ``a^T diag(f) b / n`` with ``f_i = min(1, C / (||a_i|| ||b_i||))``: the same value as
    ``bounded_mean(clip_l2(a[:, :, None] * b[:, None, :], C, axis=(-2, -1)), 2 C, "l2")``, in
    ``O(n (k + m))`` memory instead of ``O(n k m)``.

    Privacy: every clipped term lies in the Frobenius ball of radius ``C``, so replacing one record
    moves the mean by at most ``2 C / n`` in Frobenius norm (= the l2 norm of the flattened
    matrix, the norm i.i.d. Gaussian noise per entry is calibrated in). ``n`` is the public shape.
    ``bound = inf`` is a no-op (infinite sensitivity; only for the non-private limit).

    Args:
        a: ``(n, k)`` left factors.
        b: ``(n, m)`` right factors.
        bound: the clipping threshold ``C > 0`` (array is fine).
        count: the public number of records ``n`` the mean divides by (default: the shape);
            a runtime count for padded data (:class:`dpjax.base.Padded`), whose padded rows
            the caller has set to zero (a zero factor makes a zero term).

    Returns:
        A :class:`BoundedStatistic` with value ``(k, m)``, l2 sensitivity ``2 C / n``, replace-one.
    """
    r = records_axis
    _check_outer_factors(a, b, r, "clipped_outer_mean")
    n = a.shape[r] if count is None else count
    bound = jnp.asarray(bound, a.dtype)
    return clipped_outer_mean_from_sum(clipped_outer_sum(a, b, bound, r), bound, n)


def clipped_outer_mean_from_sum(total: jax.Array, bound: Any, n: Any) -> BoundedStatistic:
    """:func:`clipped_outer_mean` from the sum of the clipped terms (:func:`clipped_outer_sum`,
    perhaps added up over blocks of records, :func:`dpjax.base.fold_rows`) and the public number
    of records ``n``: the mean ``total / n`` with its l2 sensitivity ``2 bound / n``."""
    return BoundedStatistic(total / n, 2.0 * jnp.asarray(bound) / n, "l2", "replace-one")


def _check_outer_factors(a: jax.Array, b: jax.Array, r: int, where: str) -> None:
    if r not in (0, 1) or a.ndim != 2 or b.ndim != 2 or a.shape[r] != b.shape[r]:
        raise ValueError(
            f"{where} needs a (n, k) and b (n, m) (records_axis=0) or a (k, n) and "
            f"b (m, n) (records_axis=1); got {a.shape} and {b.shape}, records_axis={r}"
        )


def clipped_outer_sum(a: jax.Array, b: jax.Array, bound: Any, records_axis: int = 0
                      ) -> jax.Array:
    r"""``sum_i CLIP_bound(a_i b_i^T)`` in Frobenius norm: the sum of :func:`clipped_outer_mean`
    (shape ``(k, m)``), for a mean over several blocks of records (a padded step,
    :func:`dpjax.base.fold_rows`) that :func:`clipped_outer_mean_from_sum` then divides by the
    public count. A zero factor makes a zero term (padded rows set to zero add nothing).
    Arguments as :func:`clipped_outer_mean`'s.
    """
    r = records_axis
    _check_outer_factors(a, b, r, "clipped_outer_sum")
    f = 1 - r
    # With the overflow-free factorisation of _scaled_l2 (a_i = u_a 2**-k_a, ||u_a|| = r_a):
    # a term inside the ball keeps its raw factors; a term outside becomes
    # u_a u_b^T * C / (r_a r_b), of norm C up to rounding, whatever the magnitudes of a_i and b_i
    # (entries near the dtype's maximum, denormals, a product of norms that over- or underflows).
    ua, ka, ra = _scaled_l2(a, f)
    ub, kb, rb = _scaled_l2(b, f)
    bound = jnp.asarray(bound, a.dtype)
    # log2 ||a_i b_i^T||_F, exact in its exponent part: no product of norms can over- or underflow
    inside = _log2_norm(ka, ra) + _log2_norm(kb, rb) <= jnp.log2(bound)  # (n, 1) or (1, n)
    rr = ra * rb
    left = jnp.where(inside, sanitize(a), ua * (bound / jnp.where(rr > 0, rr, jnp.ones_like(rr))))
    right = jnp.where(inside, sanitize(b), ub)
    return records_dot(left, right, r)
