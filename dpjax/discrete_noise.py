r"""Floating-point-safe noise: exact discrete Laplace / discrete Gaussian samplers and
mechanisms that release a statistic on a public grid.

Why. A textbook mechanism ``x + b * laplace()`` computed in floating point leaks through the
low-order bits of its output: the set of floats it can return depends on ``x`` (Mironov 2012,
"On significance of the least significant bits for differential privacy"). The remedy used here
(Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential Privacy", CKS below)
is to make the noisy value an *integer* computed exactly: round the statistic to a public grid
``{k * grid}``, add exactly sampled integer noise, and scale back. The float output is then a
deterministic function of the exact integer release (post-processing), whatever its rounding.

Samplers (pure JAX, jittable, vmappable, explicit key as the first argument, integer and bit
operations only; loops are ``lax.while_loop``\ s that terminate with probability one and whose
number of iterations has geometric tails):

* :func:`discrete_laplace`: ``P(X = x) ∝ exp(-|x| / t)`` on the integers.
* :func:`discrete_gaussian`: ``P(X = x) ∝ exp(-x^2 / (2 sigma^2))`` on the integers
  (``N_Z(0, sigma^2)``), by rejection from a discrete Laplace (CKS Algorithm 3).

Both are built from one primitive, ``Bernoulli(exp(-gamma))`` for a rational ``gamma`` (CKS
Algorithm 1: for ``gamma`` in ``[0, 1]``, count ``K`` while ``Bernoulli(gamma / K)`` succeeds and
return ``[K odd]``; for ``gamma > 1`` multiply ``floor(gamma)`` draws of
``Bernoulli(exp(-1))``), where every ``Bernoulli(a / d)`` is ``[U < a]`` for a uniform integer
``U`` on ``{0, ..., d-1}`` obtained from 32 random bits by rejection (exactly uniform).

For many draws at once on the host, :func:`discrete_gaussian_batch` (NumPy) samples the same
law by CKS Algorithm 3 with a different Bernoulli: ``[U < exp(-gamma)]`` for a uniform ``U``
whose bits are drawn lazily, decided from float64 wherever a certified margin around the float
value of ``exp(-gamma)`` separates it from ``U``, and in exact rational arithmetic otherwise
(probability about ``2^-39`` per comparison); only the entries still pending take another pass.
It is what the local-DP secure releases use for their users' reports
(:func:`secure_gaussian_rows`), one batch for all users instead of a lock-step loop.

What is exact and what is not
-----------------------------
* Noise parameters are dyadic rationals, used exactly:

  - ``t``: the float32 value of ``t``. Every float32 in ``[T_MIN, T_MAX] = [2^-7, 2^20]`` is
    ``p / 2^j`` with integers ``p < 2^24``, ``j <= 30``; the sampler uses exactly that ``p/q``.
  - ``sigma^2``: the float32 value of ``sigma2`` rounded *up* to 20 significant bits
    (``n * 2^-e`` with ``2^19 <= n <= 2^20``; relative increase below ``2^-19``; exact whenever
    ``sigma2`` has at most 20 significant bits, e.g. 4, 30, 0.5). :func:`gaussian_sigma2_used`
    returns the value sampled, ``sigma2`` in ``[SIGMA2_MIN, SIGMA2_MAX] = [2^-10, 2^40]``.

* The samplers are exact for the distribution *conditioned on* ``|X| <= X_T``, which keeps
  every intermediate inside 32 bits (the block count is capped; exceeding it restarts the
  draw): ``X_T >= 2^30 - 2^20`` for the discrete Laplace (``t <= 2^20``), and ``X_T >= 1000
  sigma`` for the discrete Gaussian (``X_T >= min(2^30, 2^11 sigma) - 2 sigma``; the proposal
  is compared with ``sigma^2 / T`` in units of ``2^-f``, ``f <= 24``, and ``|Y| 2^f`` must fit in
  31 bits). The mass removed is below ``2 exp(-1023) < 1e-443`` (Laplace) and
  ``exp(-4 10^5)`` (Gaussian): this total variation distance to the untruncated law is the
  only inexactness. In the mechanisms it is an additive ``delta`` next to the pure DP / zCDP
  guarantee: ``delta <= P(|Z| > X_T - Delta)``, below ``1e-437`` for the Laplace mechanism
  (``Delta_1^Z <= 2^24``) and below ``exp(-10^5)`` for the Gaussian one when ``rho <= 10^5``
  (``Delta_2^Z <= 500 sigma``).
* Outside the supported ranges a concrete (host) parameter raises ``ValueError``; a traced one
  cannot raise, so the draw is the sentinel ``SENTINEL = -2^31`` (never a valid sample, since
  ``|X| < 2^30``) and the mechanisms return NaN (fail closed).

Mechanisms on a grid
--------------------
``grid`` must be a power of two (``2^k``, ``-64 <= k <= 64``), so that ``x / grid`` is exact in
floating point. The statistic ``x`` (any shape, ``d`` entries) is mapped to the integer vector
``k = round_half_up(x / grid) = floor(x / grid + 1/2)`` (computed exactly, see :func:`to_grid`),
clipped to ``[-2^30, 2^30]`` (a 1-Lipschitz map that cannot increase a sensitivity). For
replace-one neighbours ``x ~ x'`` with ``s_i = |x_i - x'_i| / grid``, monotonicity of
``floor(u + 1/2)`` gives ``|k_i - k'_i| <= ceil(s_i)`` per coordinate (and ``0 <= ceil(s_i) - s_i
< 1``, i.e. rounding adds less than one grid step per coordinate in l-infinity). Hence, with
``S_1 = Delta_1 / grid`` and ``S_2 = Delta_2 / grid``:

* l1: ``||k - k'||_1 <= Delta_1^Z := ceil(S_1) + d - 1`` (tight: ``sum ceil(s_i) < S_1 + d``
  and is an integer; attained with one coordinate moving ``S_1 - (d-1) eta`` and the others
  ``eta`` across half-points).
* l2: ``||k - k'||_2 <= ||s||_2 + ||ceil(s) - s||_2 <= S_2 + sqrt(d)``, so the integer
  ``||k - k'||_2^2 <= (Delta_2^Z)^2 := floor((S_2 + sqrt(d))^2)`` (``ceil(S_2)^2`` when
  ``d = 1``).

Calibration (the only place where a budget becomes a noise parameter):

* :func:`discrete_laplace_calibration`: ``t = Delta_1^Z / epsilon``. Adding i.i.d.
  ``DLap(t)`` noise to an integer query of l1 sensitivity ``Delta_1^Z`` is
  ``(Delta_1^Z / t)``-DP, since ``P(k + Z = y) / P(k' + Z = y) = exp((|y - k'|_1 - |y - k|_1) /
  t) <= exp(||k - k'||_1 / t)``.
* :func:`discrete_gaussian_calibration`: ``sigma^2 = (Delta_2^Z)^2 / (2 rho)``. Adding i.i.d.
  ``N_Z(0, sigma^2)`` noise to an integer query of l2 sensitivity ``Delta_2^Z`` is
  ``(Delta_2^Z)^2 / (2 sigma^2)``-zCDP (CKS Theorem 4; Theorem 14 for vectors).

Both round the parameter *up* (more noise), so the guarantee is never weaker than requested, and
report the value actually used in :class:`SecureNoise` (``epsilon = Delta_1^Z / t`` and
``rho = (Delta_2^Z)^2 / (2 sigma^2)`` exactly, see :meth:`SecureNoise.guarantee`). The
neighbouring relation is the one under which the caller's ``sensitivity`` holds (replace-one
throughout dpjax).

Limitations
-----------
* Randomness is ``jax.random``'s (threefry by default), consumed as uniform 32-bit words. The
  arithmetic is exact, but the guarantee also assumes the key is secret and unpredictable (seed
  it from ``secrets`` / ``os.urandom``, never from a constant); ``jax.random`` is not a
  certified cryptographic generator.
* Not constant-time: the number of loop iterations depends on the noise drawn (never on the
  statistic). An adversary who sees both the running time and the release learns more than the
  release: keep the running time unobservable to the adversary.
* All lanes of a call advance in lock step, so a call costs the *largest* number of steps over
  its draws (about 30-50 for the discrete Laplace and 100-150 for the discrete Gaussian at
  ``10^5`` draws, each step a few dozen integer operations per draw).
* Parameter ranges: ``t`` in ``[2^-7, 2^20]``, ``sigma^2`` in ``[2^-10, 2^40]``, integer
  sensitivities ``<= 2^24``, rounded queries clipped to ``|k| <= 2^30`` (grid units). The
  calibrations raise a too-small parameter to the minimum (more noise); a too-large one is an
  error: use a coarser grid.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from fractions import Fraction
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dpjax._validate import check_epsilon, check_positive, check_rho

__all__ = [
    "SENTINEL",
    "SIGMA2_MAX",
    "SIGMA2_MIN",
    "T_MAX",
    "T_MIN",
    "SecureNoise",
    "discrete_gaussian",
    "discrete_gaussian_calibration",
    "discrete_laplace",
    "discrete_laplace_calibration",
    "gaussian_sigma2_used",
    "integer_sensitivity_l1",
    "integer_sensitivity_l2_sq",
    "secure_gaussian_mechanism",
    "secure_laplace_mechanism",
    "secure_noise_parameters",
    "to_grid",
]

T_MIN: float = 2.0**-7
T_MAX: float = 2.0**20
SIGMA2_MIN: float = 2.0**-10
SIGMA2_MAX: float = 2.0**40
SENTINEL: int = -(2**31)

_SIGMA2_BITS = 20  # significant bits kept in sigma^2 (rounded up)
_X_MAX = 2**30 - 1  # |sample| bound (conditioning), so that |k + X| < 2^31
_K_MAX = 2.0**30  # |rounded query| bound
_SENS_MAX = 2**24  # integer sensitivities are exact in float32 up to here
_GRID_EXP = 64  # grid = 2^k with |k| <= 64

_PH_DRAW, _PH_B, _PH_L, _PH_ACCEPT, _PH_DONE = 0, 1, 2, 3, 4


# --------------------------------------------------------------------------------------------
# Exact arithmetic helpers (uint32 / int32 / exact float32 scalings)
# --------------------------------------------------------------------------------------------


def _pow2(e: jax.Array) -> jax.Array:
    """``2.0 ** e`` as float32, exact, for int32 ``e`` in ``[-126, 127]`` (built from its bits)."""
    return lax.bitcast_convert_type(
        jnp.left_shift(jnp.asarray(e, jnp.int32) + 127, 23), jnp.float32
    )


def _floor_log2(x: jax.Array) -> jax.Array:
    """``floor(log2(x))`` for positive normal float32 ``x``, exactly (from the exponent)."""
    _, exponent = jnp.frexp(x)
    return exponent - 1


def _uniform(word: jax.Array, m: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A uniform integer on ``{0, ..., m-1}`` from a uniform 32-bit ``word``, by rejection.

    ``ok`` is false on the ``2^32 mod m`` lowest words; conditional on ``ok`` the value
    ``word mod m`` is exactly uniform (the accepted words are ``m * floor(2^32 / m)`` in number).
    Rejected steps are simply retried with fresh words.
    """
    m = jnp.maximum(m, jnp.uint32(1))
    threshold = (jnp.uint32(0) - m) % m  # 2^32 mod m in uint32 arithmetic
    return word % m, word >= threshold


