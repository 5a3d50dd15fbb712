r"""Canonical generalised linear models (Cai, Wang & Zhang; spec 003 §1.2).

Model: ``f_beta(y | x) = h(y) exp((x^T beta * y - psi(x^T beta)) / c)`` with cumulant ``psi`` and
dispersion ``c``. The mean negative log-likelihood and its gradient are

.. math::

    L_n(\beta) = \frac1n \sum_i \big(\psi(x_i^T\beta) - y_i x_i^T\beta\big), \qquad
    \nabla L_n(\beta) = \frac1n \sum_i \big(\psi'(x_i^T\beta) - y_i\big) x_i .

=========  ================  ===============  ===========================  =========
family     ``psi(u)``        ``psi'(u)``      ``c1 = sup |psi'|``          ``c``
=========  ================  ===============  ===========================  =========
logistic   ``log(1+e^u)``    ``sigmoid(u)``   1                            1
linear     ``u^2/2``         ``u``            ``U`` (predictor bound)      ``noise_sd^2``
poisson    ``e^u``           ``e^u``          ``e^U`` (predictor bound)    1
=========  ================  ===============  ===========================  =========

**The clipped gradient and its sensitivity.** The private algorithms (spec 003 Algs 1 and 5) use

.. math::

    g(\beta) = \frac1n \sum_i \big(\psi'(\Pi_U(\tilde x_i^T\beta)) - \Pi_R(y_i)\big)\,\tilde x_i,

where ``Pi_R`` clips the response to ``[-R, R]`` (the paper's truncation), ``x~_i`` is ``x_i``
projected onto the design bound -- the l2 ball of radius ``sigma_x sqrt(d)`` (assumption (D1),
Algorithm 1) or the box ``[-sigma_x, sigma_x]^d`` ((D1'), Algorithm 5) -- and ``Pi_U`` clips the
linear predictor to ``[-U, U]``. Every per-record term then has norm at most
``(R + c1) sigma_x sqrt(d)`` (l2) or ``(R + c1) sigma_x`` (l-infinity), so replacing one record
moves ``g`` by at most

.. math::

    \Delta_2 = 2 (R + c_1) \sigma_x \sqrt d / n, \qquad \Delta_\infty = 2 (R + c_1) \sigma_x / n,

for every ``beta`` (replace-one adjacency, n fixed). This is the bound the paper derives in the
proofs of Lemmas 1 and 5 before it writes ``B = 4(R + c1) sigma_x``; it is attained in the limit
``||beta|| -> inf`` (two records on opposite sides of a coordinate, both with ``psi' -> c1`` and
``y = -R``), see the tests.

Two additions to the paper, both documented where they are used:

* **x is clipped.** The paper never bounds x for *every* admissible record, only almost surely
  under its design; a worst-case guarantee needs the bound enforced. Clipping (not rejecting) is
  the private policy: rejecting a data set because of one record is itself a data-dependent
  output. For the simulated designs (``x`` in ``(-1, 1)^d``, ``sigma_x = 1``) clipping is the
  identity.
* **The linear predictor is clipped (linear and Poisson only).** (G1) ``||psi'||_inf < c1`` fails
  for the linear and Poisson models, so the paper's privacy proof does not cover them. With
  ``U = predictor_bound < inf``, ``c1 = sup_{|u| <= U} |psi'(u)|`` is finite; the clipped gradient
  is then the exact gradient of the convex surrogate in which ``psi`` is extended linearly
  outside ``[-U, U]`` (a Huber loss for the linear model), whose minimiser is the MLE whenever all
  fitted predictors satisfy ``|x_i^T beta| < U``. For the logistic model ``U = inf`` (no clipping,
  ``c1 = 1``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax.mechanisms import BoundedStatistic, clip_l2, clip_linf, records_dot, sanitize

__all__ = ["GLM", "GLMData", "decode_design", "sparse_sphere_beta", "sphere_beta"]

Family = Literal["logistic", "linear", "poisson"]
DesignNorm = Literal["l2", "linf"]
FAMILIES: tuple[str, ...] = ("logistic", "linear", "poisson")


class GLMData(NamedTuple):
    """Observations ``(x_i, y_i)``, one record per row.

    ``x`` is a float ``(n, d)`` design, or (simulated designs only, to fit large ``n x d`` in
    memory) a ``uint8`` array of codes of the 256-point grid ``(k + 1/2)/128 - 1``, decoded by
    :func:`decode_design`.
    """

    x: jax.Array  # (n, d) float, or uint8 grid codes
    y: jax.Array  # (n,) responses


def decode_design(x: jax.Array) -> jax.Array:
    """Float design from ``x``: identity for floats; ``(k + 1/2)/128 - 1`` for ``uint8`` codes.

    The code grid is the 256 mid-points of an even partition of ``(-1, 1)``: a discretised
    ``U(-1, 1)`` with mean 0, variance ``(1 - 2^-16)/3`` and ``|x| <= 255/256 < 1``.
    """
    if x.dtype == jnp.uint8:  # (k + 1/2)/128 - 1 = (k - 127.5)/128, exactly, in two operations
        return (x.astype(jnp.float32) - 127.5) * (1.0 / 128.0)
    return x


def _centred_codes(x: jax.Array) -> jax.Array:
    """``128 decode_design(x)`` for ``uint8`` codes: ``k - 127.5``, exact in float32."""
    return x.astype(jnp.float32) - 127.5


def _raw(x: jax.Array) -> jax.Array:
    return x


#: The largest absolute value :func:`decode_design` returns for ``uint8`` codes.
GRID8_BOUND = 255.0 / 256.0


@dataclasses.dataclass(frozen=True)
class GLM:
    """A canonical GLM with the bounds that make its clipped gradient bounded.

    Attributes:
        family: ``"logistic"`` (the paper's privacy proof covers it), ``"linear"`` or
            ``"poisson"`` (extensions: need a finite ``predictor_bound`` for private fits).
        sigma_x: the design bound of (D1)/(D1'): records are clipped to the l2 ball of radius
            ``sigma_x sqrt(d)`` (Algorithm 1) or the box ``[-sigma_x, sigma_x]^d`` (Algorithm 5).
        predictor_bound: ``U``; the linear predictor is clipped to ``[-U, U]`` inside the private
            gradient. Must be ``inf`` for the logistic family (not needed: ``c1 = 1``).
        noise_sd: the noise standard deviation of the linear model (``c = noise_sd^2``); ignored
            by the other families.
        design: ``"uniform"`` -- :meth:`simulate` draws ``x ~ U(-1, 1)^d`` in float32;
            ``"grid8"`` -- the 256-point grid of :func:`decode_design`, stored as ``uint8``
            (a quarter of the memory; for ``n x d`` in the 10^8..10^9 range).
        row_block: if set, gradients are accumulated over blocks of this many rows with
            ``lax.scan`` (bounded temporaries for large ``n x d``); ``None`` -- one block.
    """

    family: Family = "logistic"
    sigma_x: float = 1.0
    predictor_bound: float = math.inf
    noise_sd: float = 1.0
    design: Literal["uniform", "grid8"] = "uniform"
    row_block: int | None = None

    def __post_init__(self) -> None:
        _validate.check_choice(self.family, "family", FAMILIES)
        _validate.check_positive(self.sigma_x, "sigma_x")
        _validate.check_positive(self.predictor_bound, "predictor_bound", allow_inf=True)
        _validate.check_positive(self.noise_sd, "noise_sd")
        if self.family == "logistic" and math.isfinite(self.predictor_bound):
            raise ValueError(
                "predictor_bound must be inf for the logistic family (psi' is bounded by 1)"
            )
        _validate.check_choice(self.design, "design", ("uniform", "grid8"))
        if self.row_block is not None:
            _validate.check_int_in_range(self.row_block, "row_block", 1)

    @property
    def name(self) -> str:
        return f"{self.family}-glm"

    # -- the exponential family ---------------------------------------------------------------

    def psi(self, u: jax.Array) -> jax.Array:
        """The cumulant function ``psi(u)``."""
        if self.family == "logistic":
            return jax.nn.softplus(u)
        if self.family == "linear":
            return 0.5 * u * u
        return jnp.exp(u)

    def mean(self, u: jax.Array) -> jax.Array:
        """The mean function ``psi'(u)``."""
        if self.family == "logistic":
            return jax.nn.sigmoid(u)
        if self.family == "linear":
            return u
        return jnp.exp(u)

    def variance(self, u: jax.Array) -> jax.Array:
        """``psi''(u)`` (Fisher information weight)."""
        if self.family == "logistic":
            p = jax.nn.sigmoid(u)
            return p * (1.0 - p)
        if self.family == "linear":
            return jnp.ones_like(u)
        return jnp.exp(u)

    @property
    def c1(self) -> float:
        """``sup_{|u| <= U} |psi'(u)|``: 1 (logistic), ``U`` (linear), ``e^U`` (Poisson)."""
        if self.family == "logistic":
            return 1.0
        if self.family == "linear":
            return float(self.predictor_bound)
        return float(math.exp(self.predictor_bound)) if math.isfinite(
            self.predictor_bound) else math.inf

    @property
    def dispersion(self) -> float:
        """``c(sigma)``: 1 (logistic, Poisson) or ``noise_sd^2`` (linear)."""
        return float(self.noise_sd) ** 2 if self.family == "linear" else 1.0

    # -- simulation (spec 003 §4.1) -------------------------------------------------------------

    def simulate(self, key: jax.Array, n: int, beta: jax.Array) -> GLMData:
        """``n`` records: ``x ~ U(-1, 1)^d`` (or its 8-bit grid), ``y | x`` from the family.

        Logistic: ``y ~ Bernoulli(sigmoid(x^T beta))``; linear: ``y = x^T beta + noise_sd * e``;
        Poisson: ``y ~ Poisson(exp(x^T beta))``.
        """
        key_x, key_y = jax.random.split(key)
        beta = jnp.asarray(beta)
        d = beta.shape[0]
        if self.design == "grid8":
            if d % 4:
                raise ValueError(f"design='grid8' needs d divisible by 4; got d = {d}")
            x, eta = self._grid8_design(key_x, n, beta)
        else:
            x = jax.random.uniform(key_x, (n, d), beta.dtype, minval=-1.0, maxval=1.0)
            eta = self._rowwise(lambda xb, _: xb @ beta, x, jnp.zeros((n,), beta.dtype),
                                stack=True)
        if self.family == "logistic":
            y = jax.random.bernoulli(key_y, jax.nn.sigmoid(eta)).astype(beta.dtype)
        elif self.family == "linear":
            y = eta + self.noise_sd * jax.random.normal(key_y, (n,), beta.dtype)
        else:
            y = jax.random.poisson(key_y, jnp.exp(eta)).astype(beta.dtype)
        return GLMData(x, y)

    def _grid8_design(self, key: jax.Array, n: int, beta: jax.Array):
        """The 8-bit design ``bits(key, (n, d/4))`` viewed as ``(n, d)`` bytes, and ``x beta``.

        With ``row_block`` set the words are hashed block by block (bit for bit those of
        :func:`random_words`) inside a loop whose output the product then reads: XLA would
        otherwise fuse the hash into both the stored design and the product, computing it twice.
        """
        d = beta.shape[0]
        w, bs = d // 4, self._block_rows(n)

        def codes(words):
            return jax.lax.bitcast_convert_type(words, jnp.uint8).reshape(-1, d)

        if bs is None or bs >= n or n * w >= 2**32 or not _fast_words_apply(key):
            x = codes(random_words(key, (n, w)))
        else:
            k1, k2 = jax.random.key_data(key)

            def block(start, rows):  # rows [start, start + rows) of random_words(key, (n, w))
                counts = start * np.uint32(w) + jax.lax.iota(jnp.uint32, rows * w)
                counts = counts.reshape(rows, w)
                a, b = _threefry2x32(k1, k2, jnp.zeros_like(counts), counts)
                return codes(a ^ b)

            nb, rem = divmod(n, bs)
            _, xb = jax.lax.scan(lambda c, i: (c, block(i * bs, bs)), None,
                                 jnp.arange(nb, dtype=jnp.uint32))
            x = xb.reshape(nb * bs, d)
            if rem:
                x = jnp.concatenate([x, block(np.uint32(nb * bs), rem)])
        eta = self._rowwise(lambda xb, _: xb @ beta, x, jnp.zeros((n,), beta.dtype), stack=True)
        return x, eta

    def _block_rows(self, n: int) -> int | None:
        """The rows per block for ``n`` records: ``row_block``, or the largest divisor of ``n``
        in ``[row_block / 2, row_block]`` when ``row_block`` does not divide ``n`` (a remainder
        block makes XLA copy the whole design: measured, 2.6 GB instead of 1.0 GB at n = 40000,
        d = 10000), else ``row_block`` with a remainder. Static (``n`` is a shape)."""
        bs = self.row_block
        if bs is None or bs >= n or n % bs == 0:
            return bs
        for cand in range(bs - 1, (bs + 1) // 2 - 1, -1):
            if n % cand == 0:
                return cand
        return bs

    # -- gradients ------------------------------------------------------------------------------

    def _rowwise(
        self,
        fn: Callable[[jax.Array, jax.Array], jax.Array],
        x: jax.Array,
        y: jax.Array,
        stack: bool = False,
        decode: Callable[[jax.Array], jax.Array] = decode_design,
    ) -> jax.Array:
        """Apply ``fn(x_block_float, y_block)`` over row blocks; sum (or concatenate, ``stack``).

        With ``row_block = None`` this is ``fn(decode(x), y)`` (``decode`` defaults to
        :func:`decode_design`).
        """
        n = x.shape[0]
        bs = self._block_rows(n)
        if bs is None or bs >= n:
            return fn(decode(x), y)
        nb, rem = divmod(n, bs)
        xb = x[: nb * bs].reshape((nb, bs) + x.shape[1:])
        yb = y[: nb * bs].reshape((nb, bs) + y.shape[1:])
        if stack:
            out = jax.lax.map(lambda a: fn(decode(a[0]), a[1]), (xb, yb))
            out = out.reshape((nb * bs,) + out.shape[2:])
            if rem:
                out = jnp.concatenate([out, fn(decode(x[nb * bs:]), y[nb * bs:])])
            return out

        def body(acc, a):
            return acc + fn(decode(a[0]), a[1]), None

        first = jax.eval_shape(lambda: fn(decode(xb[0]), yb[0]))
        acc, _ = jax.lax.scan(body, jnp.zeros(first.shape, first.dtype), (xb, yb))
        if rem:
            acc = acc + fn(decode(x[nb * bs:]), y[nb * bs:])
        return acc

    def gradient(self, beta: jax.Array, data: GLMData) -> jax.Array:
        """The non-private ``grad L_n(beta) = (1/n) sum_i (psi'(x_i^T beta) - y_i) x_i``.

        No clipping of x, y or the predictor: the gradient of the non-private twins (GD, IHT).
        """
        n = data.y.shape[0]

        def part(x, y):
            return records_dot(x, self.mean(x @ beta) - y)

        return self._rowwise(part, data.x, data.y) / n

    def clip_design(self, x: jax.Array, norm: DesignNorm) -> jax.Array:
        """Project each record onto the design bound: the l2 ball of radius ``sigma_x sqrt(d)``
        (``norm="l2"``, (D1)) or the box ``[-sigma_x, sigma_x]^d`` (``norm="linf"``, (D1'))."""
        if norm == "l2":
            return clip_l2(x, self.sigma_x * math.sqrt(x.shape[-1]))
        if norm == "linf":
            return clip_linf(x, self.sigma_x)
        raise ValueError(f"norm must be 'l2' or 'linf'; got {norm!r}")

    def residual_bound(self, truncation: Any) -> Any:
        """``R + c1``: the bound on ``|psi'(Pi_U(x^T beta)) - Pi_R(y)|`` for every record."""
        return truncation + self.c1

    def clipped_gradient(
        self, beta: jax.Array, data: GLMData, truncation: Any, norm: DesignNorm,
        support: jax.Array | None = None, mask: jax.Array | None = None, count: Any = None,
    ) -> BoundedStatistic:
        r"""The clipped gradient ``g(beta)`` with its replace-one sensitivity.

        ``g = (1/n) sum_i (psi'(Pi_U(x~_i^T beta)) - Pi_R(y_i)) x~_i`` with ``x~_i`` clipped to
        the design bound in ``norm`` (see the module docstring). Sensitivity (in ``norm``):
        ``2 (R + c1) sigma_x sqrt(d) / n`` for ``"l2"``, ``2 (R + c1) sigma_x / n`` for
        ``"linf"``, valid for every ``beta`` (a public iterate).

        Args:
            beta: ``(d,)`` the current (public) iterate.
            data: the data set.
            truncation: ``R`` (array or float) in ``(0, inf]``; inf only for non-private use.
            norm: ``"l2"`` (Algorithm 1) or ``"linf"`` (Algorithm 5).
            support: optional ``(k,)`` distinct indices that hold every non-zero of ``beta``
                (e.g. an s-sparse IHT iterate's ``top_k``): the predictors ``x_i^T beta`` then
                read only those ``k`` columns of the design, not all ``d`` (the same sum,
                without its zero terms). Not with ``norm="l2"`` on a float design, whose
                projection of a record needs every coordinate.
            mask: optional ``(m,)`` bool: only these rows are records; the others (padding)
                contribute nothing, whatever they hold. ``count`` is then the public number of
                records ``n`` (a runtime value: :class:`dpjax.base.Padded`).
        """
        n, d = data.x.shape
        y_in = data.y
        if mask is not None:
            n = count
            # the mask rides with y through the row blocks: a record's term is kept or zeroed
            y_in = jnp.stack([data.y.astype(beta.dtype), mask.astype(beta.dtype)], axis=-1)

        def unmask(x, y):  # (design rows, y, keep) of a block; keep is None without a mask
            if mask is None:
                return x, y, None
            keep = y[:, 1] > 0
            return x, y[:, 0], keep

        def masked(resid, xt, keep):
            if keep is None:
                return records_dot(xt, resid)
            zero = jnp.zeros((), xt.dtype)
            return records_dot(jnp.where(keep[:, None], xt, zero), jnp.where(keep, resid, zero))
        R = jnp.asarray(truncation, beta.dtype)
        U = self.predictor_bound
        # 8-bit codes decode inside the box [-255/256, 255/256]^d (and so inside the l2 ball):
        # the projection is the identity there, and skipping it saves a third of a pass
        in_bound = data.x.dtype == jnp.uint8 and self.sigma_x >= GRID8_BOUND
        # and x = (k - 127.5) / 128 exactly: the power-of-two scale moves onto beta and the sum
        # (exact too), leaving two operations per entry of the design to decode it
        scale = 1.0 / 128.0 if in_bound else 1.0
        b = beta * scale

        def part(x, y):
            x, y, keep = unmask(x, y)
            xt = x if in_bound else self.clip_design(x, norm)
            if keep is not None:
                xt = jnp.where(keep[:, None], xt, jnp.zeros((), xt.dtype))
            u = sanitize(xt @ b)  # a huge public iterate can overflow the predictor
            if math.isfinite(U):
                u = clip_linf(u, U)
            resid = self.mean(u) - clip_linf(y, R)
            return masked(resid, xt, keep)

        decode = _centred_codes if in_bound else decode_design
        if support is not None:
            if norm == "l2" and not in_bound:
                raise ValueError("support= needs norm='linf' (or 8-bit codes inside the l2 "
                                 "ball): the l2 projection of a record reads every coordinate")
            b_support = jnp.take(b, support)

            def part_sparse(codes, y):  # the codes of the support only, decoded and clipped
                codes, y, keep = unmask(codes, y)
                xs = decode(jnp.take(codes, support, axis=1))
                xs = xs if in_bound else self.clip_design(xs, norm)
                if keep is not None:
                    xs = jnp.where(keep[:, None], xs, jnp.zeros((), xs.dtype))
                u = sanitize(xs @ b_support)
                if math.isfinite(U):
                    u = clip_linf(u, U)
                xt = decode(codes)
                xt = xt if in_bound else self.clip_design(xt, norm)
                return masked(self.mean(u) - clip_linf(y, R), xt, keep)

            value = self._rowwise(part_sparse, data.x, y_in, decode=_raw) * scale / n
        else:
            value = self._rowwise(part, data.x, y_in, decode=decode) * scale / n
        radius = self.sigma_x * (math.sqrt(d) if norm == "l2" else 1.0)
        sens = 2.0 * self.residual_bound(R) * radius / n
        return BoundedStatistic(value, sens, norm, "replace-one")

    def score(self, beta: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
        """The score ``S_beta(y, x) = (y - psi'(x^T beta)) x / c`` (spec 003 Lemma 17).

        ``x`` is ``(..., d)`` and ``y`` is ``(...)``; returns ``(..., d)``.
        """
        x = decode_design(x)
        return ((y - self.mean(x @ beta)) / self.dispersion)[..., None] * x

    def loss(self, beta: jax.Array, data: GLMData) -> jax.Array:
        """The mean negative log-likelihood ``L_n(beta)`` (up to terms free of beta)."""
        n = data.y.shape[0]

        def part(x, y):
            u = x @ beta
            return jnp.sum(self.psi(u) - y * u)

        return self._rowwise(part, data.x, data.y) / n

    #: ``clipped_gradient`` takes a row mask and a runtime count (padded programs)
    supports_mask = True

    # -- facts for ledgers and validation ------------------------------------------------------

    def dim(self, data: GLMData) -> int:
        return int(data.x.shape[1])

    def num_records(self, data: GLMData) -> int:
        return int(data.x.shape[0])

    def validate_data(self, data: Any, on_invalid: str = "raise") -> GLMData:
        """Check a data set at the public boundary: ``GLMData`` or a pair ``(x, y)``.

        ``x`` must be a finite real ``(n, d)`` array and ``y`` a finite real ``(n,)`` array.
        Out-of-range values are *not* rejected (that would make the output depend on one
        record): x is clipped to the design bound and y to ``[-R, R]`` inside the algorithms.
        One exception, with ``on_invalid="raise"`` (the default, for simulations and data
        checked beforehand): a logistic model's labels must be 0 or 1 (``y ~ Bernoulli``;
        booleans are accepted), and anything else (a label 2, or -1 of a +-1 coding) is
        refused as a wrong coding, before anything is computed.
        """
        if isinstance(data, GLMData):
            x, y = data.x, data.y
        elif isinstance(data, (tuple, list)) and len(data) == 2:
            x, y = data
        else:
            raise TypeError("data must be a GLMData(x, y) or a pair (x, y)")
        x, y = _validate.check_xy(x, y, on_invalid, allow_bool_y=True)
        if self.family == "logistic" and on_invalid == "raise" and y.dtype != np.bool_:
            bad = ~np.isin(y, (0.0, 1.0))
            if bad.any():
                raise ValueError(
                    f"data.y: a logistic model's labels must be 0 or 1; {int(bad.sum())} are "
                    f"not (e.g. {y[bad][0]:g}; recode a -1/+1 coding as (y + 1) / 2)")
        dtype = jnp.result_type(float)
        return GLMData(jnp.asarray(x, dtype=dtype), jnp.asarray(y, dtype=dtype))


def sphere_beta(key: jax.Array, d: int, dtype=jnp.float32) -> jax.Array:
    """``beta`` uniform on the unit sphere ``S^{d-1}`` (spec 003 §4.1): a normalised Gaussian."""
    g = jax.random.normal(key, (d,), dtype)
    return g / jnp.linalg.norm(g)


def sparse_sphere_beta(key: jax.Array, d: int, s: int, dtype=jnp.float32) -> jax.Array:
    """``(u, 0)`` with ``u`` uniform on the unit sphere of ``R^s``: support = the first ``s``
    coordinates (spec 003 §4.3)."""
    _validate.check_int_in_range(s, "s", 1, d)
    return jnp.concatenate([sphere_beta(key, s, dtype), jnp.zeros((d - s,), dtype)])


# --------------------------------------------------------------------------------------------
# Random words for the 8-bit design, bit for bit those of jax.random.bits
# --------------------------------------------------------------------------------------------


def _rotl(x: jax.Array, r: int) -> jax.Array:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _threefry2x32(k1: jax.Array, k2: jax.Array, x0: jax.Array, x1: jax.Array):
    """The Threefry-2x32 hash (20 rounds), unrolled: the same function as JAX's
    ``threefry2x32`` primitive, written as one elementwise expression."""
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for r in rotations[i % 2]:
            x0 = x0 + x1
            x1 = x0 ^ _rotl(x1, r)
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def _fast_words_apply(key: jax.Array) -> bool:
    """Whether :func:`random_words` may compute the words itself: a threefry key under JAX's
    (default) partitionable threefry, whose ``bits`` hash each element's flat index."""
    if not jax.config.jax_threefry_partitionable:
        return False
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):  # raw uint32 keys: JAX's own path
        return False
    return "threefry" in str(jax.random.key_impl(key))


def random_words(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """``jax.random.bits(key, shape, uint32)``, bit for bit, about 6x faster on CPU.

    JAX lowers its threefry primitive on CPU to a rolled loop whose every round writes the whole
    array to memory; here the same hash of each element's flat index (partitionable threefry:
    word ``i`` is ``a ^ b`` for ``(a, b) = threefry2x32(key, (0, i))``) is one fused elementwise
    expression. Falls back to ``jax.random.bits`` for other key implementations, the
    non-partitionable threefry or ``2^32`` elements and more (tests check the equality).
    """
    size = math.prod(shape)
    if size >= 2**32 or not _fast_words_apply(key):
        return jax.random.bits(key, shape, dtype=jnp.uint32)
    k1, k2 = jax.random.key_data(key)
    counts = jax.lax.iota(jnp.uint32, size).reshape(shape)
    a, b = _threefry2x32(k1, k2, jnp.zeros_like(counts), counts)
    return a ^ b
