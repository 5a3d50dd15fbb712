"""The audit engine: trials of a mechanism on two neighbouring data sets, attack statistics,
and the Clopper-Pearson lower bound on epsilon (the method is described in :mod:`dpjax.audit`).

* :func:`audit`: run a mechanism ``num_trials`` times on each data set and bound epsilon;
  :func:`run_trials` the trials alone, :func:`epsilon_lower_bound` the bound alone (from any
  attack statistics), :func:`clopper_pearson` its binomial bounds.
* :func:`estimator_mechanism`: a dpjax estimator as a mechanism; :func:`replace_record`: the
  replace-one neighbour.
* Attack statistics: :func:`glm_score_statistic` (the GLM score attack), :func:`flat_statistic`
  (the projection on the direction between two releases).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax.base import Estimator, run
from dpjax.mechanisms import sanitize

__all__ = [
    "AuditResult",
    "audit",
    "clopper_pearson",
    "epsilon_lower_bound",
    "estimator_mechanism",
    "flat_statistic",
    "glm_score_statistic",
    "replace_record",
    "run_trials",
]

PyTree = Any


class AuditResult(NamedTuple):
    """An empirical lower bound on epsilon.

    Attributes:
        epsilon_lower: the bound; the true epsilon is at least this with probability
            ``>= confidence`` (0 when the test finds nothing).
        confidence: ``1 - alpha``.
        delta: the delta the bound is stated for.
        event: the event used, e.g. ``"stat > tau"`` with the data set in the role of ``D``.
        threshold: ``tau``.
        p_in, p_out: the empirical probabilities of the event under ``D`` and ``D'`` (evaluation
            half).
        p_in_lower, p_out_upper: their Clopper-Pearson bounds at ``1 - alpha/2`` each.
        num_eval: evaluation trials per data set.
        epsilon_point: the plug-in ``log((p_in - delta)/p_out)`` on the evaluation half (no
            confidence; may be inf).
    """

    epsilon_lower: float
    confidence: float
    delta: float
    event: str
    threshold: float
    p_in: float
    p_out: float
    p_in_lower: float
    p_out_upper: float
    num_eval: int
    epsilon_point: float

    def violates(self, claimed_epsilon: float) -> bool:
        """True if the audit certifies that the mechanism is not ``claimed_epsilon``-DP."""
        return self.epsilon_lower > claimed_epsilon

    def __str__(self) -> str:
        return (
            f"empirical epsilon >= {self.epsilon_lower:.4g} at {100 * self.confidence:g}% "
            f"confidence (delta = {self.delta:.3g}; event {self.event}, tau = {self.threshold:.4g}"
            f"; P_D = {self.p_in:.4f} >= {self.p_in_lower:.4f}, P_D' = {self.p_out:.4f} <= "
            f"{self.p_out_upper:.4f}; {self.num_eval} evaluation trials per data set)"
        )


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds, each at level ``1 - alpha``, for ``k`` successes in
    ``n`` Bernoulli trials: ``(lower, upper)`` with ``P(p < lower) <= alpha`` and
    ``P(p > upper) <= alpha``."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"need 0 <= k <= n and n >= 1; got k = {k}, n = {n}")
    from scipy import stats  # here, not at import: scipy.stats costs ~0.5 s to import

    lower = 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))
    upper = 1.0 if k == n else float(stats.beta.ppf(1 - alpha, k + 1, n - k))
    return lower, upper


def _events(a: np.ndarray, b: np.ndarray, tau: float) -> list[tuple[str, int, int]]:
    """(name, count in 'D' role, count in 'D'' role) for the four threshold events at tau."""
    ga, gb = int((a > tau).sum()), int((b > tau).sum())
    la, lb = a.size - ga, b.size - gb
    return [
        ("stat > tau, D = with target", ga, gb),
        ("stat <= tau, D = with target", la, lb),
        ("stat > tau, D = without target", gb, ga),
        ("stat <= tau, D = without target", lb, la),
    ]


def _cp_epsilon(k_in: np.ndarray, k_out: np.ndarray, n: int, delta: float,
                alpha: float) -> np.ndarray:
    """Vectorised ``log((CP_lower(k_in) - delta) / CP_upper(k_out))`` (0 where not positive)."""
    from scipy import stats

    k_in, k_out = np.asarray(k_in, float), np.asarray(k_out, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.where(k_in > 0, stats.beta.ppf(alpha, k_in, n - k_in + 1), 0.0)
        hi = np.where(k_out < n, stats.beta.ppf(1 - alpha, k_out + 1, n - k_out), 1.0)
        val = np.log(np.maximum(lo - delta, 0.0) / hi)
    return np.where(np.isfinite(val) & (lo > delta), val, 0.0)


def epsilon_lower_bound(
    stat_in: Any,
    stat_out: Any,
    *,
    delta: float,
    confidence: float = 0.95,
    num_thresholds: int = 200,
    seed: int = 0,
) -> AuditResult:
    """The Clopper-Pearson epsilon lower bound from attack statistics (see the module docstring).

    Args:
        stat_in: ``(m,)`` statistics of releases on the data set with the target.
        stat_out: ``(m,)`` statistics on the neighbouring data set.
        delta: the delta of the guarantee under test, in [0, 1).
        confidence: in (0, 1).
        num_thresholds: candidate thresholds (quantiles of the pooled selection half).
        seed: seed of the random split into selection and evaluation halves.
    """
    a = np.asarray(stat_in, dtype=np.float64).ravel()
    b = np.asarray(stat_out, dtype=np.float64).ravel()
    if a.size != b.size or a.size < 4:
        raise ValueError("stat_in and stat_out need the same number (>= 4) of trials")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("attack statistics must be finite")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must lie in [0, 1); got {delta}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1); got {confidence}")
    alpha = 1.0 - confidence
    rng = np.random.default_rng(seed)
    a, b = rng.permutation(a), rng.permutation(b)
    m = a.size // 2
    sel_a, sel_b, ev_a, ev_b = a[:m], b[:m], a[m:2 * m], b[m:2 * m]
    pooled = np.concatenate([sel_a, sel_b])
    taus = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, num_thresholds + 2)[1:-1]))
    # Select by the conservative (Clopper-Pearson) bound on the selection half: a plug-in
    # estimate would chase thresholds in the far tails, where the evaluation counts are tiny.
    counts = np.array([[c[1:] for c in _events(sel_a, sel_b, float(t))] for t in taus])
    score = _cp_epsilon(counts[..., 0], counts[..., 1], m, delta, alpha / 2)  # (taus, 4)
    ti, j = np.unravel_index(int(np.argmax(score)), score.shape)
    tau = float(taus[ti])
    name, k_in, k_out = _events(ev_a, ev_b, tau)[j]
    n = ev_a.size
    p_in_lo, _ = clopper_pearson(k_in, n, alpha / 2)
    _, p_out_hi = clopper_pearson(k_out, n, alpha / 2)
    eps_lb = math.log((p_in_lo - delta) / p_out_hi) if p_in_lo > delta else 0.0
    p_in, p_out = k_in / n, k_out / n
    if p_in <= delta:
        point = 0.0
    elif p_out == 0:
        point = math.inf
    else:
        point = math.log((p_in - delta) / p_out)
    return AuditResult(max(0.0, eps_lb), confidence, float(delta), name, tau, p_in, p_out,
                       p_in_lo, p_out_hi, n, point)