class _Proposal(NamedTuple):
    """Integer parameters of the discrete Laplace ``DLap(p/q)`` sampler (all 0-d)."""

    p: jax.Array  # uint32, scale numerator
    q: jax.Array  # uint32, scale denominator
    block: jax.Array  # uint32, L = max(1, floor(p/q))
    units: jax.Array  # int32, floor(L q / p): draws of Bernoulli(exp(-1)) in exp(-L/t)
    rem: jax.Array  # uint32, (L q) mod p: the fractional part of L/t is rem / p
    a_max: jax.Array  # int32, largest block count A with A L + L - 1 <= X_max


class _Accept(NamedTuple):
    """Integer parameters of the discrete Gaussian acceptance test (all 0-d)."""

    shift: jax.Array  # uint32 f': the proposal Y is compared with mu in units of 2^-f'
    mu: jax.Array  # uint32 M = mu 2^f'
    h: jax.Array  # uint32: x = P / 2^h
    kappa_num: jax.Array  # uint32 2^w
    kappa_den: jax.Array  # uint32 2 n


def _proposal(p: jax.Array, q: jax.Array, x_max: jax.Array) -> _Proposal:
    p = jnp.asarray(p, jnp.int32)
    q = jnp.asarray(q, jnp.int32)
    block = jnp.maximum(jnp.int32(1), p // q)
    lq = block * q  # <= max(p, q) <= 2^30
    a_max = (jnp.asarray(x_max, jnp.int32) - (block - 1)) // block
    return _Proposal(
        p.astype(jnp.uint32),
        q.astype(jnp.uint32),
        block.astype(jnp.uint32),
        lq // p,
        (lq % p).astype(jnp.uint32),
        a_max,
    )


def _laplace_pq(t: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``t = p / 2^j`` exactly, for float32 ``t`` in ``[2^-7, 2^20]`` (``2^23 <= p < 2^24``)."""
    j = 23 - _floor_log2(t)  # in [3, 30]
    p = jnp.ceil(t * _pow2(j)).astype(jnp.int32)  # t 2^j is an integer: the ceil is exact
    return p, jnp.left_shift(jnp.int32(1), j)


def _round_sigma2(sigma2: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Round float32 ``sigma2 > 0`` up to ``n 2^-e`` with ``2^19 <= n <= 2^20``; exact."""
    e = (_SIGMA2_BITS - 1) - _floor_log2(sigma2)
    n = jnp.ceil(sigma2 * _pow2(e))
    return n * _pow2(-e), n.astype(jnp.int32), e


def _gaussian_params(sigma2: jax.Array) -> tuple[_Proposal, _Accept]:
    r"""Parameters of CKS Algorithm 3 for float32 ``sigma2``, used as ``sigma^2 = n 2^-e``.

    Proposal ``DLap(T)`` with ``T = 2^a``, ``a = floor((lg + 1) / 2)``, ``lg = floor(log2
    sigma^2)``, so ``T / sigma`` lies in ``(1/sqrt 2, sqrt 2]``. Then ``mu = sigma^2 / T =
    n 2^-(e+a)``, and with ``f = e + a``, ``f' = max(f, 0)``, ``M = mu 2^f'`` (an integer) and
    ``P = | |Y| 2^f' - M |``, the acceptance exponent is

        gamma = (|Y| - mu)^2 / (2 sigma^2) = kappa x^2,   x = P / 2^h,   kappa = 2^w / (2 n),

    with ``w = 2h + e - 2f'`` chosen in ``{floor(log2 2n) - 1, floor(log2 2n)}`` by parity, so
    ``kappa`` lies in ``(1/4, 1]``.
    """
    _, n, e = _round_sigma2(sigma2)
    lg = _floor_log2(sigma2)
    a = jnp.floor_divide(lg + 1, 2)
    p = jnp.where(a >= 0, jnp.left_shift(jnp.int32(1), jnp.maximum(a, 0)), 1)
    q = jnp.where(a >= 0, 1, jnp.left_shift(jnp.int32(1), jnp.maximum(-a, 0)))
    f = e + a
    shift = jnp.maximum(f, 0)
    mu = jnp.left_shift(n, shift - f)
    log2_2n = jnp.where(n >= 2**_SIGMA2_BITS, _SIGMA2_BITS + 1, _SIGMA2_BITS)
    w = log2_2n - jnp.bitwise_and(log2_2n - e, 1)
    h = (w - e + 2 * shift) // 2
    x_max = jnp.minimum(jnp.int32(_X_MAX), jnp.right_shift(jnp.int32(2**31 - 1), shift))
    u32 = lambda v: jnp.asarray(v).astype(jnp.uint32)
    accept = _Accept(
        u32(shift), u32(mu), u32(h), u32(jnp.left_shift(jnp.int32(1), w)), u32(2 * n)
    )
    return _proposal(p, q, x_max), accept


# --------------------------------------------------------------------------------------------
# The sampler: one lock-step state machine over all lanes
# --------------------------------------------------------------------------------------------


class _State(NamedTuple):
    key: jax.Array
    phase: jax.Array  # int32
    b: jax.Array  # uint32: offset in the block
    sign: jax.Array  # uint32: 1 = negative
    count: jax.Array  # int32: A, the number of whole blocks
    k: jax.Array  # uint32: CKS Algorithm 1 counter K
    units: jax.Array  # int32: Bernoulli(exp(-1)) factors still to draw in this job
    i: jax.Array  # uint32: repetition counters (N^2 factors in the acceptance test)
    j: jax.Array  # uint32
    n_rep: jax.Array  # uint32: N
    dist: jax.Array  # uint32: P, the scaled distance | |Y| - mu |
    y: jax.Array  # int32: the proposal
    out: jax.Array  # int32


class _Phases(NamedTuple):
    """Per-lane masks: the phase each lane is in."""

    is_draw: jax.Array
    is_b: jax.Array
    is_l: jax.Array
    is_acc: jax.Array
    in_job: jax.Array  # B, L or ACCEPT: running a product of Bernoulli(exp(-gamma)) trials
    unit: jax.Array  # the job is still in its gamma = 1 trials


def _phases(c: _State) -> _Phases:
    """The phase masks, named once so that every part of a step reads the same lanes."""
    ph = c.phase
    is_draw, is_b, is_l = ph == _PH_DRAW, ph == _PH_B, ph == _PH_L
    is_acc = ph == _PH_ACCEPT
    in_job = is_b | is_l | is_acc
    return _Phases(is_draw, is_b, is_l, is_acc, in_job, in_job & (c.units > 0))


def _trial(
    prop: _Proposal, acc: _Accept | None, c: _State, m: _Phases, words: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """One CKS Algorithm 1 step per lane: the uniforms ``u0``, ``u1`` (``DRAW`` reads them too),
    ``success`` with probability ``(a0/d0) (1/K) [(a2/d2) (a3/d3)]`` set by the phase, and
    ``ok`` (false: some word fell in its rejection zone, and the lane retries)."""
    one = jnp.ones_like(c.k)
    denom = jnp.left_shift(c.n_rep, acc.h) if acc is not None else one  # N 2^h
    a0 = jnp.where(
        m.unit, one, jnp.where(m.is_b, c.b * prop.q, jnp.where(m.is_l, prop.rem, c.dist))
    )
    d0 = jnp.where(m.is_draw, 2 * prop.block, jnp.where(m.is_acc, denom, prop.p))
    d0 = jnp.where(m.unit, one, d0)
    d1 = jnp.where(m.is_draw, prop.p, jnp.where(m.in_job, c.k, one))
    u0, ok = _uniform(words[0], d0)
    u1, ok1 = _uniform(words[1], d1)
    ok = ok & ok1
    success = (u0 < a0) & (u1 == 0)
    if acc is not None:
        main_acc = m.is_acc & ~m.unit
        u2, ok2 = _uniform(words[2], jnp.where(main_acc, denom, one))
        u3, ok3 = _uniform(words[3], jnp.where(main_acc, acc.kappa_den, one))
        ok = ok & ok2 & ok3
        success = success & (u2 < jnp.where(main_acc, c.dist, one))
        success = success & (u3 < jnp.where(main_acc, acc.kappa_num, one))
    return u0, u1, ok, success


class _Draw(NamedTuple):
    """What ``DRAW`` drew."""

    start: jax.Array  # the lane drew (DRAW and no retry)
    b: jax.Array  # B ~ U{0..L-1}
    sign: jax.Array  # 1 = negative
    first_step: jax.Array  # the first Algorithm-1 step for exp(-B/t) succeeded


def _draw(prop: _Proposal, m: _Phases, u0: jax.Array, u1: jax.Array, ok: jax.Array) -> _Draw:
    """``DRAW``: ``B`` and the sign from one uniform on ``{0..2L-1}``, and the first
    Algorithm-1 step for ``exp(-B/t)`` from the second word."""
    b_new = u0 % prop.block
    first_step = u1 < b_new * prop.q  # Bernoulli(B q / p)
    return _Draw(m.is_draw & ok, b_new, u0 // prop.block, first_step)


class _Job(NamedTuple):
    """A job's counters after this step, and whether it ended."""

    ok: jax.Array  # the product of trials ended in success
    fail: jax.Array  # ... in failure
    units: jax.Array
    k: jax.Array
    i: jax.Array
    j: jax.Array


def _job_progress(
    prop: _Proposal, c: _State, m: _Phases, ok: jax.Array, success: jax.Array
) -> _Job:
    """CKS Algorithm 1 bookkeeping for the lanes in a job: advance the counter ``K`` and the
    trial counters, and say which jobs ended in success or failure."""
    one = jnp.ones_like(c.k)
    live = m.in_job & ok
    stop = live & ~success
    odd = jnp.bitwise_and(c.k, 1) == 1
    passed = stop & odd
    job_fail = stop & ~odd
    unit_pass = passed & m.unit
    units = jnp.where(unit_pass, c.units - 1, c.units)
    main = passed & ~m.unit
    j1 = c.j + 1
    wrap = j1 == c.n_rep
    job_ok = (main & wrap & (c.i + 1 == c.n_rep)) | (
        unit_pass & (units == 0) & m.is_l & (prop.rem == 0)  # no fractional part left
    )
    k_after_stop = jnp.where(unit_pass & (units > 0), jnp.uint32(2), one)  # K=1 is sure for gamma=1
    k = jnp.where(live & success, c.k + 1, jnp.where(stop, k_after_stop, c.k))
    j = jnp.where(main, jnp.where(wrap, 0, j1), c.j)
    i = jnp.where(main & wrap, c.i + 1, c.i)
    return _Job(job_ok, job_fail, units, k, i, j)


class _Moves(NamedTuple):
    """Each lane's transition this step, and what it carries into the next phase."""

    to_b: jax.Array
    b_ok: jax.Array  # B accepted: on to L
    l_again: jax.Array  # one more whole block
    a_next: jax.Array  # A + 1
    restart: jax.Array
    to_acc: jax.Array
    finish: jax.Array
    proposed: jax.Array  # a signed proposal y was formed
    y: jax.Array
    dist: jax.Array
    n_rep: jax.Array
    out: jax.Array


def _laplace_moves(prop: _Proposal, c: _State, m: _Phases, draw: _Draw, job: _Job) -> _Moves:
    """The discrete Laplace's transitions: ``B`` accepted (on to ``L``) or redrawn, one more
    block or the signed proposal ``y = +-(A L + B)``, which is the output (``-0`` and more than
    ``a_max`` blocks restart)."""
    to_b = draw.start & draw.first_step
    b_ok = (m.is_b & job.ok) | (draw.start & ~draw.first_step)
    b_fail = m.is_b & job.fail
    l_ok, l_fail = m.is_l & job.ok, m.is_l & job.fail
    a_next = c.count + 1
    truncated = l_ok & (a_next > prop.a_max)
    l_again = l_ok & ~truncated
    g = c.count * prop.block.astype(jnp.int32) + c.b.astype(jnp.int32)
    negative = c.sign == 1
    minus_zero = l_fail & negative & (g == 0)
    y_new = jnp.where(negative, -g, g)
    proposed = l_fail & ~minus_zero
    return _Moves(
        to_b=to_b,
        b_ok=b_ok,
        l_again=l_again,
        a_next=a_next,
        restart=b_fail | truncated | minus_zero,
        to_acc=jnp.zeros_like(draw.start),
        finish=proposed,
        proposed=proposed,
        y=y_new,
        dist=c.dist,
        n_rep=c.n_rep,
        out=jnp.where(proposed, y_new, c.out),
    )


def _acceptance_moves(acc: _Accept, c: _State, m: _Phases, job: _Job, mv: _Moves) -> _Moves:
    """The discrete Gaussian's test on the Laplace proposal: ``y`` at distance ``P > 0`` from
    ``mu`` enters ``ACCEPT`` with ``N = max(1, ceil(x))`` (``P = 0``: accepted at once); the
    test's end outputs ``y`` or restarts."""
    one = jnp.ones_like(c.k)
    abs_y = jnp.abs(mv.y).astype(jnp.uint32)
    scaled = jnp.left_shift(abs_y, acc.shift)
    dist_new = jnp.where(scaled >= acc.mu, scaled - acc.mu, acc.mu - scaled)
    half = jnp.left_shift(jnp.uint32(1), acc.h) - 1
    n_new = jnp.maximum(one, jnp.right_shift(dist_new + half, acc.h))
    accepted = (m.is_acc & job.ok) | (mv.proposed & (dist_new == 0))  # gamma = 0: accept
    return mv._replace(
        restart=mv.restart | (m.is_acc & job.fail),
        to_acc=mv.proposed & (dist_new > 0),
        finish=accepted,
        dist=dist_new,
        n_rep=n_new,
        out=jnp.where(m.is_acc & job.ok, c.y, jnp.where(accepted, mv.y, c.out)),
    )


def _next_state(prop: _Proposal, c: _State, draw: _Draw, job: _Job, mv: _Moves) -> _State:
    """The lanes' new phases and registers; a lane entering a phase starts a fresh job."""
    one = jnp.ones_like(c.k)
    to_l = mv.b_ok | mv.l_again
    phase = jnp.where(mv.to_b, _PH_B, c.phase)
    phase = jnp.where(to_l, _PH_L, phase)
    phase = jnp.where(mv.restart, _PH_DRAW, phase)
    phase = jnp.where(mv.to_acc, _PH_ACCEPT, phase)
    phase = jnp.where(mv.finish, _PH_DONE, phase)
    entering = mv.to_b | to_l | mv.restart | mv.to_acc | mv.finish
    k_enter = jnp.where(mv.to_b | (to_l & (prop.units > 0)), jnp.uint32(2), one)
    return _State(
        key=c.key,
        phase=phase,
        b=jnp.where(draw.start, draw.b, c.b),
        sign=jnp.where(draw.start, draw.sign, c.sign),
        count=jnp.where(mv.b_ok | mv.restart, 0, jnp.where(mv.l_again, mv.a_next, c.count)),
        k=jnp.where(entering, k_enter, job.k),
        units=jnp.where(to_l, prop.units, jnp.where(entering, 0, job.units)),
        i=jnp.where(entering, 0, job.i),
        j=jnp.where(entering, 0, job.j),
        n_rep=jnp.where(mv.to_acc, mv.n_rep, jnp.where(entering, one, c.n_rep)),
        dist=jnp.where(mv.to_acc, mv.dist, c.dist),
        y=jnp.where(mv.proposed, mv.y, c.y),
        out=mv.out,
    )


def _step(prop: _Proposal, acc: _Accept | None, c: _State, words: jax.Array) -> _State:
    """One random step for every lane (``words``: 2 uniform 32-bit words per lane, 4 for the
    Gaussian).

    Phases: ``DRAW`` draws ``B ~ U{0..L-1}`` and a sign from one word (``U{0..2L-1}``) and runs
    the first step of ``Bernoulli(exp(-B/t))``; ``B`` finishes it (accept ``B``, else redraw);
    ``L`` counts the successes ``A`` of ``Bernoulli(exp(-L/t))``; then ``G = A L + B`` has
    ``P(G = g) ∝ exp(-g/t)`` and the signed value (``-0`` rejected) is ``DLap(t)`` (CKS
    Algorithm 2 with blocks of length ``L``). For the Gaussian, ``ACCEPT`` runs
    ``Bernoulli(exp(-kappa x^2))`` as ``N^2`` factors ``Bernoulli(exp(-kappa (x/N)^2))``,
    ``N = max(1, ceil(x))``, and restarts on failure.

    A "job" is a product of ``Bernoulli(exp(-gamma))`` factors ("trials"): first ``units``
    trials with ``gamma = 1``, then ``N^2`` "main" trials, each by CKS Algorithm 1, whose step
    at counter ``K`` succeeds with probability ``(a0/d0) (1/K) [(a2/d2) (a3/d3)]``. A retry
    (some word in its rejection zone) leaves the lane unchanged.
    """
    m = _phases(c)
    u0, u1, ok, success = _trial(prop, acc, c, m, words)
    draw = _draw(prop, m, u0, u1, ok)
    job = _job_progress(prop, c, m, ok, success)
    moves = _laplace_moves(prop, c, m, draw, job)
    if acc is not None:
        moves = _acceptance_moves(acc, c, m, job, moves)
    return _next_state(prop, c, draw, job, moves)


def _run(key: jax.Array, shape: tuple[int, ...], prop: _Proposal, acc: _Accept | None):
    zeros_u = jnp.zeros(shape, jnp.uint32)
    zeros_i = jnp.zeros(shape, jnp.int32)
    init = _State(
        key=key,
        phase=jnp.full(shape, _PH_DRAW, jnp.int32),
        b=zeros_u,
        sign=zeros_u,
        count=zeros_i,
        k=zeros_u + 1,
        units=zeros_i,
        i=zeros_u,
        j=zeros_u,
        n_rep=zeros_u + 1,
        dist=zeros_u,
        y=zeros_i,
        out=zeros_i,
    )

    def body(c: _State) -> _State:
        key, sub = jax.random.split(c.key)
        words = jax.random.bits(sub, (2 if acc is None else 4, *shape), jnp.uint32)
        return _step(prop, acc, c._replace(key=key), words)

    def cond(c: _State) -> jax.Array:
        return jnp.any(c.phase != _PH_DONE)

    return lax.while_loop(cond, body, init).out


def _laplace_core(key: jax.Array, shape: tuple[int, ...], t: jax.Array) -> jax.Array:
    valid = (t >= T_MIN) & (t <= T_MAX)  # False for NaN
    p, q = _laplace_pq(jnp.where(valid, t, jnp.float32(1.0)))
    out = _run(key, shape, _proposal(p, q, jnp.int32(_X_MAX)), None)
    return jnp.where(valid, out, jnp.int32(SENTINEL))


def _gaussian_core(key: jax.Array, shape: tuple[int, ...], sigma2: jax.Array) -> jax.Array:
    valid = (sigma2 >= SIGMA2_MIN) & (sigma2 <= SIGMA2_MAX)
    prop, acc = _gaussian_params(jnp.where(valid, sigma2, jnp.float32(1.0)))
    out = _run(key, shape, prop, acc)
    return jnp.where(valid, out, jnp.int32(SENTINEL))


_laplace_jit = jax.jit(_laplace_core, static_argnums=1)
_gaussian_jit = jax.jit(_gaussian_core, static_argnums=1)


# --------------------------------------------------------------------------------------------
# Host-side validation
# --------------------------------------------------------------------------------------------


def _concrete(x: Any) -> np.ndarray | None:
    """The value of ``x`` if it is known on the host, ``None`` if it is traced."""
    try:
        return np.asarray(x)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def _check_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError as exc:
        raise TypeError(f"shape must be a tuple of non-negative integers; got {shape!r}") from exc
    if any(s < 0 for s in shape):
        raise ValueError(f"shape must be a tuple of non-negative integers; got {shape}")
    return shape


def _scalar_f32(x: Any, name: str) -> jax.Array:
    arr = jnp.asarray(x)
    if arr.ndim != 0:
        raise ValueError(f"{name} must be a scalar; got shape {arr.shape}")
    if not (jnp.issubdtype(arr.dtype, jnp.floating) or jnp.issubdtype(arr.dtype, jnp.integer)):
        raise TypeError(f"{name} must be a real number; got dtype {arr.dtype}")
    return arr.astype(jnp.float32)


def _check_range(value: Any, name: str, low: float, high: float, what: str) -> None:
    host = _concrete(value)
    if host is None:
        return
    if host.ndim != 0:
        raise ValueError(f"{name} must be a scalar; got shape {host.shape}")
    v = float(np.float32(host))
    if not (low <= v <= high):
        raise ValueError(
            f"{name} must lie in [{low:g}, {high:g}] (= [2^{math.log2(low):g}, "
            f"2^{math.log2(high):g}]) {what}; got {v:g}"
        )


def _host_scalar(x: Any, name: str) -> float:
    host = _concrete(x)
    if host is None:
        raise TypeError(
            f"{name} must be a concrete number known on the host (a Python or NumPy scalar): it "
            "sets the integer sensitivity exactly; got a traced value"
        )
    if host.ndim != 0:
        raise ValueError(f"{name} must be a scalar; got shape {host.shape}")
    return float(check_positive(host, name))


def _check_grid(grid: Any) -> float:
    g = _host_scalar(grid, "grid")
    mantissa, exponent = math.frexp(g)
    if mantissa != 0.5 or abs(exponent - 1) > _GRID_EXP:
        raise ValueError(
            f"grid must be a power of two 2^k with |k| <= {_GRID_EXP} (so that value / grid is "
            f"exact in floating point), e.g. 2**-8 = 0.00390625; got {g!r}"
        )
    return g


def _f32_down(x: float) -> np.float32:
    """The largest float32 <= x (so a budget converted to float32 never grows)."""
    f = np.float32(x)
    if float(f) > x:
        f = np.nextafter(f, np.float32(-np.inf))
    return f


def _budget(value: Any, name: str) -> jax.Array:
    """A budget as a float32 0-d array: validated and rounded down when it is a host value."""
    host = _concrete(value)
    if host is None:
        return _scalar_f32(value, name)
    if host.ndim != 0:
        raise ValueError(f"{name} must be a scalar; got shape {host.shape}")
    checked = check_epsilon(host, name) if name == "epsilon" else check_rho(host, name)
    return jnp.asarray(_f32_down(float(checked)))


def _f32_up(x: Fraction) -> np.float32:
    """The smallest float32 >= x (exact comparison)."""
    f = np.float32(float(x))
    if Fraction(float(f)) < x:
        f = np.nextafter(f, np.float32(np.inf))
    return f


def _check_noise_factor(noise_factor: Any) -> float:
    f = _concrete(noise_factor)
    if f is None or f.ndim != 0 or not (math.isfinite(float(f)) and float(f) >= 1.0):
        raise ValueError(f"noise_factor must be a finite host number >= 1; got {noise_factor!r}")
    return float(f)


def _widen(kind: str, param: jax.Array, noise_factor: float) -> jax.Array:
    """The noise parameter times ``noise_factor`` (``t``) or its square (``sigma^2``), rounded
    up: the result is at least the exact product (the float32 product is moved up by one ulp,
    which covers its rounding), and ``sigma^2`` is then rounded up to the sampler's 20 bits.
    0 (no noise) stays 0 and NaN (invalid budget) stays NaN; a result above the sampler's range
    becomes NaN (an error for a host budget)."""
    if noise_factor == 1.0:
        return param
    exact = Fraction(noise_factor) ** (1 if kind == "discrete_laplace" else 2)
    m = jnp.float32(_f32_up(exact))
    wide = jnp.nextafter(param * m, jnp.float32(jnp.inf))
    if kind == "discrete_laplace":
        top = T_MAX
    else:
        top = SIGMA2_MAX
        wide = jnp.where(wide <= top, _round_sigma2(jnp.minimum(wide, top))[0], wide)
    wide = jnp.where(param > 0, wide, param)  # 0 stays 0, NaN stays NaN
    return jnp.where(wide <= top, wide, jnp.where(param > 0, jnp.float32(jnp.nan), wide))


# --------------------------------------------------------------------------------------------
# Samplers
# --------------------------------------------------------------------------------------------


def discrete_laplace(key: jax.Array, shape: tuple[int, ...], t: Any) -> jax.Array:
    r"""I.i.d. exact draws of the discrete Laplace distribution on the integers.

    ``P(X = x) = (1 - e^{-1/t}) / (1 + e^{-1/t}) * exp(-|x| / t)`` for ``x`` in ``Z``; mean 0,
    variance ``2 e^{-1/t} / (1 - e^{-1/t})^2``.

    Method: CKS 2020 Algorithm 2 with blocks: with ``L = max(1, floor(t))``, draw
    ``B ~ U{0, ..., L-1}`` and keep it with probability ``exp(-B/t)``; count the successes ``A``
    of independent ``Bernoulli(exp(-L/t))``; ``G = A L + B`` has ``P(G = g) ∝ exp(-g/t)``; a
    uniform sign is attached and ``-0`` is rejected (restart). Every Bernoulli is exact (CKS
    Algorithm 1 on the rational ``t = p/q``, integer operations on 32-bit words).

    Exactness: ``t`` is used as its float32 value, which the sampler represents exactly as
    ``p / 2^j``; draws are exact conditioned on ``|X| <= X_T`` with ``X_T >= 2^30 - 2^20``
    (removed mass ``< 2 exp(-1023) < 1e-443``).

    Args:
        key: a PRNG key (consumed).
        shape: the output shape (static).
        t: the scale, a scalar in ``[T_MIN, T_MAX] = [2^-7, 2^20]`` (may be traced: outside the
            range a traced ``t`` gives ``SENTINEL`` draws; a host value raises ``ValueError``).

    Returns:
        An int32 array of ``shape``.
    """
    shape = _check_shape(shape)
    _check_range(t, "t", T_MIN, T_MAX, "(the scale of the discrete Laplace)")
    return _laplace_jit(key, shape, _scalar_f32(t, "t"))


def gaussian_sigma2_used(sigma2: Any) -> jax.Array:
    """The variance parameter :func:`discrete_gaussian` samples with for ``sigma2``: its float32
    value rounded up to 20 significant bits (an exact float32; relative increase < 2^-19)."""
    _check_range(sigma2, "sigma2", SIGMA2_MIN, SIGMA2_MAX, "(the discrete Gaussian's sigma^2)")
    s2 = _scalar_f32(sigma2, "sigma2")
    return _round_sigma2(s2)[0]


def discrete_gaussian(key: jax.Array, shape: tuple[int, ...], sigma2: Any) -> jax.Array:
    r"""I.i.d. exact draws of the discrete Gaussian ``N_Z(0, sigma^2)``.

    ``P(X = x) = exp(-x^2 / (2 sigma^2)) / sum_{y in Z} exp(-y^2 / (2 sigma^2))``; mean 0,
    variance slightly below ``sigma^2`` (CKS 2020).

    Method: CKS 2020 Algorithm 3: propose ``Y ~ DLap(T)`` and accept with probability
    ``exp(-(|Y| - sigma^2/T)^2 / (2 sigma^2))``; here ``T`` is a power of two within a factor
    ``sqrt 2`` of ``sigma`` (any ``T > 0`` is exact; the acceptance rate is then above 0.6 for
    ``sigma^2 >= 1`` and above 0.37 everywhere),
    and the acceptance exponent is evaluated as ``kappa x^2`` with 32-bit integers only (see
    ``_gaussian_params``).

    Exactness: ``sigma^2`` is :func:`gaussian_sigma2_used` ``(sigma2)`` (float32 rounded up to 20
    significant bits), used exactly; draws are exact conditioned on ``|X| <= X_T`` with
    ``X_T >= 1000 sigma`` (removed mass below ``exp(-4 10^5)``).

    Args:
        key: a PRNG key (consumed).
        shape: the output shape (static).
        sigma2: the variance parameter, a scalar in ``[SIGMA2_MIN, SIGMA2_MAX] = [2^-10, 2^40]``
            (may be traced: outside the range a traced value gives ``SENTINEL`` draws; a host
            value raises ``ValueError``).

    Returns:
        An int32 array of ``shape``.
    """
    shape = _check_shape(shape)
    _check_range(sigma2, "sigma2", SIGMA2_MIN, SIGMA2_MAX, "(the discrete Gaussian's sigma^2)")
    return _gaussian_jit(key, shape, _scalar_f32(sigma2, "sigma2"))


# --------------------------------------------------------------------------------------------
# Grid, integer sensitivity, calibration
# --------------------------------------------------------------------------------------------


def to_grid(value: Any, grid: float) -> jax.Array:
    r"""The integer grid coordinates ``k = floor(value / grid + 1/2)`` (half-up), clipped to
    ``[-2^30, 2^30]``; NaN maps to 0.

    Exact: ``grid`` is a power of two, so ``u = value / grid`` is computed without rounding, and
    ``floor(u) + [u - floor(u) >= 1/2]`` is evaluated exactly. Host (NumPy / Python) float64
    inputs are rounded on the host in float64, so no float32 conversion of the private value
    happens first. Half-up rounding is monotone with ``|k - k'| <= ceil(|value - value'| /
    grid)`` per coordinate.
    """
    g = _check_grid(grid)
    xp = np if not isinstance(value, jax.Array) else jnp
    v = xp.asarray(value)
    floating = jnp.issubdtype(v.dtype, jnp.floating)
    if xp is np and (floating or jnp.issubdtype(v.dtype, jnp.integer)):
        v = v.astype(np.float64)  # exact for every float and every |integer| < 2^53
    elif not floating:
        raise TypeError(f"value must be a floating-point array; got dtype {v.dtype}")
    elif v.dtype != jnp.float64:
        v = v.astype(jnp.float32)  # exact for float16 / bfloat16 / float32
    u = v / v.dtype.type(g)
    u = xp.clip(xp.where(xp.isnan(u), 0, u), -_K_MAX, _K_MAX)
    fl = xp.floor(u)
    k = fl + (u - fl >= 0.5)
    return jnp.asarray(np.asarray(k, np.int32) if xp is np else k.astype(jnp.int32))


def integer_sensitivity_l1(sensitivity_l1: float, grid: float, size: int) -> int:
    r"""l1 sensitivity of the rounded query: ``ceil(Delta_1 / grid) + size - 1`` (exact).

    If ``||x - x'||_1 <= Delta_1`` then ``||to_grid(x) - to_grid(x')||_1 = sum_i ceil(s_i) <
    Delta_1 / grid + size``, an integer (``s_i = |x_i - x'_i| / grid``); the bound is attained.
    Computed in exact rational arithmetic from the float values given.
    """
    s1 = Fraction(_host_scalar(sensitivity_l1, "sensitivity_l1")) / Fraction(_check_grid(grid))
    size = _check_size(size)
    return math.ceil(s1) + size - 1


def integer_sensitivity_l2_sq(sensitivity_l2: float, grid: float, size: int) -> int:
    r"""Squared l2 sensitivity of the rounded query, an integer.

    ``||k - k'||_2 <= ||s||_2 + ||ceil(s) - s||_2 <= Delta_2 / grid + sqrt(size)`` and
    ``||k - k'||_2^2`` is an integer, so it is at most ``floor((Delta_2 / grid +
    sqrt(size))^2)``; for ``size = 1`` the exact ``ceil(Delta_2 / grid)^2``. Computed exactly
    (rational arithmetic, integer square-root comparisons).
    """
    s2 = Fraction(_host_scalar(sensitivity_l2, "sensitivity_l2")) / Fraction(_check_grid(grid))
    d = _check_size(size)
    if d == 1:
        return math.ceil(s2) ** 2
    base = s2 * s2 + d
    # floor(base + 2 s2 sqrt(d)): the largest m with m - base <= sqrt(4 s2^2 d).
    m = math.floor(float(base) + 2.0 * float(s2) * math.sqrt(d)) + 2
    while m - base > 0 and (m - base) ** 2 > 4 * s2 * s2 * d:
        m -= 1
    return m


def _check_size(size: Any) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ValueError(f"size (number of coordinates) must be a positive integer; got {size!r}")
    return int(size)


def _check_sensitivity_int(value: int, what: str) -> None:
    if value > _SENS_MAX:
        raise ValueError(
            f"the integer {what} of the rounded query is {value} > 2^24: the grid is too fine "
            "for this sensitivity and size; use a coarser grid"
        )


def discrete_laplace_calibration(sensitivity_int: int, epsilon: Any) -> jax.Array:
    r"""The discrete Laplace scale for ``epsilon``-DP: ``t = Delta_1^Z / epsilon``, rounded up.

    ``t`` is the smallest float32 above the float32 quotient (so ``t >= Delta_1^Z / epsilon``
    exactly), raised to ``T_MIN = 2^-7`` if smaller (more noise); the sampler uses exactly this
    ``t``, so the release is ``(Delta_1^Z / t)``-DP with ``Delta_1^Z / t <= epsilon``.
    ``epsilon = inf`` gives ``t = 0`` (no noise). Traceable in ``epsilon`` (float32): an invalid
    traced ``epsilon`` (``<= 0``, NaN) or ``t > T_MAX`` gives NaN.

    Args:
        sensitivity_int: ``Delta_1^Z``, the l1 sensitivity of the integer query (a host int,
            ``1 <= Delta_1^Z <= 2^24``).
        epsilon: the budget, ``> 0`` or ``inf``; a host value is rounded down to float32 first.
    """
    eps = _budget(epsilon, "epsilon")
    delta = jnp.float32(sensitivity_int)
    t = jnp.nextafter(delta / eps, jnp.float32(jnp.inf))
    t = jnp.maximum(t, jnp.float32(T_MIN))
    t = jnp.where(eps == jnp.inf, jnp.float32(0.0), t)
    return jnp.where((eps > 0) & (t <= T_MAX), t, jnp.float32(jnp.nan))


def discrete_gaussian_calibration(sensitivity_sq_int: int, rho: Any) -> jax.Array:
    r"""The discrete Gaussian variance for ``rho``-zCDP: ``sigma^2 = (Delta_2^Z)^2 / (2 rho)``,
    rounded up.

    Rounded up to the next float32 and then to the value the sampler uses
    (:func:`gaussian_sigma2_used`), and raised to ``SIGMA2_MIN = 2^-10`` if smaller, so the
    release is ``(Delta_2^Z)^2 / (2 sigma^2)``-zCDP with that at most ``rho``. ``rho = inf``
    gives 0. Traceable in ``rho``; an invalid traced ``rho`` or ``sigma^2 > SIGMA2_MAX`` gives
    NaN.

    Args:
        sensitivity_sq_int: ``(Delta_2^Z)^2``, the squared l2 sensitivity of the integer query
            (a host int, ``1 <= . <= 2^24``).
        rho: the zCDP budget, ``> 0`` or ``inf``; a host value is rounded down to float32 first.
    """
    r = _budget(rho, "rho")
    delta_sq = jnp.float32(sensitivity_sq_int)
    s2 = jnp.nextafter(delta_sq / (2.0 * r), jnp.float32(jnp.inf))
    s2 = jnp.maximum(s2, jnp.float32(SIGMA2_MIN))
    s2 = jnp.where(s2 <= SIGMA2_MAX, _round_sigma2(jnp.minimum(s2, SIGMA2_MAX))[0], s2)
    s2 = jnp.where(r == jnp.inf, jnp.float32(0.0), s2)
    return jnp.where((r > 0) & (s2 <= SIGMA2_MAX), s2, jnp.float32(jnp.nan))


# --------------------------------------------------------------------------------------------
# Mechanisms
# --------------------------------------------------------------------------------------------


class SecureNoise(NamedTuple):
    """What a secure mechanism did.

    Attributes:
        kind: ``"discrete_laplace"`` or ``"discrete_gaussian"``.
        sensitivity: of the integer query ``to_grid(value)``: ``Delta_1^Z`` (Laplace) or
            ``(Delta_2^Z)^2`` (Gaussian; squared, so that it is an integer).
        noise: the parameter actually used, an exact float32: ``t`` (Laplace) or ``sigma^2``
            (Gaussian); 0 at ``epsilon``/``rho = inf``; NaN if the traced budget was invalid.
        grid: the grid step; the release is ``grid * (to_grid(value) + noise draw)``.
    """

    kind: str
    sensitivity: int
    noise: jax.Array
    grid: float

    def guarantee(self) -> float:
        """``epsilon = Delta_1^Z / t`` (pure DP) or ``rho = (Delta_2^Z)^2 / (2 sigma^2)`` (zCDP),
        rounded up to a float; ``inf`` when no noise was added (host only)."""
        noise = float(np.asarray(self.noise))
        if math.isnan(noise):
            raise ValueError("the mechanism was called with an invalid budget (noise is NaN)")
        if noise == 0.0:
            return math.inf
        exact = Fraction(self.sensitivity) / Fraction(noise)
        if self.kind == "discrete_gaussian":
            exact /= 2
        value = float(exact)
        return math.nextafter(value, math.inf) if Fraction(value) < exact else value


jax.tree_util.register_pytree_node(
    SecureNoise,
    lambda s: ((s.noise,), (s.kind, s.sensitivity, s.grid)),
    lambda aux, children: SecureNoise(aux[0], aux[1], children[0], aux[2]),
)


def _release(
    key: jax.Array, value: Any, grid: float, param: jax.Array, sampler
) -> jax.Array:
    k = to_grid(value, grid)
    valid = param >= 0  # False for NaN
    noisy_param = jnp.where(valid & (param > 0), param, jnp.float32(1.0))
    z = sampler(key, k.shape, noisy_param)
    z = jnp.where(param > 0, z, jnp.zeros_like(z))
    out_dtype = jnp.asarray(0.0).dtype  # float64 under x64, else float32
    # A function of the exact integer k + z only (|k + z| < 2^31): post-processing.
    released = (k + z).astype(out_dtype) * jnp.asarray(grid, out_dtype)
    return jnp.where(valid, released, jnp.asarray(jnp.nan, out_dtype))


def _calibrate(calibration, sensitivity_int: int, budget: Any) -> jax.Array:
    """Run a calibration; with a host budget, evaluate it on the host (even under ``jit``) so
    that an out-of-range host budget raises."""
    if _concrete(budget) is None:
        return calibration(sensitivity_int, budget)
    with jax.ensure_compile_time_eval():
        return calibration(sensitivity_int, budget)


def _value_size(value: Any) -> int:
    size = int(np.prod(jnp.shape(value)))
    if size < 1:
        raise ValueError("value must have at least one entry")
    return size


def secure_laplace_mechanism(
    key: jax.Array, value: Any, sensitivity_l1: float, epsilon: Any, grid: float,
    noise_factor: float = 1.0,
) -> tuple[jax.Array, SecureNoise]:
    r"""Release ``value`` with ``epsilon``-DP through the grid and discrete Laplace noise.

    ``release = grid * (k + Z)``, ``k = to_grid(value, grid)``, ``Z ~ DLap(t)^d`` i.i.d.,
    ``t = discrete_laplace_calibration(Delta_1^Z, epsilon)`` with ``Delta_1^Z =
    integer_sensitivity_l1(sensitivity_l1, grid, d)``.

    Privacy: ``epsilon``-DP (pure, up to the ``delta < 1e-437`` of the sampler's 32-bit range)
    for neighbouring data sets (replace-one, or whichever relation ``sensitivity_l1`` is stated
    for) whenever ``||value(X) - value(X')||_1 <= sensitivity_l1``. The output is a function of
    the exact integer ``k + Z`` only, so floating point leaks nothing beyond it.

    Args:
        key: PRNG key (consumed).
        value: the statistic, any shape with ``d >= 1`` entries (floating point).
        sensitivity_l1: its l1 sensitivity, a host number ``> 0``.
        epsilon: ``> 0`` or ``inf`` (exactly zero noise: the release is ``grid * k``); may be a
            traced array (no recompilation when it changes). A host ``epsilon`` is validated,
            including ``Delta_1^Z / epsilon <= T_MAX = 2^20``; a traced invalid one gives NaN.
        grid: the public grid step, a power of two.
        noise_factor: a host number ``>= 1``: ``t`` is multiplied by it (rounded up), so the
            release is ``epsilon / noise_factor``-DP or better (default 1: exactly the
            calibration above).

    Returns:
        ``(release, SecureNoise("discrete_laplace", Delta_1^Z, t, grid))``.
    """
    return _secure_release("discrete_laplace", key, value, grid, integer_sensitivity_l1,
                           sensitivity_l1, "l1 sensitivity", discrete_laplace_calibration,
                           epsilon, _laplace_too_small, _laplace_jit, noise_factor)




def _secure_params(kind, value_size, grid, integer_sensitivity, sensitivity, what, calibration,
                   budget, too_small, noise_factor) -> SecureNoise:
    """Grid, integer sensitivity and noise parameter of a secure release (a host budget too
    small for the sampler's range is an error)."""
    g = _check_grid(grid)
    factor = _check_noise_factor(noise_factor)
    sens = integer_sensitivity(sensitivity, g, value_size)
    _check_sensitivity_int(sens, what)
    param = _calibrate(calibration, sens, budget)
    if _concrete(param) is not None:  # a host budget: widen on the host too (errors raise)
        with jax.ensure_compile_time_eval():
            scale = _widen(kind, param, factor)
    else:
        scale = _widen(kind, param, factor)
    if _concrete(scale) is not None and np.isnan(np.asarray(scale)):
        raise ValueError(too_small(sens))
    return SecureNoise(kind, sens, scale, g)


def _secure_release(kind, key, value, grid, integer_sensitivity, sensitivity, what,
                    calibration, budget, too_small, sampler, noise_factor
                    ) -> tuple[jax.Array, SecureNoise]:
    """The shared body of the secure mechanisms: the noise parameter (:func:`_secure_params`),
    the release and what was done (:func:`dpjax.mechanisms.secure_event` turns it into a
    privacy event)."""
    noise = _secure_params(kind, _value_size(value), grid, integer_sensitivity, sensitivity,
                           what, calibration, budget, too_small, noise_factor)
    record = _RECORD.get()
    if record is not None:
        record.append(noise)
        if kind == "discrete_gaussian" and not isinstance(key, jax.core.Tracer) and _concrete(
                noise.noise) is not None:  # eager: the batched host sampler, same law
            sampler = _host_gaussian
    return _release(key, value, noise.grid, noise.noise, sampler), noise


def _host_gaussian(key: jax.Array, shape: tuple[int, ...], sigma2: Any) -> jax.Array:
    return jnp.asarray(discrete_gaussian_batch(key, shape, float(np.asarray(sigma2))),
                       jnp.int32)


_RECORD: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "dpjax_secure_record", default=None)


@contextlib.contextmanager
def recording_releases():
    """Inside this block, every secure mechanism's release appends its :class:`SecureNoise`
    to the list yielded (what a caller needs to release more rows at the same parameters,
    :func:`secure_gaussian_rows`), and an eager discrete Gaussian release draws through
    :func:`discrete_gaussian_batch` (the same law, without compiling the lock-step sampler)."""
    token = _RECORD.set([])
    try:
        yield _RECORD.get()
    finally:
        _RECORD.reset(token)


def _laplace_too_small(delta: int) -> str:
    return (f"epsilon must be >= Delta_1^Z / 2^20 = {delta / T_MAX:g} for this grid (times the "
            f"noise factor): the integer noise scale t = Delta_1^Z / epsilon (Delta_1^Z = "
            f"{delta}) must be <= 2^20; use a coarser grid")


def _gaussian_too_small(delta_sq: int) -> str:
    return (f"rho must be >= (Delta_2^Z)^2 / 2^41 = {delta_sq / (2 * SIGMA2_MAX):g} for this "
            f"grid (times the squared noise factor): sigma^2 = (Delta_2^Z)^2 / (2 rho) "
            f"((Delta_2^Z)^2 = {delta_sq}) must be <= 2^40; use a coarser grid")


_SECURE_KINDS = {
    "discrete_laplace": (integer_sensitivity_l1, "l1 sensitivity", discrete_laplace_calibration,
                         _laplace_too_small),
    "discrete_gaussian": (integer_sensitivity_l2_sq, "squared l2 sensitivity",
                          discrete_gaussian_calibration, _gaussian_too_small),
}


def secure_noise_parameters(kind: str, size: int, sensitivity: float, budget: Any,
                            grid: float, noise_factor: float = 1.0) -> SecureNoise:
    r"""What :func:`secure_laplace_mechanism` (``kind="discrete_laplace"``, ``budget`` =
    epsilon) or :func:`secure_gaussian_mechanism` (``"discrete_gaussian"``, ``budget`` = rho)
    would use for a statistic of ``size`` entries, without drawing anything: the integer
    sensitivity and the exact noise parameter (for planning a run's noise before it runs).
    """
    if kind not in _SECURE_KINDS:
        raise ValueError(f"kind must be one of {sorted(_SECURE_KINDS)}; got {kind!r}")
    integer_sensitivity, what, calibration, too_small = _SECURE_KINDS[kind]
    return _secure_params(kind, _check_size(size), grid, integer_sensitivity, sensitivity, what,
                          calibration, budget, too_small, noise_factor)


def secure_gaussian_mechanism(
    key: jax.Array, value: Any, sensitivity_l2: float, rho: Any, grid: float,
    noise_factor: float = 1.0,
) -> tuple[jax.Array, SecureNoise]:
    r"""Release ``value`` with ``rho``-zCDP through the grid and discrete Gaussian noise.

    ``release = grid * (k + Z)``, ``k = to_grid(value, grid)``, ``Z ~ N_Z(0, sigma^2)^d``
    i.i.d., ``sigma^2 = discrete_gaussian_calibration((Delta_2^Z)^2, rho)`` with
    ``(Delta_2^Z)^2 = integer_sensitivity_l2_sq(sensitivity_l2, grid, d)``.

    Privacy: ``rho``-zCDP (CKS Thm 4 / Thm 14; up to the sampler's 32-bit range: an additive
    ``delta < exp(-10^5)`` for ``rho <= 10^5``, see the module notes) for
    neighbouring data sets (replace-one, or whichever relation ``sensitivity_l2`` is stated for)
    whenever ``||value(X) - value(X')||_2 <= sensitivity_l2``.

    Args:
        key: PRNG key (consumed).
        value: the statistic, any shape with ``d >= 1`` entries (floating point).
        sensitivity_l2: its l2 sensitivity, a host number ``> 0``.
        rho: ``> 0`` or ``inf`` (exactly zero noise); may be traced. A host ``rho`` is validated,
            including ``sigma^2 <= SIGMA2_MAX = 2^40``; a traced invalid one gives NaN.
        grid: the public grid step, a power of two.
        noise_factor: a host number ``>= 1``: ``sigma`` is multiplied by it (``sigma^2`` by its
            square, rounded up), so the release is ``rho / noise_factor^2``-zCDP or better
            (default 1: exactly the calibration above).

    Returns:
        ``(release, SecureNoise("discrete_gaussian", (Delta_2^Z)^2, sigma^2, grid))``.
    """
    return _secure_release("discrete_gaussian", key, value, grid, integer_sensitivity_l2_sq,
                           sensitivity_l2, "squared l2 sensitivity",
                           discrete_gaussian_calibration, rho, _gaussian_too_small,
                           _gaussian_jit, noise_factor)


# --------------------------------------------------------------------------------------------
# Exact selection: permute-and-flip on integer scores (host, NumPy integers)
# --------------------------------------------------------------------------------------------

__all__ += ["integer_sensitivity_linf", "peeling_scale_used", "peeling_selection",
            "permute_and_flip"]

_PF_NUM_MAX = 2**62  # gamma numerators (score gaps times the scale's denominator) stay below


class _Words:
    """Uniform 32-bit words from a JAX key, consumed on the host (as ``uint64``) in blocks.

    Each block is ``jax.random.bits`` of a fresh subkey (``key, sub = split(key)``), so no key
    is used twice; the words are used in order and each exactly once.
    """

    def __init__(self, key: jax.Array, block: int = 1 << 12) -> None:
        self._key = key
        self._block = block
        self._buf = np.zeros(0, np.uint64)
        self._pos = 0

    def take(self, n: int) -> np.ndarray:
        if self._pos + n > self._buf.size:
            self._key, sub = jax.random.split(self._key)
            size = max(self._block, n)
            self._block = min(2 * self._block, 1 << 20)  # large runs: fewer, larger blocks
            new = np.asarray(jax.random.bits(sub, (size,), jnp.uint32)).astype(np.uint64)
            self._buf = np.concatenate([self._buf[self._pos:], new])
            self._pos = 0
        out = self._buf[self._pos:self._pos + n]
        self._pos += n
        return out


def _uniform_below(words: _Words, m: np.ndarray) -> np.ndarray:
    """Exactly uniform integers on ``{0, ..., m_i - 1}`` (``1 <= m_i < 2^63``), one per entry.

    A 64-bit word ``u`` (two 32-bit words) is accepted when ``u >= 2^64 mod m`` (the accepted
    words are a multiple of ``m`` in number), and then ``u mod m`` is uniform; rejected entries
    retry with fresh words.
    """
    m = np.asarray(m, np.uint64)
    out = np.zeros(m.shape, np.uint64)
    threshold = (~m + np.uint64(1)) % m  # (2^64 - m) mod m = 2^64 mod m
    todo = np.arange(m.size)
    flat_m, flat_t, flat_out = m.ravel(), threshold.ravel(), out.reshape(-1)
    while todo.size:
        w = words.take(2 * todo.size)
        u = (w[:todo.size] << np.uint64(32)) | w[todo.size:]
        ok = u >= flat_t[todo]
        flat_out[todo[ok]] = u[ok] % flat_m[todo[ok]]
        todo = todo[~ok]
    return out


def _bernoulli_exp_minus_fraction(words: _Words, a: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Exact ``Bernoulli(exp(-a_i / c_i))`` for integers ``0 <= a_i <= c_i`` (CKS Algorithm 1):
    ``K = 1``; while ``Bernoulli(a / (c K))`` succeeds, ``K += 1``; return ``[K odd]``
    (``P(K odd) = exp(-a/c)``). Each ``Bernoulli(a / (c K))`` is ``[U < a]`` with ``U`` uniform
    on ``{0, ..., c K - 1}``. ``P(K >= k) <= 1/(k-1)!``, so ``c K`` stays far below ``2^63``."""
    a = np.asarray(a, np.uint64).ravel()
    c = np.broadcast_to(np.asarray(c, np.uint64), a.shape).ravel()
    k = np.ones(a.shape, np.uint64)
    out = np.zeros(a.shape, bool)
    idx = np.arange(a.size)
    while idx.size:
        go = _uniform_below(words, c[idx] * k[idx]) < a[idx]
        stop = idx[~go]
        out[stop] = (k[stop] & np.uint64(1)) == 1
        idx = idx[go]
        k[idx] += np.uint64(1)
    return out


def _bernoulli_exp_minus(words: _Words, num: np.ndarray, den: int) -> np.ndarray:
    """Exact ``Bernoulli(exp(-gamma_i))`` for ``gamma_i = num_i / den`` (integers, ``num_i >=
    0``, ``1 <= den < 2^40``): ``floor(gamma)`` factors ``Bernoulli(exp(-1))`` and one
    ``Bernoulli(exp(-(gamma - floor(gamma))))``, each by CKS Algorithm 1, stopping at the
    first failure (so a large ``gamma`` costs a few draws, not ``gamma``)."""
    num = np.asarray(num, np.uint64).ravel()
    whole, frac = num // np.uint64(den), num % np.uint64(den)
    out = _bernoulli_exp_minus_fraction(words, frac, np.uint64(den))
    left = whole.copy()
    idx = np.flatnonzero(out & (left > 0))
    one = np.ones(1, np.uint64)
    while idx.size:
        b = _bernoulli_exp_minus_fraction(words, np.broadcast_to(one, idx.shape), one)
        out[idx[~b]] = False
        left[idx] -= np.uint64(1)
        idx = idx[b & (left[idx] > 0)]
    return out


def _scale_fraction(scale: Any) -> Fraction:
    if isinstance(scale, Fraction):
        b = scale
    else:
        f = float(np.asarray(scale))
        if not (math.isfinite(f) and f > 0):
            raise ValueError(f"scale must be a finite number > 0; got {f!r}")
        b = Fraction(f)  # a float is a dyadic rational: exact
    if b <= 0 or b.numerator >= 2**40 or b.denominator >= _PF_NUM_MAX:
        raise ValueError(f"scale must be > 0, a rational with numerator below 2^40 and "
                         f"denominator below 2^62; got {b}")
    return b


def _check_scores(scores: Any) -> np.ndarray:
    q = np.asarray(scores)
    if not np.issubdtype(q.dtype, np.integer):
        raise TypeError(f"scores must be integers (grid units); got dtype {q.dtype}")
    if q.ndim < 1 or q.shape[-1] < 1:
        raise ValueError(f"scores must have a last axis with at least one entry; got {q.shape}")
    q = q.astype(np.int64)
    if q.size and np.abs(q).max() > 2**31:
        raise ValueError("scores must lie in [-2^31, 2^31]")
    return q


def _pf_rows(words: _Words, q: np.ndarray, b: Fraction, excluded: np.ndarray) -> np.ndarray:
    """Permute-and-flip on each row of ``q`` (``(rows, d)`` int64) over its non-excluded
    entries; see :func:`permute_and_flip`."""
    big = np.iinfo(np.int64).min
    masked = np.where(excluded, big, q)
    top = masked.max(axis=-1, keepdims=True)
    gap = np.where(excluded, 0, top - q)  # >= 0 on the candidates
    if gap.size and int(gap.max()) * b.denominator >= _PF_NUM_MAX:
        raise ValueError("scores and scale too far apart for exact 64-bit selection: the score "
                         "gaps times the scale's denominator must stay below 2^62")
    num = gap.astype(np.uint64) * np.uint64(b.denominator)  # exact: below 2^62
    cand = ~excluded
    coins = np.zeros(q.shape, bool)
    coins[cand] = _bernoulli_exp_minus(words, num[cand], b.numerator)
    # The permutation is uniform and independent of the coins, so the first success in its
    # order is uniform over the successes: draw that position directly.
    count = coins.sum(axis=-1)  # >= 1: the best candidate's coin is Bernoulli(1)
    pick = _uniform_below(words, count.astype(np.uint64)).astype(np.int64)
    rank = np.cumsum(coins, axis=-1) - 1
    return np.argmax(coins & (rank == pick[:, None]), axis=-1)


def permute_and_flip(key: jax.Array, scores: Any, scale: Any, excluded: Any = None
                     ) -> np.ndarray:
    r"""Exact permute-and-flip selection (McKenna & Sheldon 2020) on integer scores.

    For each row of ``scores`` (last axis: the ``d`` candidates), with ``q* = max_j q_j`` over
    the candidates (those not ``excluded``): visit the candidates in a uniformly random order
    and return the first ``j`` whose coin ``Bernoulli(exp(-(q* - q_j) / b))`` succeeds (the
    best candidate's coin always does, so one is returned).

    Privacy: if every score moves by at most ``Delta`` between neighbouring data sets, this is
    ``epsilon = 2 Delta / b``-DP (McKenna & Sheldon 2020, Thm 1, with their acceptance
    probability ``exp(epsilon (q_j - q*) / (2 Delta))``); its expected score is never below
    that of the exponential mechanism at the same epsilon (their Thm 2).

    Exactness: ``b`` is used as the exact rational of its value (a float is a dyadic rational),
    so each coin is ``Bernoulli(exp(-gamma))`` for the rational ``gamma = (q* - q_j) / b``,
    sampled by CKS 2020 Algorithm 1 from uniform integers obtained by rejection from 32-bit
    words of ``jax.random.bits``. Drawing every coin and then a uniform one of the successes
    has the same law as the sequential algorithm: the order is uniform and independent of the
    coins, so its first success is uniform over the successes. No floating-point number is
    sampled; the arithmetic is on NumPy integers on the host (not traceable).

    Args:
        key: a PRNG key (consumed).
        scores: integers, shape ``(..., d)``, ``|q| <= 2^31``.
        scale: ``b > 0``: a float (its exact dyadic value) or a :class:`fractions.Fraction`
            (numerator below ``2^40``); score gaps times ``b``'s denominator must stay below
            ``2^62``.
        excluded: optional booleans, shape of ``scores``: candidates not to select (each row
            must keep at least one).

    Returns:
        int64 indices of shape ``scores.shape[:-1]``.
    """
    q = _check_scores(scores)
    b = _scale_fraction(scale)
    ex = np.zeros(q.shape, bool) if excluded is None else np.broadcast_to(
        np.asarray(excluded, bool), q.shape)
    if (~ex).sum(axis=-1).min() < 1:
        raise ValueError("every row of scores needs at least one candidate not excluded")
    d = q.shape[-1]
    out = _pf_rows(_Words(key), q.reshape(-1, d), b, ex.reshape(-1, d))
    return out.reshape(q.shape[:-1])


def peeling_selection(key: jax.Array, scores: Any, s: int, scale: Any) -> np.ndarray:
    r"""``s`` rounds of :func:`permute_and_flip` without replacement: the support of exact
    peeling.

    Round ``i`` selects among the coordinates not yet selected with coins
    ``Bernoulli(exp(-(q* - q_j) / b))`` (``q*`` the best remaining score), so each round is
    ``2 Delta / b``-DP for scores of sensitivity ``Delta`` and the ``s`` rounds compose
    adaptively (the excluded set is the public output of earlier rounds).

    Args:
        key: a PRNG key (consumed).
        scores: integers, shape ``(d,)``.
        s: the number of coordinates, ``1 <= s <= d``.
        scale: ``b > 0`` (see :func:`permute_and_flip`).

    Returns:
        int64 indices, shape ``(s,)``, in order of selection (distinct).
    """
    q = _check_scores(scores)
    if q.ndim != 1:
        raise ValueError(f"scores must be a vector; got shape {q.shape}")
    d = q.shape[0]
    if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 1 <= s <= d:
        raise ValueError(f"s must be an integer in [1, {d}]; got {s!r}")
    b = _scale_fraction(scale)
    words = _Words(key)
    excluded = np.zeros((1, d), bool)
    support = np.zeros(s, np.int64)
    for i in range(s):
        j = int(_pf_rows(words, q[None], b, excluded)[0])
        support[i] = j
        excluded[0, j] = True
    return support


def integer_sensitivity_linf(sensitivity_linf: float, grid: float) -> int:
    r"""l-infinity sensitivity of the rounded query: ``ceil(Delta_inf / grid)`` (exact).

    Per coordinate ``|k_i - k'_i| <= ceil(|x_i - x'_i| / grid) <= ceil(Delta_inf / grid)``
    (half-up rounding is monotone; see :func:`to_grid`), attained when one coordinate moves by
    ``Delta_inf`` across the right half-points. Exact rational arithmetic on the float values.
    """
    s = Fraction(_host_scalar(sensitivity_linf, "sensitivity_linf")) / Fraction(_check_grid(grid))
    return math.ceil(s)


def peeling_scale_used(sensitivity_int: int, multiplier: float) -> np.float32:
    r"""The exact peeling scale in grid units: the smallest float32 ``b >= Delta^Z *
    multiplier`` (compared exactly), raised to ``T_MIN`` if smaller; ``Delta^Z / b <= 1 /
    multiplier``, so the release's ratio never exceeds the floating-point path's. Raises if
    ``b > T_MAX`` (the discrete Laplace's range: use a coarser grid)."""
    target = Fraction(int(sensitivity_int)) * Fraction(float(multiplier))
    b = np.float32(float(target))
    if Fraction(float(b)) < target:
        b = np.nextafter(b, np.float32(np.inf))
    b = max(b, np.float32(T_MIN))
    if not b <= T_MAX:
        raise ValueError(
            f"the exact peeling scale is {float(target):g} grid units (Delta^Z = "
            f"{sensitivity_int} times the multiplier {multiplier:g}), above the discrete "
            f"Laplace's 2^20: use a coarser grid or a larger epsilon")
    return b


# --------------------------------------------------------------------------------------------
# The batched host sampler: many exact discrete Gaussians at once (NumPy, vectorised)
# --------------------------------------------------------------------------------------------

__all__ += ["discrete_gaussian_batch", "recording_releases", "secure_gaussian_rows"]

#: The fast path decides a comparison ``U < exp(-gamma)`` from float64 only when ``U`` is at
#: least this relative distance (times ``1 + gamma``) from the float value; closer calls are
#: decided exactly (:func:`_bern_exp_exact`). The float error it covers is below
#: ``(1 + 6 gamma) 2^-52`` (the rounded ``gamma``) plus the error of ``np.exp``, which
#: :func:`_check_float_exp` bounds by ``2^-46`` on first use (the float path is turned off
#: otherwise), far inside this margin.
_FAST_MARGIN = 2.0**-40
_BIG_GAMMA = 690.0  # exp(-690) ~ 2^-995: no 53-bit u lies below it
_U53 = 2.0**53


def _host_generator(key: jax.Array) -> np.random.Generator:
    """NumPy's Philox-4x64 (the counter-based generator of the threefry family, Salmon et al.
    2011) keyed with 128 bits drawn from ``key``: fast uniform 64-bit words on the host, a
    deterministic function of the key."""
    w = np.asarray(jax.random.bits(key, (4,), jnp.uint32)).astype(np.uint64)
    k = np.array([(w[0] << np.uint64(32)) | w[1], (w[2] << np.uint64(32)) | w[3]], np.uint64)
    return np.random.Generator(np.random.Philox(key=k))


def _words64(gen: np.random.Generator, m: int) -> np.ndarray:
    return gen.bit_generator.random_raw(m)  # uniform on {0, ..., 2^64 - 1}, uint64


def _round_dyadic(v: Fraction, bits: int, up: bool) -> Fraction:
    """``v > 0`` rounded to ``bits`` significant bits, up or down (keeps the bounds' sizes
    small while they are squared)."""
    shift = bits - (v.numerator.bit_length() - v.denominator.bit_length())
    scaled = v * (Fraction(2) ** shift)
    q = math.ceil(scaled) if up else math.floor(scaled)
    return Fraction(q) / Fraction(2) ** shift


def _exp_neg_bounds(gamma: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """Rational ``lo <= exp(-gamma) <= hi`` for rational ``gamma >= 0``, with ``hi / lo - 1``
    of order ``2^-bits``: ``exp(-gamma) = exp(-gamma / 2^j)^(2^j)`` with ``gamma / 2^j <= 1/2``;
    the alternating series of ``exp(-x)`` (terms decreasing for ``x <= 1``) puts ``exp(-x)``
    between consecutive partial sums; squaring is monotone on positive bounds, which are
    rounded outwards to ``bits + 2 j + 16`` significant bits after each step."""
    j = 0
    x = gamma
    while x > Fraction(1, 2):
        x /= 2
        j += 1
    prec = bits + 2 * j + 16
    tol = Fraction(1, 2 ** (prec + 2))
    total, term, k = Fraction(1), Fraction(1), 0
    while True:
        k += 1
        term = -term * x / k
        nxt = total + term
        if abs(term) <= tol or x == 0:
            lo, hi = min(total, nxt), max(total, nxt)
            break
        total = nxt
    lo = _round_dyadic(lo, prec, up=False)
    hi = _round_dyadic(hi, prec, up=True)
    for _ in range(j):
        lo = _round_dyadic(lo * lo, prec, up=False)
        hi = _round_dyadic(hi * hi, prec, up=True)
    return lo, hi


class _LazyUniform:
    """A uniform ``U`` on ``[0, 1)`` known as ``[a, a + w)``: its first 53 bits ``u`` are given
    (``a = u / 2^53``, ``w = 2^-53``) and further bits are drawn, 64 at a time, only when a
    comparison needs them. Several comparisons may read the same ``U``."""

    def __init__(self, gen: np.random.Generator, u: int) -> None:
        self._gen = gen
        self.a = Fraction(int(u), 2**53)
        self.w = Fraction(1, 2**53)

    def less_exp(self, gamma: Fraction) -> bool:
        """``[U < exp(-gamma)]``, exactly: the rational bounds of ``exp(-gamma)``
        (:func:`_exp_neg_bounds`) are refined with ``U``'s interval until one side holds."""
        while True:
            lo, hi = _exp_neg_bounds(gamma, self.w.denominator.bit_length() + 32)
            if self.a + self.w <= lo:
                return True
            if self.a >= hi:
                return False
            self.w /= 2**64
            self.a += int(_words64(self._gen, 1)[0]) * self.w


def _bounds_table(gamma_hat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ``p = exp(-gamma)``: float64 ``lo <= p 2^53 <= hi``. With ``p_hat = np.exp(-g)``,
    ``g = min(gamma_hat, 690)``, and ``m = _FAST_MARGIN (1 + g)``: ``lo = p_hat (1 - m) 2^53``
    and ``hi = p_hat (1 + m) 2^53``. The float error of ``p_hat`` (the rounded ``gamma``, the
    exponential, these products) is far inside ``m`` (see ``_FAST_MARGIN``); a ``gamma`` above
    690 only lowers ``p`` (``hi`` stays above it, and ``lo < 2^-940`` is below every ``u + 1``)."""
    g = np.minimum(gamma_hat, _BIG_GAMMA)
    scaled = np.exp(-g) * _U53
    slack = scaled * (_FAST_MARGIN * (1.0 + g))
    return scaled - slack, scaled + slack


def _u53(words: np.ndarray) -> np.ndarray:
    """The top 53 bits of 64-bit words: uniform integers below ``2^53``, as (exact) float64."""
    return (words >> np.uint64(11)).astype(np.float64)


def _bern_exp(gen: np.random.Generator, u: np.ndarray, lo: np.ndarray, hi: np.ndarray,
              gamma_exact) -> np.ndarray:
    """Exact ``Bernoulli(exp(-gamma_i))``, one per entry, as ``[U_i < exp(-gamma_i)]`` for
    ``U_i = (u_i + V_i) / 2^53`` (``u_i`` 53 random bits, ``V_i`` uniform on ``[0, 1)``, drawn
    only if needed), given ``lo_i <= exp(-gamma_i) 2^53 <= hi_i`` (:func:`_bounds_table`):
    ``U < p`` is certain when ``u + 1 <= lo`` and ``U >= p`` when ``u >= hi``; the rest
    (probability about ``2^-39 p + 2^-52`` per entry) is decided by :class:`_LazyUniform` on
    the same ``U_i`` with the exact rational ``gamma_exact(i)``. Every answer is exactly
    ``[U_i < p_i]``."""
    if not _float_exp_ok():
        yes = no = np.zeros(u.shape, bool)
    else:
        yes, no = (u + 1.0) <= lo, u >= hi
    out = yes.copy()
    for i in np.flatnonzero(~(yes | no)):
        out[i] = _LazyUniform(gen, int(u[i])).less_exp(gamma_exact(int(i)))
    return out


def _geometric(gen: np.random.Generator, u: np.ndarray, t: int, cap: int) -> np.ndarray:
    """``G`` with ``P(G >= g) = exp(-g/t)``, i.e. ``P(G = g) ∝ exp(-g/t)`` on ``{0, 1, ...}``
    (``t`` a positive integer), capped at ``cap``, one per uniform ``U_i = (u_i + V_i) / 2^53``:
    ``G = #{g >= 1 : U < exp(-g/t)}`` (the set is ``{1, ..., G}``). The float guess
    ``floor(-t log U)`` is kept where :func:`_bounds_table` proves ``U < exp(-G/t)`` and ``U >=
    exp(-(G + 1)/t)``; elsewhere (rarely) ``G`` is found exactly on the same ``U``."""
    g = np.minimum(np.floor(-t * np.log((u + 0.5) / _U53)), cap).astype(np.int64)
    if t <= 2**14:  # g <= 37 t (u >= 0): tabulate exp(-g/t) once
        lo, hi = _geometric_table(t)
        below, above = lo[g], hi[g + 1]
    else:
        below, _ = _bounds_table(g / t)
        _, above = _bounds_table((g + 1) / t)
    sure = ((g == 0) | ((u + 1.0) <= below)) & (u >= above)
    if not _float_exp_ok():
        sure[:] = False
    for i in np.flatnonzero(~sure):
        lazy = _LazyUniform(gen, int(u[i]))
        k = int(g[i])
        while k > 0 and not lazy.less_exp(Fraction(k, t)):
            k -= 1
        while k < cap and lazy.less_exp(Fraction(k + 1, t)):
            k += 1
        g[i] = k
    return g


@functools.lru_cache(maxsize=8)
def _geometric_table(t: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_bounds_table` of ``g / t`` for ``g = 0..37 t + 1`` (read only)."""
    lo, hi = _bounds_table(np.arange(37 * t + 2) / t)
    lo.flags.writeable = hi.flags.writeable = False
    return lo, hi


_FLOAT_EXP_OK: list[bool] = []


def _float_exp_ok() -> bool:
    """Whether ``np.exp`` is within ``2^-46`` (relative) of ``exp`` on 512 test points of
    ``[0, 690]`` (checked once, against :func:`_exp_neg_bounds`); if not, every comparison
    takes the exact path (slower, still exact)."""
    if not _FLOAT_EXP_OK:
        g = np.concatenate([np.linspace(0.0, 2.0, 256), np.linspace(2.0, _BIG_GAMMA, 256)])
        g = np.unique(np.append(g, [1.0, 0.5, 1e-9]))
        ok = True
        for gamma in g:
            lo, hi = _exp_neg_bounds(Fraction(float(gamma)), 60)
            p = Fraction(float(np.exp(-np.float64(gamma))))
            ok &= lo * (1 - Fraction(1, 2**46)) <= p <= hi * (1 + Fraction(1, 2**46))
        _FLOAT_EXP_OK.append(bool(ok))
    return _FLOAT_EXP_OK[0]


def discrete_gaussian_batch(key: jax.Array, shape: tuple[int, ...], sigma2: Any) -> np.ndarray:
    r"""I.i.d. exact draws of ``N_Z(0, sigma^2)`` on the host, many at once (NumPy).

    The same law as :func:`discrete_gaussian` (``sigma^2`` is :func:`gaussian_sigma2_used`
    ``(sigma2)``, used exactly; draws conditioned on ``|X| <= 2^30 - 1``, which removes a mass
    below ``exp(-5 10^5)`` for ``sigma^2 <= 2^40``), by a different route that costs a few
    vectorised passes per draw instead of a lock-step loop over every lane:

    CKS 2020 Algorithm 3 with ``t = floor(sigma) + 1``. Each attempt, for every entry still
    pending: the discrete Laplace proposal of scale ``t``, ``Y = +-G`` with ``P(G = g) ∝
    exp(-g/t)`` (:func:`_geometric`, one uniform), a uniform sign, ``-0`` rejected (so
    ``P(Y = y) ∝ exp(-|y|/t)``); then acceptance with probability ``exp(-(|Y| -
    sigma^2/t)^2 / (2 sigma^2))``. An entry whose attempt fails makes a fresh attempt in the
    next pass (the passes shrink geometrically), which leaves the law of the accepted value
    unchanged. Every Bernoulli is ``[U < exp(-gamma)]`` for a uniform ``U`` and the exact
    rational ``gamma`` (:func:`_bern_exp`, :func:`_geometric`): decided from float64 where its
    error cannot change the answer, exactly otherwise. Uniform words: NumPy's Philox keyed by
    the JAX key (:func:`_host_generator`); a word's top 53 bits make ``U``, its lowest bit the
    sign.

    Args:
        key: a PRNG key (consumed); a host value.
        shape: the output shape.
        sigma2: the variance parameter, a host scalar in ``[SIGMA2_MIN, SIGMA2_MAX]``.

    Returns:
        An int64 NumPy array of ``shape``.
    """
    shape = _check_shape(shape)
    _check_range(sigma2, "sigma2", SIGMA2_MIN, SIGMA2_MAX, "(the discrete Gaussian's sigma^2)")
    used = float(np.asarray(gaussian_sigma2_used(_host_scalar(sigma2, "sigma2"))))
    s2 = Fraction(used)  # exact: a float32
    t = math.isqrt(math.floor(s2)) + 1  # floor(sigma) + 1 <= 2^20 + 1 (any t > 0 is exact)
    mu = used / t
    gen = _host_generator(key)
    size = int(np.prod(shape, dtype=np.int64))
    out = np.empty(size, np.int64)
    todo = np.arange(size)
    while todo.size:
        w = _words64(gen, todo.size)
        x = _geometric(gen, _u53(w), t, _X_MAX + 1)
        neg = (w & np.uint64(1)).astype(bool)
        idx = np.flatnonzero(~(neg & (x == 0)) & (x <= _X_MAX))  # -0, |Y| > X_MAX: again
        x = x[idx]
        lo, hi = _bounds_table((x - mu) ** 2 / (2.0 * used))
        ok = _bern_exp(gen, _u53(_words64(gen, idx.size)), lo, hi,
                       lambda i, x=x: (int(x[i]) - s2 / t) ** 2 / (2 * s2))
        acc = idx[ok]
        out[todo[acc]] = np.where(neg[acc], -x[ok], x[ok])
        done = np.zeros(todo.size, bool)
        done[acc] = True
        todo = todo[~done]
    return out.reshape(shape)


def secure_gaussian_rows(key: jax.Array, rows: Any, noise: SecureNoise) -> jax.Array:
    r"""Release every row of ``rows`` (``(n, ...)``, one user's statistic per row) as
    :func:`secure_gaussian_mechanism` releases one statistic at the parameters ``noise`` (its
    grid and exact ``sigma^2``, computed for one row): ``grid * (to_grid(row_i) + Z_i)`` with
    all ``Z_i`` i.i.d. ``N_Z(0, sigma^2)`` (:func:`discrete_gaussian_batch`). The law of ``n``
    independent single-row releases, so each row's release keeps that mechanism's guarantee
    (local DP: one user per row); ``noise.noise = 0`` adds nothing, NaN gives NaN.
    """
    if noise.kind != "discrete_gaussian":
        raise ValueError(f"secure_gaussian_rows needs discrete Gaussian noise; got {noise.kind}")
    value = np.asarray(rows)
    k = np.asarray(to_grid(value, noise.grid)).astype(np.int64)
    param = float(np.asarray(noise.noise))
    out_dtype = jnp.asarray(0.0).dtype
    if math.isnan(param):
        return jnp.full(value.shape, jnp.nan, out_dtype)
    z = discrete_gaussian_batch(key, k.shape, param) if param > 0 else 0
    # a function of the exact integers k + z only (|k + z| < 2^31): post-processing
    return jnp.asarray((k + z).astype(out_dtype) * np.asarray(noise.grid, out_dtype))
