"""Differentiable prototyping: tune continuous hyperparameters on a Monte Carlo risk.

The Monte Carlo risk of an estimator at hyperparameters ``h`` (a clipping level, a step size, a
truncation level) is

    R_hat(h) = (1/R) sum_{r=1..R} loss(run(h; D_r, xi_r), truth),

with ``R`` repetitions, data sets ``D_r`` and noise keys ``xi_r`` **fixed** once (common random
numbers). dpjax draws every noise as ``scale x standard draw`` (the Gaussian and Laplace
mechanisms multiply a standard draw by the scale computed from the statistic's sensitivity), so
with the keys fixed, ``R_hat`` is a deterministic function of ``h`` whose pathwise derivative
``jax.grad`` computes: through the iterates, the clipping of each record, and the noise scales.
:func:`minimize` follows it with an optax optimiser; :func:`grid_search` evaluates the same
function (same draws) on a grid, to check the answer.

**Privacy.** Nothing here is private. Tuning on the sensitive data set itself spends privacy:
the chosen hyperparameters are a function of the data, and releasing an estimate computed with
them is not covered by the estimator's ledger. Tune on simulated data (as the examples do) or on
public data, then run the estimator once, with the tuned values fixed, on the private data.

**Where the estimator is not differentiable.** NoisyHT/peeling (an argmax per selected
coordinate) and hard thresholding select a support; the selection is piecewise constant in
``h``. The pathwise derivative holds the selections of every run fixed: it is the derivative of
``R_hat`` between selection changes, and it misses the jumps of ``R_hat`` where a selection
changes (so it is not an unbiased estimate of the derivative of the expected risk when the loss
depends on the support). A loss that depends on ``h`` *only* through a selection (a support
recovery rate, say) has a pathwise gradient of exactly zero. :func:`value_and_grad` never
returns such a zero silently: it raises :class:`NonDifferentiableError`. The documented
relaxation is ``method="smoothed"``: the gradient of the Gaussian-smoothed risk
``E_u R_hat(theta + sigma u)``, ``u ~ N(0, I)``, in the (log) tuning coordinates ``theta``,
estimated with antithetic pairs of fixed directions,

    g_hat = sum_{k=1..K} (R_hat(theta + sigma u_k) - R_hat(theta - sigma u_k)) u_k / (2 sigma K),

which is non-zero wherever a selection changes within about ``sigma`` of ``theta``. It
differentiates the smoothed risk, not the risk; ``sigma`` sets the bias.

Example (the DP mean of ``docs/adding_an_estimator.md``: tune its clipping radius)::

    from dpjax import tune
    from dpjax.examples import dp_mean

    risk = tune.monte_carlo_risk(
        dp_mean.DP_MEAN, lambda state, truth: jnp.sum((state.beta - truth) ** 2),
        simulate=dp_mean.simulate, truth=jnp.ones(2), n=200, params0=jnp.zeros(2),
        reps=64, seed=0)
    space = tune.LogSpace(dp_mean.MeanHyperparams(1.0, 1e-5, 1.0), clip=("clip",))
    result = tune.minimize(risk, space, steps=100, learning_rate=0.05)
    result.hparams.clip   # the tuned radius
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.base import Estimator, run

__all__ = [
    "LogSpace",
    "MonteCarloRisk",
    "NonDifferentiableError",
    "TuneResult",
    "grid_search",
    "minimize",
    "monte_carlo_risk",
    "value_and_grad",
]

PyTree = Any
Method = Literal["pathwise", "smoothed"]
DATA_TAG, NOISE_TAG = 0, 1  # fold_in tags of the data and noise keys under the seed's key


class NonDifferentiableError(ValueError):
    """The pathwise gradient is exactly zero (or not finite) in a tuned coordinate.

    Raised instead of returning the zero: the Monte Carlo risk is locally constant in that
    coordinate for the fixed draws, usually because it depends on the hyperparameter only
    through a selection (peeling's argmax, hard thresholding) or a clip that no record reaches
    while no noise scale depends on it. Use ``method="smoothed"``, or a grid.
    """


# --------------------------------------------------------------------------------------------
# The Monte Carlo risk
# --------------------------------------------------------------------------------------------


class MonteCarloRisk:
    """``h -> mean loss over R runs`` with the data and noise of every run fixed.

    Build it with :func:`monte_carlo_risk`. Calling it returns the mean loss (a scalar, jittable
    and differentiable in ``hparams``); :meth:`losses` returns the ``R`` losses, for standard
    errors and paired comparisons.

    Attributes:
        estimator: the estimator.
        reps: the number of repetitions ``R``.
        seed: the seed the data and noise keys come from.
        data: the data, leaves with a leading repetition axis (simulated) or one fixed data set.
        per_rep_data: whether ``data`` has a repetition axis.
    """

    def __init__(self, estimator: Estimator, loss: Callable, *, data: PyTree, per_rep_data: bool,
                 truth: PyTree, params0: PyTree, noise_keys: jax.Array, reps: int,
                 seed: int) -> None:
        self.estimator = estimator
        self.reps = reps
        self.seed = seed
        self.data = data
        self.per_rep_data = per_rep_data
        self._truth = truth
        self._params0 = params0
        self._keys = noise_keys

        self.pure_losses = _pure_losses(estimator, loss, per_rep_data)
        self._losses = _JITTED.setdefault(self.pure_losses, jax.jit(self.pure_losses))

    @property
    def operands(self) -> tuple[PyTree, jax.Array, PyTree, PyTree]:
        """``(data, noise keys, truth, params0)``: the fixed inputs, the arguments of
        :attr:`pure_losses` after ``hparams`` (arguments, never closed-over constants: XLA
        would constant-fold them)."""
        return self.data, self._keys, self._truth, self._params0

    def losses(self, hparams: PyTree) -> jax.Array:
        """The ``R`` losses ``loss(run_r(hparams), truth)``, shape ``(reps,)``."""
        return self._losses(hparams, *self.operands)

    def __call__(self, hparams: PyTree) -> jax.Array:
        """The Monte Carlo risk: the mean of :meth:`losses`."""
        return jnp.mean(self.losses(hparams))

    def standard_error(self, hparams: PyTree) -> float:
        """The Monte Carlo standard error of the risk at ``hparams``."""
        x = np.asarray(self.losses(hparams), np.float64)
        return float(x.std(ddof=1) / math.sqrt(x.size))


@functools.lru_cache(maxsize=64)
def _pure_losses(estimator: Estimator, loss: Callable, per_rep_data: bool) -> Callable:
    """``(hparams, data, keys, truth, params0) -> (reps,)`` losses: one function per
    (estimator, loss), so risks that differ only in their draws share compiled code."""

    def one(key, data_r, hparams, truth, params0):
        final, _ = run(estimator, key, data_r, estimator.init(params0), hparams, record=_nothing)
        return loss(final, truth)

    def losses(hparams, data, keys, truth, params0):
        hparams = jax.tree_util.tree_map(jnp.asarray, hparams)
        return jax.vmap(one, in_axes=(0, 0 if per_rep_data else None, None, None, None))(
            keys, data, hparams, truth, params0)

    return losses


_JITTED: dict[Callable, Callable] = {}


@functools.lru_cache(maxsize=64)
def _simulate_batch(simulate: Callable, n: int) -> Callable:
    """``(keys (R,), truth) -> R data sets``, jitted once per (simulate, n)."""
    return jax.jit(jax.vmap(lambda key, truth: simulate(key, n, truth), in_axes=(0, None)))


def _nothing(state: PyTree, info: PyTree) -> tuple:
    del state, info
    return ()


def monte_carlo_risk(
    estimator: Estimator,
    loss: Callable[[PyTree, PyTree], jax.Array],
    *,
    params0: PyTree,
    reps: int,
    seed: int = 0,
    simulate: Callable[[jax.Array, int, PyTree], PyTree] | None = None,
    truth: PyTree = None,
    n: int | None = None,
    data: PyTree = None,
) -> MonteCarloRisk:
    """The Monte Carlo risk of ``estimator`` as a function of its hyperparameters.

    Either simulated data (``simulate``, ``truth``, ``n``: repetition ``r`` gets the data
    ``simulate(fold_in(data_key, r), n, truth)``, generated once, here) or one fixed data set
    (``data``: public data, every repetition redraws only the noise). The noise of repetition
    ``r`` comes from ``fold_in(noise_key, r)``; ``data_key`` and ``noise_key`` are
    ``fold_in(key(seed), 0)`` and ``fold_in(key(seed), 1)``. The keys never change afterwards:
    common random numbers for every ``hparams`` the risk is evaluated at.

    Args:
        estimator: any :class:`~dpjax.base.Estimator` (``dp_glm.noisy_gd(...)``,
            ``dp_iv.dp_2s_gd(...)``, ...).
        loss: ``loss(final_state, truth) -> scalar``, e.g. the squared error of
            ``final_state.beta``. Differentiable in the state for :func:`value_and_grad`.
        params0: the data-independent starting value (``estimator.init(params0)``).
        reps: the number of repetitions ``R`` (memory: ``R`` data sets when simulated).
        seed: the seed of the data and noise keys.
        simulate: ``simulate(key, n, truth) -> data`` (e.g. ``model.simulate``).
        truth: the truth the loss compares with (and ``simulate`` draws from).
        n: the number of records per simulated data set.
        data: a fixed data set instead of ``simulate`` (leaves with ``n`` rows).

    Returns:
        a :class:`MonteCarloRisk`.
    """
    if not isinstance(estimator, Estimator):
        raise TypeError(f"estimator must be a dpjax.base.Estimator; got {type(estimator).__name__}")
    if not isinstance(reps, (int, np.integer)) or isinstance(reps, bool) or reps < 2:
        raise ValueError(f"reps must be an integer >= 2 (standard errors need two); got {reps!r}")
    if (simulate is None) == (data is None):
        raise ValueError("give either simulate (with truth and n) or a fixed data set, not both")
    root = jax.random.key(int(seed))
    data_key = jax.random.fold_in(root, DATA_TAG)
    noise_key = jax.random.fold_in(root, NOISE_TAG)
    idx = jnp.arange(reps, dtype=jnp.uint32)
    noise_keys = jax.vmap(jax.random.fold_in, (None, 0))(noise_key, idx)
    if simulate is not None:
        if n is None or truth is None:
            raise ValueError("simulated data need n and truth")
        truth_arr = jax.tree_util.tree_map(jnp.asarray, truth)
        data = _simulate_batch(simulate, int(n))(
            jax.vmap(jax.random.fold_in, (None, 0))(data_key, idx), truth_arr)
        per_rep = True
    else:
        truth_arr = None if truth is None else jax.tree_util.tree_map(jnp.asarray, truth)
        data = jax.tree_util.tree_map(jnp.asarray, data)
        per_rep = False
    return MonteCarloRisk(estimator, loss, data=data, per_rep_data=per_rep, truth=truth_arr,
                          params0=jax.tree_util.tree_map(jnp.asarray, params0),
                          noise_keys=noise_keys, reps=int(reps), seed=int(seed))


# --------------------------------------------------------------------------------------------
# Tuning coordinates
# --------------------------------------------------------------------------------------------


class LogSpace:
    """Positive hyperparameters tuned on the log scale.

    ``LogSpace(base, gamma=("gamma1", "gamma2"))`` tunes one coordinate ``theta["gamma"]`` with
    ``gamma1 = gamma2 = exp(theta["gamma"])`` and keeps every other field of ``base`` (a
    hyperparameter NamedTuple) as it is. The log scale keeps step sizes and clipping levels
    positive and makes an optimiser's steps relative.

    Args:
        base: the hyperparameters (one level; scalars).
        **coordinates: tuning coordinate name -> the hyperparameter field(s) it sets.
    """

    def __init__(self, base: Any, **coordinates: str | Sequence[str]) -> None:
        fields = getattr(type(base), "_fields", None)
        if fields is None:
            raise TypeError("base must be a hyperparameter NamedTuple")
        if not coordinates:
            raise ValueError("name at least one coordinate to tune, e.g. eta=('eta',)")
        self.base = base
        self.coordinates: dict[str, tuple[str, ...]] = {}
        for name, group in coordinates.items():
            group = (group,) if isinstance(group, str) else tuple(group)
            unknown = [f for f in group if f not in fields]
            if unknown or not group:
                raise ValueError(f"coordinate {name!r}: {unknown or group} are not fields of "
                                 f"{type(base).__name__} {fields}")
            values = {float(np.asarray(getattr(base, f))) for f in group}
            if len(values) != 1 or not (0 < values.pop() < math.inf):
                raise ValueError(f"coordinate {name!r}: the fields {group} of base must share "
                                 "one finite positive value (the starting point)")
            self.coordinates[name] = group

    @property
    def theta0(self) -> dict[str, jax.Array]:
        """The starting point: the log of ``base``'s values."""
        return {name: jnp.log(jnp.asarray(getattr(self.base, group[0]), jnp.float32))
                for name, group in self.coordinates.items()}

    def __call__(self, theta: Mapping[str, Any]) -> Any:
        """The hyperparameters at ``theta`` (traceable)."""
        if set(theta) != set(self.coordinates):
            raise ValueError(f"theta must have the keys {sorted(self.coordinates)}; got "
                             f"{sorted(theta)}")
        updates = {}
        for name, group in self.coordinates.items():
            value = jnp.exp(jnp.asarray(theta[name], jnp.float32))
            for f in group:
                updates[f] = value
        base = jax.tree_util.tree_map(jnp.asarray, self.base)
        return base._replace(**updates)

    def values(self, theta: Mapping[str, Any]) -> dict[str, float]:
        """``{coordinate: exp(theta)}`` as floats, for display."""
        return {name: float(np.exp(np.asarray(theta[name]))) for name in self.coordinates}


# --------------------------------------------------------------------------------------------
# Gradients
# --------------------------------------------------------------------------------------------


def _check_pathwise(grad: Mapping[str, jax.Array], theta: Mapping[str, Any],
                    space: LogSpace) -> None:
    for name, g in grad.items():
        g = np.asarray(g)
        if not np.all(np.isfinite(g)):
            raise NonDifferentiableError(
                f"the pathwise gradient in {name!r} is not finite ({g}); the risk may not be "
                "differentiable at this point (e.g. a clipping level at a record's exact norm)")
        if np.any(g == 0.0):
            raise NonDifferentiableError(
                f"the pathwise gradient of the Monte Carlo risk in {name!r} "
                f"(= {space.values(theta)[name]:.6g}) is exactly 0 for these draws: the risk is "
                "locally constant in it. This happens when the loss depends on the "
                "hyperparameter only through a selection (NoisyHT/peeling's argmax, hard "
                "thresholding: piecewise constant), or through a clip no record reaches while "
                "no noise scale depends on it. Use method='smoothed' (the gradient of the "
                "Gaussian-smoothed risk, see dpjax.tune) or grid_search.")


def value_and_grad(
    risk: MonteCarloRisk,
    space: LogSpace,
    theta: Mapping[str, Any] | None = None,
    *,
    method: Method = "pathwise",
    smoothing: float = 0.1,
    num_directions: int = 8,
    key: Any = 0,
) -> tuple[float, dict[str, jax.Array]]:
    """The risk and its gradient in the tuning coordinates ``theta`` (default ``space.theta0``).

    Args:
        risk: a :class:`MonteCarloRisk`.
        space: the tuning coordinates (:class:`LogSpace`).
        theta: the point (``{coordinate: log value}``).
        method: ``"pathwise"`` -- ``jax.grad`` through the runs (raises
            :class:`NonDifferentiableError` instead of returning an exact zero);
            ``"smoothed"`` -- the gradient of the Gaussian-smoothed risk
            ``E_u risk(theta + smoothing * u)`` from ``num_directions`` antithetic pairs of
            directions drawn from ``key`` (fixed, like the runs' keys); its value is the mean
            of the ``2 * num_directions`` evaluations.
        smoothing: ``sigma`` of the smoothing, in log units (``"smoothed"`` only).
        num_directions: ``K`` (``"smoothed"`` only).
        key: PRNG key or int seed of the directions (``"smoothed"`` only).

    Returns:
        ``(value, {coordinate: d value / d theta})``.
    """
    if not isinstance(risk, MonteCarloRisk):
        raise TypeError(f"risk must be a MonteCarloRisk (monte_carlo_risk); got "
                        f"{type(risk).__name__}")
    if not isinstance(space, LogSpace):
        raise TypeError(f"space must be a LogSpace; got {type(space).__name__}")
    theta = space.theta0 if theta is None else {k: jnp.asarray(v, jnp.float32)
                                                for k, v in theta.items()}
    if method == "pathwise":
        value, grad = _pathwise(risk, space)(theta)
        _check_pathwise(grad, theta, space)
        return float(value), grad
    if method == "smoothed":
        value, grad = _smoothed(risk, space, float(smoothing), int(num_directions), key)(theta)
        if all(float(g) == 0.0 for g in jax.tree_util.tree_leaves(grad)):
            raise NonDifferentiableError(
                f"the smoothed risk is flat within smoothing = {smoothing:g} of "
                f"{space.values(theta)}: every evaluation gave the same value; increase "
                "smoothing or the number of repetitions")
        return float(value), grad
    raise ValueError(f"method must be 'pathwise' or 'smoothed'; got {method!r}")


_CACHE: dict[tuple, Callable] = {}


def _pathwise(risk, space):
    key = ("pathwise", risk.pure_losses, id(space))
    if key not in _CACHE:

        def mean_risk(theta, operands):
            return jnp.mean(risk.pure_losses(space(theta), *operands))

        _CACHE[key] = (risk, space, jax.jit(jax.value_and_grad(mean_risk)))
    return functools.partial(_CACHE[key][2], operands=risk.operands)


def _smoothed(risk, space, sigma, K, key):
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"smoothing must be positive and finite; got {sigma!r}")
    if K < 1:
        raise ValueError(f"num_directions must be >= 1; got {K!r}")
    names = sorted(space.coordinates)
    key = jax.random.key(key) if isinstance(key, int) else key
    u = jax.random.normal(key, (K, len(names)), jnp.float32)
    cache_key = ("smoothed", risk.pure_losses, id(space), sigma)
    if cache_key not in _CACHE:

        def f(theta, u, operands):
            center = jnp.stack([theta[k] for k in names])

            def at(v):
                hp = space({k: v[i] for i, k in enumerate(names)})
                return jnp.mean(risk.pure_losses(hp, *operands))

            plus = jax.lax.map(at, center[None, :] + sigma * u)
            minus = jax.lax.map(at, center[None, :] - sigma * u)
            g = ((plus - minus)[:, None] * u).sum(0) / (2 * sigma * u.shape[0])
            value = (plus.sum() + minus.sum()) / (2 * u.shape[0])
            return value, {k: g[i] for i, k in enumerate(names)}

        _CACHE[cache_key] = (risk, space, jax.jit(f))
    return functools.partial(_CACHE[cache_key][2], u=u, operands=risk.operands)