def _trials_fn(mechanism, statistic, num_trials: int, batch_size: int | None):
    idx = jnp.arange(num_trials, dtype=jnp.uint32)

    @jax.jit
    def go(key, dataset):
        def one(i):
            return jnp.asarray(statistic(mechanism(jax.random.fold_in(key, i), dataset)))

        return jax.lax.map(one, idx, batch_size=batch_size or num_trials)

    return go


def run_trials(
    mechanism: Callable[[jax.Array, PyTree], PyTree],
    statistic: Callable[[PyTree], jax.Array],
    key: jax.Array,
    dataset: PyTree,
    num_trials: int,
    batch_size: int | None = None,
) -> np.ndarray:
    """``statistic(mechanism(k_i, dataset))`` for ``num_trials`` keys ``k_i = fold_in(key, i)``,
    vmapped in chunks of ``batch_size`` (``lax.map``); returns a ``(num_trials,)`` array."""
    return np.asarray(_trials_fn(mechanism, statistic, num_trials, batch_size)(key, dataset))


def audit(
    mechanism: Callable[[jax.Array, PyTree], PyTree],
    key: jax.Array,
    dataset_in: PyTree,
    dataset_out: PyTree,
    statistic: Callable[[PyTree], jax.Array],
    *,
    num_trials: int,
    delta: float,
    confidence: float = 0.95,
    batch_size: int | None = None,
) -> AuditResult:
    """Audit ``mechanism`` on a pair of neighbouring data sets with an attack ``statistic``.

    Args:
        mechanism: ``mechanism(key, dataset) -> release``; pure and jittable (the dpjax
            estimators are, via :func:`estimator_mechanism`).
        key: PRNG key; the trials on the two data sets use independent subkeys.
        dataset_in: the data set with the target record.
        dataset_out: its neighbour (e.g. :func:`replace_record`).
        statistic: ``statistic(release) -> scalar``; larger means "target present" for the
            score attack, but both directions are tried.
        num_trials: runs per data set (>= 4); half select the test, half evaluate it.
        delta: the delta of the guarantee under test.
        confidence: the confidence of the lower bound.
        batch_size: trials per vmapped chunk (memory); default all at once.

    Returns:
        :class:`AuditResult`.
    """
    _validate.check_int_in_range(num_trials, "num_trials", 4)
    key_in, key_out = jax.random.split(key)
    trials = _trials_fn(mechanism, statistic, num_trials, batch_size)  # one compile for both
    s_in = np.asarray(trials(key_in, dataset_in))
    s_out = np.asarray(trials(key_out, dataset_out))
    return epsilon_lower_bound(s_in, s_out, delta=delta, confidence=confidence)


# --------------------------------------------------------------------------------------------
# Adapters: estimators, neighbours, the score attack
# --------------------------------------------------------------------------------------------


def estimator_mechanism(
    estimator: Estimator,
    hparams: PyTree,
    params0: Any,
    output: Callable[[PyTree], PyTree] = lambda state: state.beta,
) -> Callable[[jax.Array, PyTree], PyTree]:
    """``(key, dataset) -> output(final state)`` of a full run of a dpjax estimator.

    ``hparams`` (one privacy level) and ``params0`` (data-independent) are fixed.
    """
    hp = jax.tree_util.tree_map(jnp.asarray, hparams)

    def mechanism(key: jax.Array, dataset: PyTree) -> PyTree:
        final, _ = run(estimator, key, dataset, estimator.init(params0), hp,
                       record=lambda state, info: ())
        return output(final)

    return mechanism


def replace_record(dataset: PyTree, index: int, record: PyTree) -> PyTree:
    """The replace-one neighbour: row ``index`` of every leaf replaced by ``record``'s leaf."""
    return jax.tree_util.tree_map(
        lambda leaf, r: jnp.asarray(leaf).at[index].set(jnp.asarray(r, jnp.asarray(leaf).dtype)),
        dataset, record,
    )


def glm_score_statistic(
    model: Any, beta: Any, x: Any, y: Any, support: Any = None
) -> Callable[[jax.Array], jax.Array]:
    r"""The GLM score (tracing) attack of spec 003 §3.4 against the target ``(x, y)``:

    ``A(beta_hat) = <(beta_hat - beta)_S, S_beta(y, x)>`` with ``S_beta(y, x) = (y -
    psi'(x^T beta)) x / c`` (eq. 4.7); ``support`` restricts to ``S = supp(beta)`` (eq. 4.9).
    """
    beta = jnp.asarray(beta)
    score = model.score(beta, jnp.asarray(x, beta.dtype), jnp.asarray(y, beta.dtype))
    if support is not None:
        mask = jnp.zeros(beta.shape, bool).at[jnp.asarray(support)].set(True)
        score = jnp.where(mask, score, 0.0)

    def statistic(beta_hat: jax.Array) -> jax.Array:
        return jnp.dot(beta_hat - beta, score)

    return statistic



def flat_statistic(direction: Any, origin: Any) -> Callable[[PyTree], jax.Array]:
    """``release -> <flatten(release) - origin, direction / ||direction||>``: the linear
    projection of a release on the direction of the neighbours' difference."""
    u = jnp.asarray(direction, jnp.float32).ravel()
    u = u / jnp.maximum(jnp.linalg.norm(u), jnp.finfo(jnp.float32).tiny)
    o = jnp.asarray(origin, jnp.float32).ravel()

    def statistic(release: PyTree) -> jax.Array:
        flat = jnp.concatenate([jnp.ravel(x).astype(jnp.float32)
                                for x in jax.tree_util.tree_leaves(release)])
        return jnp.dot(sanitize(flat) - o, u)

    return statistic