# --------------------------------------------------------------------------------------------
# The outer optimisation and the grid
# --------------------------------------------------------------------------------------------


class TuneResult(NamedTuple):
    """The result of :func:`minimize`."""

    theta: dict[str, np.ndarray]  # the final tuning coordinates (log values)
    hparams: Any  # space(theta): the tuned hyperparameters
    values: np.ndarray  # (steps,) the risk at each step's starting point
    path: dict[str, np.ndarray]  # coordinate -> (steps + 1,) the tuned values exp(theta)


def minimize(
    risk: MonteCarloRisk,
    space: LogSpace,
    *,
    steps: int = 100,
    learning_rate: float = 0.05,
    optimizer: Any = None,
    theta0: Mapping[str, Any] | None = None,
    method: Method = "pathwise",
    smoothing: float = 0.1,
    num_directions: int = 8,
    key: Any = 0,
) -> TuneResult:
    """Gradient descent on the Monte Carlo risk with an optax optimiser.

    Needs ``optax`` (the ``[tune]`` extra; imported here, not when :mod:`dpjax.tune` is).

    Args:
        risk: a :class:`MonteCarloRisk`.
        space: the tuning coordinates.
        steps: optimiser steps.
        learning_rate: for the default optimiser, ``optax.adam(learning_rate)`` (in log units:
            0.05 moves a hyperparameter by about 5% a step).
        optimizer: any ``optax.GradientTransformation`` instead.
        theta0: the start (default ``space.theta0``).
        method: as in :func:`value_and_grad`; with ``"smoothed"`` the directions are redrawn
            every step (``fold_in(key, step)``).
        smoothing: as in :func:`value_and_grad`.
        num_directions: as in :func:`value_and_grad`.
        key: as in :func:`value_and_grad`.
    """
    try:
        import optax
    except ImportError as e:  # pragma: no cover - optax comes with the [tune] extra
        raise ImportError("dpjax.tune.minimize needs optax: pip install 'dpjax[tune]'") from e
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1; got {steps!r}")
    opt = optax.adam(learning_rate) if optimizer is None else optimizer
    theta = space.theta0 if theta0 is None else {k: jnp.asarray(v, jnp.float32)
                                                 for k, v in theta0.items()}
    state = opt.init(theta)
    base_key = jax.random.key(key) if isinstance(key, int) else key
    values = []
    path = {k: [float(np.exp(theta[k]))] for k in space.coordinates}
    for t in range(steps):
        step_key = jax.random.fold_in(base_key, t) if method == "smoothed" else base_key
        value, grad = value_and_grad(risk, space, theta, method=method, smoothing=smoothing,
                                     num_directions=num_directions, key=step_key)
        updates, state = opt.update(grad, state, theta)
        theta = optax.apply_updates(theta, updates)
        values.append(value)
        for k in space.coordinates:
            path[k].append(float(np.exp(theta[k])))
    theta_np = {k: np.asarray(v) for k, v in theta.items()}
    return TuneResult(theta_np, space(theta), np.asarray(values),
                      {k: np.asarray(v) for k, v in path.items()})


def grid_search(
    risk: MonteCarloRisk,
    space: LogSpace,
    grid: Mapping[str, Sequence[float]],
) -> tuple[np.ndarray, np.ndarray]:
    """The risk on a grid of values (not logs) of one coordinate, with the same draws.

    Args:
        risk: a :class:`MonteCarloRisk`.
        space: the tuning coordinates; every coordinate but the gridded one stays at
            ``space.theta0``.
        grid: ``{coordinate: values}`` for exactly one coordinate.

    Returns:
        ``(means (G,), standard errors (G,))`` of the risk at each grid value.
    """
    if len(grid) != 1:
        raise ValueError("grid_search takes exactly one coordinate")
    (name, values), = grid.items()
    if name not in space.coordinates:
        raise ValueError(f"{name!r} is not a coordinate of the space {sorted(space.coordinates)}")
    values = np.asarray(values, np.float64)
    if values.ndim != 1 or not np.all(values > 0):
        raise ValueError("grid values must be a 1-D sequence of positive numbers")
    theta0 = space.theta0
    means, ses = [], []
    for v in values:
        theta = dict(theta0, **{name: jnp.log(jnp.float32(v))})
        losses = np.asarray(risk.losses(space(theta)), np.float64)
        means.append(losses.mean())
        ses.append(losses.std(ddof=1) / math.sqrt(losses.size))
    return np.asarray(means), np.asarray(ses)
