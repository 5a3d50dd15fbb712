r"""Empirical privacy auditing: a statistical lower bound on epsilon from a membership test.

If a mechanism ``M`` is (epsilon, delta)-DP, then for the neighbouring data sets ``D`` (with a
target record) and ``D'`` (the target replaced) and *every* event ``S``,

.. math::

    P(M(D) \in S) \le e^\epsilon P(M(D') \in S) + \delta
    \quad\text{and the same with } D, D' \text{ swapped},

so any test that separates ``M(D)`` from ``M(D')`` certifies
``epsilon >= log((P(M(D) in S) - delta) / P(M(D') in S))``. The audit

1. runs ``M`` ``num_trials`` times on each data set (``vmap`` over keys, chunked),
2. maps each release to a scalar **attack statistic** (e.g. the score/tracing statistic of
   spec 003 §3.4: ``<beta_hat - beta, S_beta(z~)>`` for the target ``z~``),
3. on one half of the trials picks the event ``S`` -- a threshold ``{stat > tau}`` or
   ``{stat <= tau}``, with either data set in the role of ``D`` -- that maximises the plug-in
   bound, and
4. on the other (independent) half bounds ``P(M(D) in S)`` from below and ``P(M(D') in S)`` from
   above by Clopper-Pearson intervals at ``1 - alpha/2`` each, so that the reported

.. math::

    \hat\epsilon_{LB} = \log\frac{\underline{p}_D - \delta}{\overline{p}_{D'}}

is a lower bound on the true epsilon with probability at least ``confidence = 1 - alpha``
(union bound; the threshold is chosen on data independent of the evaluation half). A sound
implementation therefore shows ``epsilon_lower <= claimed epsilon`` except with probability
``alpha``; ``epsilon_lower > claimed`` certifies a privacy bug at that confidence.

The bound is only as strong as the attack and the number of trials: with ``m`` evaluation trials
it cannot exceed about ``log(m / log(2/alpha))``. It checks an implementation, it does not prove
privacy (jax_privacy's auditing module, Jagielski et al. 2020, Nasr et al. 2021).

The interface is generic: any ``mechanism(key, dataset) -> release`` (a pytree) and any
``statistic(release) -> scalar``. :func:`estimator_mechanism` turns a dpjax
:class:`~dpjax.base.Estimator` into such a mechanism; :func:`glm_score_statistic` is the GLM
score attack; :func:`replace_record` builds the neighbouring data set.

Example (the planted under-noising of ``tests/test_audit.py``)::

    est = dp_glm.noisy_gd(GLM(), 3, "paper", b_constant=0.02)  # declares 1% of the sensitivity
    hp = dp_glm.default_hparams(n, 1.0, 3, delta=1e-3)
    mech = estimator_mechanism(est, hp, jnp.zeros(d))
    stat = glm_score_statistic(GLM(), jnp.zeros(d), x_target, y_target)
    res = audit(mech, key, data_in, replace_record(data_in, 0, other), stat,
                num_trials=2000, delta=1e-3)
    res.violates(1.0)  # True: the claimed epsilon = 1 is refuted at 95% confidence
"""

from __future__ import annotations

import contextlib
import functools
import math
import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate, mechanisms
from dpjax.base import Estimator, probe_events, run, split_batches
from dpjax.mechanisms import sanitize

__all__ = [
    "AuditResult",
    "audit",
    "clopper_pearson",
    "epsilon_lower_bound",
    "estimator_mechanism",
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


# --------------------------------------------------------------------------------------------
# Canary audits of registered estimators, and planted under-noising (issue 17)
# --------------------------------------------------------------------------------------------

__all__ += ["AUDIT_DELTA", "AUDIT_LEVELS", "mechanism_cases", "registry_cases",
            "trajectory_mechanism", "trajectory_statistic", "wang_xu_radius_cases",
            "UNPLANTED_KINDS", "plants_reaching", "crafted_case", "crafted_cases",
            "crafted_names",
            "CanaryCase", "CanaryRow", "PLANTS", "audit_case", "canary_case", "canary_table",
            "flat_statistic", "planted_bug", "scaled_noise", "format_table"]

#: The planted bugs: ``"noise-x0.2"`` draws 0.2 times the calibrated noise (the events, and so
#: the ledger, still record the honest scale) and runs every randomized-response coin at
#: ``epsilon / 0.2`` (the l2-ball randomizer of local DP, whose randomness is a coin, not a
#: noise scale); ``"sensitivity-x0.5"`` calibrates every release from half the statistic's
#: declared sensitivity (the events record the halved scale). They reach every Laplace,
#: Gaussian and peeling release, central or local (the reports of
#: :mod:`dpjax.local_randomizers` calibrate and draw through :mod:`dpjax.mechanisms`).
PLANTS = ("noise-x0.2", "sensitivity-x0.5")

#: Plants that do not reach a release kind, with the reason: the l2-ball randomizer is eps-LDP
#: for every radius (its radius, the declared range, only sets the output norm that keeps the
#: report unbiased; a smaller radius shrinks the input onto the ball), so there is no
#: sensitivity calibration for ``"sensitivity-x0.5"`` to halve. Audits of such runs report "n/a"
#: in that column.
UNPLANTED_KINDS = {"ldp-randomizer": {
    "sensitivity-x0.5": "the l2-ball randomizer is eps-LDP for every radius: no sensitivity "
                        "calibration to halve"}}


def plants_reaching(kinds: set[str]) -> tuple[str, ...]:
    """The plants of :data:`PLANTS` that reach at least one release of the given kinds."""
    if not kinds:
        return PLANTS
    return tuple(p for p in PLANTS
                 if any(p not in UNPLANTED_KINDS.get(kind, {}) for kind in kinds))

# The calibration functions of dpjax.mechanisms whose first argument is the sensitivity.
_SCALE_FUNCTIONS = ("laplace_scale", "gaussian_sigma_classic", "gaussian_sigma_zcdp",
                    "peeling_scale")
_NOISE_FUNCTIONS = ("laplace_noise", "gaussian_noise")
_COIN_FUNCTIONS = ("response_probability",)


@contextlib.contextmanager
def planted_bug(kind: str | None):
    """Temporarily plant an under-noising bug in :mod:`dpjax.mechanisms` (no file is edited).

    Every Laplace, Gaussian, zCDP-Gaussian and peeling release of every estimator, and every
    report of :mod:`dpjax.local_randomizers`, goes through the noise draws, calibrations and
    randomized-response coin of :mod:`dpjax.mechanisms`, looked up at trace time, so a function
    traced inside this context (a fresh ``jit``, as :func:`audit` makes) carries the bug and
    one traced outside it does not. ``kind``: one of :data:`PLANTS`, or ``None`` (no bug). Not
    thread-safe; for audits and tests only. (The l2-ball randomizer of local DP has no
    sensitivity calibration: ``"sensitivity-x0.5"`` does not reach it, see
    :data:`UNPLANTED_KINDS`.)
    """
    if kind is None:
        yield
        return
    if kind not in PLANTS + ("noise-x0",):
        raise ValueError(f"kind must be one of {PLANTS} or None; got {kind!r}")
    if kind.startswith("noise-x"):
        factors = (float(kind[len("noise-x"):]), None)
    else:
        factors = (None, 0.5)
    with scaled_noise(*factors):
        yield


@contextlib.contextmanager
def scaled_noise(noise: Any = None, sensitivity: Any = None):
    """Inside: every noise draw of :mod:`dpjax.mechanisms` at ``noise`` times the calibrated
    scale (the events record the honest scale), and every calibration from ``sensitivity``
    times the declared sensitivity (the events record the scale drawn); ``None``: unchanged.

    The factors may be traced values (so one compiled function serves the honest run, factors
    1, and the planted ones): :func:`planted_bug` with fixed factors is this context."""
    saved = {name: getattr(mechanisms, name)
             for name in _SCALE_FUNCTIONS + _NOISE_FUNCTIONS + _COIN_FUNCTIONS}
    try:
        if noise is not None:
            for name in _NOISE_FUNCTIONS:
                def draw(key, shape, scale, dtype=jnp.float32, _f=saved[name]):
                    return _f(key, shape, noise * jnp.asarray(scale, dtype), dtype)
                setattr(mechanisms, name, draw)

            def coin(epsilon, _f=saved["response_probability"]):  # noise x f <=> eps / f
                return _f(jnp.asarray(epsilon) / noise)
            mechanisms.response_probability = coin
        if sensitivity is not None:
            for name in _SCALE_FUNCTIONS:
                def calibrate(sens, *budget, _f=saved[name], **kw):
                    return _f(sensitivity * jnp.asarray(sens), *budget, **kw)
                setattr(mechanisms, name, calibrate)
        yield
    finally:
        for name, f in saved.items():
            setattr(mechanisms, name, f)


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


class CanaryCase(NamedTuple):
    """A canary audit of one estimator: the neighbouring pair, the attack and the claim.

    Attributes:
        name: the registry name.
        estimator: the estimator (static configuration of the registry entry).
        hparams: one privacy level's hyperparameters.
        params0: the data-independent start.
        data_in, data_out: neighbouring data sets (replace-one: they differ in record
            ``index`` only); ``data_in`` holds the canary.
        index: the canary's row (in the last batch under disjoint batching, so no later step
            washes it out).
        statistic: ``release -> scalar``: the projection on the noise-free difference of the
            releases on the two data sets.
        claim_epsilon, delta: the (epsilon, delta) the honest estimator's ledger states.
        separation: the noise-free distance of the two releases (the attack's signal).
        gdp_mu: for runs whose releases are all Gaussian, the mu of mu-Gaussian DP that the
            run's events give (``sqrt(sum_i (true_i / scale_i)^2)`` over the releases, the max
            over steps under sample splitting): ``accounting.gaussian_epsilon(mu, delta)`` is
            the exact epsilon if a record attains every sensitivity bound, and an upper bound
            on what any audit can certify; ``mu / 0.2`` and ``mu / 0.5`` are the planted
            variants'. ``None`` where a release is not Gaussian.
        pure_epsilon: the same for a pure-DP (Laplace) run; ``None`` otherwise.
        attack: ``"final"`` (``statistic`` maps the final ``state.beta``) or ``"trajectory"``
            (``statistic`` maps the stacked states after every step: the per-step score attack
            of :func:`trajectory_statistic`).
        claim_kind: where ``claim_epsilon`` comes from: ``"ledger"`` (the ledger's
            ``approx_dp``), ``"zcdp-curve"`` (the ledger's rho-zCDP converted at ``delta``) or
            ``"gdp-curve"`` (the mu-GDP curve of the run's Gaussian events at ``delta``: the
            exact curve the recorded releases deliver, ``gaussian_epsilon(gdp_mu, delta)``).
    """

    name: str
    estimator: Estimator
    hparams: PyTree
    params0: PyTree
    data_in: PyTree
    data_out: PyTree
    index: int
    statistic: Callable[[PyTree], jax.Array]
    claim_epsilon: float
    delta: float
    separation: float
    gdp_mu: float | None = None
    pure_epsilon: float | None = None
    attack: str = "final"
    claim_kind: str = "ledger"
    engine: Any = None  # the compiled trajectory audit (_Trajectories) that built the case
    records: tuple = ()  # (canary, replacement): the private rows that differ
    weights: Any = None  # the trajectory statistic's weights, (num_steps, state size)
    plants: tuple = PLANTS  # the plants that reach its releases (plants_reaching)
    output: Any = None  # "final" attack: state -> the release audited (None: state.beta)


    def epsilon_bound(self, factor: float = 1.0) -> float | None:
        """The tight epsilon (at ``delta``) of the run with every noise scale times ``factor``,
        from :attr:`gdp_mu` or :attr:`pure_epsilon`; ``None`` where neither applies."""
        from dpjax.accounting import gaussian_epsilon

        if self.gdp_mu is not None:
            return float(gaussian_epsilon(self.gdp_mu / factor, self.delta))
        if self.pure_epsilon is not None:
            return self.pure_epsilon / factor
        return None


def _gdp_mu(events: PyTree, disjoint: bool) -> float | None:
    """The mu-GDP of a run's (stacked) events if all are Gaussian (see :class:`CanaryCase`)."""
    is_event = lambda x: isinstance(x, mechanisms.PrivacyEvent)  # noqa: E731
    per_step = []
    for e in jax.tree_util.tree_leaves(events, is_leaf=is_event):
        if not is_event(e) or e.kind not in ("gaussian-classic", "gaussian-zcdp"):
            return None
        scale = np.asarray(e.scale, np.float64)
        with np.errstate(divide="ignore"):
            mu2 = np.where(scale > 0, (np.asarray(e.true_sensitivity, np.float64) / scale)**2,
                           np.inf)
        per_step.append(mu2.reshape(mu2.shape[0], -1).sum(1))
    if not per_step:
        return None
    total = np.sum(per_step, axis=0)
    return float(np.sqrt(total.max() if disjoint else total.sum()))


def _beta_output(state: PyTree) -> PyTree:
    return state.beta


def _candidate_records(data: PyTree, num: int, magnitude: float, seed: int) -> PyTree:
    """``num`` candidate canary records (leaves ``(num, ...)``): extreme and unit sign
    patterns, single extreme coordinates, zeros and the data's own first record, mixed at
    random across the leaves. The clipping maps extreme values onto the boundary."""
    rng = np.random.default_rng(seed)
    out = []
    for leaf in jax.tree_util.tree_leaves(data):
        arr = np.asarray(leaf)
        shape = arr.shape[1:]
        size = int(np.prod(shape, dtype=int))
        rows = []
        for _ in range(num):
            kind = rng.integers(5)
            if kind == 0:
                row = magnitude * rng.choice([-1.0, 1.0], size)
            elif kind == 1:
                row = rng.choice([-1.0, 1.0], size)
            elif kind == 2:
                row = np.zeros(size)
                row[rng.integers(size)] = magnitude * rng.choice([-1.0, 1.0])
            elif kind == 3:
                row = np.zeros(size)
            else:
                row = arr[rng.integers(arr.shape[0])].ravel().astype(float)
            rows.append(row.reshape(shape))
        out.append(jnp.asarray(np.stack(rows), arr.dtype))
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(data), out)


def _private_records(data: PyTree, public: PyTree) -> tuple[list, Callable[[int, list], PyTree]]:
    """The private leaves of ``data`` (a list; ``public``: a pytree of bools marking the public
    leaves, or None) and ``with_record(index, record)``: ``data`` with row ``index`` of every
    private leaf replaced by ``record``'s (a list in the same order). Public leaves (e.g. a
    public sample, of any length) are never changed: the neighbouring relation of a guarantee
    replaces one *private* record, so a canary pair that changed a public row would be outside
    it."""
    leaves, treedef = jax.tree_util.tree_flatten(data)
    flags = [False] * len(leaves) if public is None else [
        bool(p) for p in jax.tree_util.tree_leaves(public)]
    if len(flags) != len(leaves):
        raise ValueError(f"public must mark each of the data's {len(leaves)} leaves; got "
                         f"{len(flags)} flags")
    if all(flags):
        raise ValueError("every leaf of the data is marked public: no private record to audit")
    private = [leaf for leaf, p in zip(leaves, flags) if not p]

    def with_record(index: int, record: list) -> PyTree:
        rows = iter(record)
        return jax.tree_util.tree_unflatten(treedef, [
            leaf if p else jnp.asarray(leaf).at[index].set(
                jnp.asarray(next(rows), jnp.asarray(leaf).dtype))
            for leaf, p in zip(leaves, flags)])

    return private, with_record


def _single_entry_variants(record: PyTree, magnitude: float) -> PyTree:
    """Every record that differs from ``record`` in one entry, set to ``-x``, ``+-magnitude``
    or 0 (leaves ``(4 * size, ...)``)."""
    leaves, treedef = jax.tree_util.tree_flatten(record)
    flat = [np.asarray(x, np.float64).ravel() for x in leaves]
    variants = []
    for li, v in enumerate(flat):
        for e in range(v.size):
            for value in (-v[e], magnitude, -magnitude, 0.0):
                new = [x.copy() for x in flat]
                new[li][e] = value
                variants.append(new)
    return jax.tree_util.tree_unflatten(treedef, [
        jnp.asarray(np.stack([var[li] for var in variants]).reshape(
            (len(variants),) + np.shape(leaves[li])), jnp.asarray(leaves[li]).dtype)
        for li in range(len(leaves))])


def _flat_state(state: PyTree) -> jax.Array:
    """The floating-point leaves of a state, flattened and concatenated (float32)."""
    leaves = [jnp.ravel(x).astype(jnp.float32) for x in jax.tree_util.tree_leaves(state)
              if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)]
    return jnp.concatenate(leaves)


def _per_step(estimator: Estimator, data: PyTree) -> PyTree:
    """The data each step sees, with a leading step axis under disjoint batching (else
    ``None``: every step sees ``data``)."""
    if estimator.batching == "disjoint":
        return split_batches(data, estimator.num_steps)
    return None


def _noise_free_steps(estimator: Estimator, hp: PyTree, states: PyTree, data: PyTree,
                      salt: int) -> jax.Array:
    """The noise-free step ``t`` from ``states[t]`` on ``data`` for every ``t`` (vmapped over
    the steps), flattened: ``(num_steps, state size)``. Every noise draw is multiplied by 0
    (traced here, so the current plant's noise is switched off too); the keys are irrelevant
    but fresh."""
    steps = jnp.arange(estimator.num_steps)
    batches = _per_step(estimator, data)

    def one(t, state, batch):
        key = jax.random.fold_in(jax.random.key(0x5EED), 4 * t + salt)
        new, _ = estimator.step(key, state, data if batch is None else batch, hp)
        return sanitize(_flat_state(new))

    with planted_bug("noise-x0"):
        return jax.vmap(one)(steps, states, batches)


def _states_before(estimator: Estimator, params0: PyTree, trace: PyTree) -> PyTree:
    """The state before each step (leading axis ``num_steps``): ``init(params0)``, then the
    recorded states but the last."""
    first = estimator.init(params0)
    return jax.tree_util.tree_map(
        lambda f, x: jnp.concatenate([jnp.asarray(f, x.dtype)[None], x[:-1]]), first, trace)


def _flat_trace(trace: PyTree) -> jax.Array:
    """``(num_steps, state size)``: every recorded state, flattened."""
    return sanitize(jax.vmap(_flat_state)(trace))


def trajectory_mechanism(
    estimator: Estimator, hparams: PyTree, params0: Any
) -> Callable[[jax.Array, PyTree], PyTree]:
    """``(key, dataset) -> the states after every step`` (leaves ``(num_steps, ...)``).

    Every iterate is a release of the composition the ledger accounts for (each step is private
    given the previous iterate, and the steps compose adaptively), so an attack on the whole
    trajectory is as sound as one on the final iterate, and stronger: the per-step signals add.
    """
    hp = jax.tree_util.tree_map(jnp.asarray, hparams)

    def mechanism(key: jax.Array, dataset: PyTree) -> PyTree:
        _, trace = run(estimator, key, dataset, estimator.init(params0), hp,
                       record=lambda state, info: state)
        return trace

    return mechanism


def trajectory_statistic(
    estimator: Estimator, hparams: PyTree, params0: Any, data_in: PyTree, data_out: PyTree,
    weights: Any,
) -> Callable[[PyTree], jax.Array]:
    r"""The per-step score (likelihood-ratio) attack on a trajectory.

    With ``x_t`` the state before step ``t`` (public: the previous release), ``a_t`` and
    ``b_t`` the noise-free next states from ``x_t`` on ``data_in`` and ``data_out``, and
    ``x_{t+1}`` the released next state,

    .. math::

        A = \sum_t \sum_j w_{tj} (x_{t+1,j} - (a_{tj} + b_{tj}) / 2) (a_{tj} - b_{tj}),

    the log-likelihood ratio of ``data_in`` against ``data_out`` when step ``t`` adds Gaussian
    noise of variance ``1 / w_tj`` to coordinate ``j`` (for Gaussian releases it separates the
    two data sets as well as any test can). ``weights``: ``(num_steps, state size)``, fixed
    before the audit (:func:`canary_case` estimates the noise variances from a pilot run).
    Any fixed statistic gives a sound audit; the weights only change its power.
    """
    hp = jax.tree_util.tree_map(jnp.asarray, hparams)
    w = jnp.asarray(weights, jnp.float32)

    def statistic(trace: PyTree) -> jax.Array:
        before = _states_before(estimator, params0, trace)
        a = _noise_free_steps(estimator, hp, before, data_in, 0)
        b = _noise_free_steps(estimator, hp, before, data_out, 1)
        return jnp.sum(w * (_flat_trace(trace) - 0.5 * (a + b)) * (a - b))

    return statistic


def _pilot(estimator: Estimator, hp: PyTree, params0: PyTree, data: PyTree, num: int,
           seed: int) -> tuple[np.ndarray, PyTree]:
    """Per-step, per-coordinate variance of ``x_{t+1} - F(x_t)`` over ``num`` honest runs on
    ``data`` (``F``: the noise-free step), and the runs' privacy events (leading axis ``num``)."""
    def one(key):
        _, (trace, events) = run(estimator, key, data, estimator.init(params0), hp,
                                 record=lambda state, info: (state, info.events))
        before = _states_before(estimator, params0, trace)
        return _flat_trace(trace) - _noise_free_steps(estimator, hp, before, data, 2), events

    keys = jax.random.split(jax.random.key(seed + 0x9177), num)
    res, events = jax.jit(jax.vmap(one))(keys)
    return np.var(np.asarray(res, np.float64), axis=0), events


def _weights(var: np.ndarray) -> np.ndarray:
    """Inverse variances, with a floor (a noise-free coordinate weighs much, not infinitely)."""
    floor = 1e-4 * float(var.max()) if var.max() > 0 else 1.0
    return 1.0 / np.maximum(var, floor)


_FACTORS = {None: (1.0, 1.0), "noise-x0.2": (0.2, 1.0), "sensitivity-x0.5": (1.0, 0.5)}


class _Trajectories:
    """The trajectory audit of one estimator as one compiled function.

    ``runs`` gives, for each trial, a run on the data set with row ``index`` of its private
    leaves replaced by a record, with its noise and sensitivity scaled by traced factors
    (:func:`scaled_noise`; 1 and 1: the honest run), every iterate it releases, its events, and
    the noise-free next states ``a_t``, ``b_t`` from each of its iterates on two more data sets
    (records ``a`` and ``b``). The three steps are one step vmapped over three lanes, so the
    pilot, the noise-free reference path, the canary search and the trials of the honest and
    the planted runs cost one compile per estimator; calls go in chunks of a fixed size (the
    last padded). Trial ``i`` of a call runs with key ``fold_in(key, i)`` (step ``t``:
    ``fold_in(fold_in(key, i), t)``, as :func:`dpjax.base.run`).
    """

    def __init__(self, estimator: Estimator, hp: PyTree, params0: PyTree,
                 with_record: Callable[[int, list], PyTree], index: int, chunk: int):
        self.chunk = chunk
        num_steps = estimator.num_steps
        nf_key = jax.random.key(0x5EED)

        def one(key, i, rec_run, rec_a, rec_b, noise, sens):
            datas = [with_record(index, r) for r in (rec_run, rec_a, rec_b)]
            stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *datas)  # lanes first
            if estimator.batching == "disjoint":
                batches = jax.vmap(lambda d: split_batches(d, num_steps))(stacked)
                xs = (jnp.arange(num_steps), jax.tree_util.tree_map(
                    lambda x: jnp.moveaxis(x, 0, 1), batches))
            else:
                xs = (jnp.arange(num_steps), None)
            run_key = jax.random.fold_in(key, i)

            def lane(k, state, batch, nf, sf):
                with scaled_noise(nf, sf):
                    return estimator.step(k, state, batch, hp)

            def body(state, x):
                t, batch3 = x
                # the noise-free lanes draw noise times 0: their keys are fresh, never used
                keys = jnp.concatenate([jax.random.fold_in(run_key, t)[None],
                                        jax.random.split(jax.random.fold_in(nf_key, t))])
                new3, info3 = jax.vmap(lane, in_axes=(0, None, 0, 0, 0))(
                    keys, state, stacked if batch3 is None else batch3,
                    jnp.stack([noise, jnp.zeros_like(noise), jnp.zeros_like(noise)]),
                    jnp.stack([sens, jnp.ones_like(sens), jnp.ones_like(sens)]))
                lane_of = lambda tree, j: jax.tree_util.tree_map(  # noqa: E731
                    lambda v: v[j], tree)
                flat3 = jax.vmap(lambda st: sanitize(_flat_state(st)))(new3)
                return lane_of(new3, 0), (flat3, lane_of(info3.events, 0))

            _, (flat3, events) = jax.lax.scan(body, estimator.init(params0), xs)
            return flat3[:, 0], flat3[:, 1], flat3[:, 2], events

        self._run = jax.jit(jax.vmap(one, in_axes=(None, 0, 0, 0, 0, 0, 0)))

    @staticmethod
    def tile(record: list, m: int) -> list:
        """``record`` (a list of rows) repeated ``m`` times along a new leading axis."""
        return [jnp.broadcast_to(jnp.asarray(r), (m,) + jnp.shape(r)) for r in record]

    def runs(self, key: jax.Array, rec_run: list, rec_a: list, rec_b: list, m: int,
             plant: str | None = None, noise: float | None = None):
        """``m`` trials (records with a leading axis ``m``): per chunk, numpy ``(x, a, b)``
        (each ``(chunk, num_steps, state size)``: the released iterates and the noise-free
        next states on data sets ``a`` and ``b``) and the events; a generator."""
        nf, sf = _FACTORS[plant]
        nf = nf if noise is None else noise
        extra = -m % self.chunk
        pad = lambda x: jnp.concatenate(  # noqa: E731
            [x, jnp.repeat(x[-1:], extra, axis=0)]) if extra else x
        idx = pad(jnp.arange(m, dtype=jnp.uint32))
        recs = [[pad(jnp.asarray(r)) for r in rec] for rec in (rec_run, rec_a, rec_b)]
        nfs = jnp.full(idx.shape, nf, jnp.float32)
        sfs = jnp.full(idx.shape, sf, jnp.float32)
        for lo in range(0, idx.shape[0], self.chunk):
            sl = slice(lo, lo + self.chunk)
            x, a, b, events = self._run(key, idx[sl], *[[r[sl] for r in rec] for rec in recs],
                                        nfs[sl], sfs[sl])
            yield (np.asarray(x, np.float64), np.asarray(a, np.float64),
                   np.asarray(b, np.float64), events)


def canary_case(
    entry: Any,
    level: float = 1.0,
    *,
    hparams: PyTree = None,
    delta: float | None = None,
    num_candidates: int = 64,
    magnitude: float = 1e3,
    search_rounds: int = 4,
    seed: int = 0,
    attack: str = "final",
    claim: str = "ledger",
    pilot_trials: int = 256,
    chunk: int = 256,
) -> CanaryCase:
    """Build the canary audit of a registry entry at privacy ``level``.

    The adversarial neighbouring pair is found by search: ``num_candidates`` candidate records
    (:func:`_candidate_records`, each with its negation) are put in row ``index`` of the
    example data's private leaves (the leaves ``example.public`` marks, e.g. a public sample,
    stay fixed: the pair is a neighbouring pair of private data), the estimator is run with
    its noise multiplied by 0 (the same hyperparameters, so the same clipping and truncation)
    on each, and the two candidates whose
    noise-free outputs lie farthest apart become the canary (``data_in``) and its replacement
    (``data_out``).

    ``attack="final"``: the output is the final ``state.beta`` and the statistic projects a
    release on the direction between the two noise-free releases. ``attack="trajectory"``: the
    output of a candidate is its noise-free one-step change at every state of a reference
    noise-free path, weighted by the inverse noise variances of a pilot run
    (``pilot_trials`` honest runs on the example data; the pilot is independent of the audit's
    trials), and the statistic is :func:`trajectory_statistic` over every recorded iterate.

    The claim is the honest ledger's, read off the run's events on ``data_in`` at ``hparams``
    (default: ``example.hparams(level)``): its ``approx_dp``, or, when ``delta`` is given and
    the ledger's guarantee is rho-zCDP, the (epsilon, delta) that rho implies at that ``delta``
    (rho-zCDP implies a whole curve; a larger delta is where an audit with a few thousand
    trials can test it). ``claim="curve"`` (with ``delta``): where every release of the run is
    Gaussian with the same recorded scales in every pilot run, the claim is the mu-GDP curve
    those releases deliver at ``delta``, ``gaussian_epsilon(mu, delta)`` with
    ``mu = sqrt(sum_i (Delta_i / sigma_i)^2)`` from the recorded (true) sensitivities and
    scales (the maximum over steps under sample splitting). It is exact for the releases as
    recorded and sound for every delta, so it tests the calibration itself (a halved
    sensitivity doubles the true mu) where the ledger's single (epsilon, delta) point would
    need events of probability ``delta`` to be seen.

    A trajectory case carries its compiled audit (:class:`_Trajectories`; ``chunk`` runs per
    call), which :func:`audit_case` reuses for the honest and the planted trials.
    """
    _validate.check_choice(attack, "attack", ("final", "trajectory"))
    _validate.check_choice(claim, "claim", ("ledger", "curve"))
    estimator = entry.build()
    example = entry.example()
    hp = example.hparams(level) if hparams is None else hparams
    hp = jax.tree_util.tree_map(jnp.asarray, hp)
    data = example.data
    private, with_record = _private_records(data, example.public)
    n = private[0].shape[0]
    index = 0
    if estimator.batching == "disjoint":
        index = (estimator.num_steps - 1) * (n // estimator.num_steps)
    half = _candidate_records(private, num_candidates // 2, magnitude, seed)
    cands = jax.tree_util.tree_map(lambda c: jnp.concatenate([c, -c]), half)
    pilot_events = engine = weights = None
    if attack == "trajectory":
        engine = _Trajectories(estimator, hp, example.params0, with_record, index, chunk)
        base = [leaf[index] for leaf in private]
        tile = engine.tile
        resid, pilot_events = [], []
        for x, a, _, ev in engine.runs(jax.random.key(seed + 0x9177), *[tile(base, pilot_trials)]
                                       * 3, pilot_trials):
            resid.append(x - a)
            pilot_events.append(ev)
        var = np.var(np.concatenate(resid)[:pilot_trials], axis=0)
        pilot_events = jax.tree_util.tree_map(
            lambda *v: np.concatenate(v)[:pilot_trials], *pilot_events)
        weights = _weights(var)
        sqrt_w = np.sqrt(weights)

        def noise_free_many(records):
            # the noise-free step from every iterate of the noise-free reference path on the
            # example data, on the data set with each record, minus the step on the example data
            m = jax.tree_util.tree_leaves(records)[0].shape[0]
            out = np.concatenate([a - b for _, a, b, _ in engine.runs(
                jax.random.key(0), tile(base, m), records, tile(base, m), m, noise=0.0)])[:m]
            return (sqrt_w * out).reshape(m, -1)
    else:
        if claim == "curve":
            _, pilot_events = _pilot(estimator, hp, example.params0, data, pilot_trials, seed)
        with planted_bug("noise-x0"):
            mech0 = estimator_mechanism(estimator, hp, example.params0, _beta_output)

            @jax.jit
            def noise_free(record):
                return jnp.concatenate([jnp.ravel(x) for x in jax.tree_util.tree_leaves(
                    mech0(jax.random.key(0), with_record(index, record)))])

        def noise_free_many(records):
            return np.asarray(jax.lax.map(noise_free, records), np.float64)

    outs = noise_free_many(cands)
    outs = np.where(np.isfinite(outs), outs, 0.0)
    dist = np.linalg.norm(outs[:, None, :] - outs[None, :, :], axis=-1)
    i, j = np.unravel_index(int(np.argmax(dist)), dist.shape)
    pick = lambda k: jax.tree_util.tree_map(lambda c: c[k], cands)  # noqa: E731
    rec_in, rec_out, out_in, out_out = pick(i), pick(j), outs[i], outs[j]
    # Greedy local search: change one entry of one record at a time (negate it, set it to
    # +-magnitude or 0) while the noise-free outputs move apart.
    for _ in range(search_rounds):
        moved = False
        for side in (0, 1):
            rec, other = (rec_out, out_in) if side == 0 else (rec_in, out_out)
            variants = _single_entry_variants(rec, magnitude)
            vo = noise_free_many(variants)
            vo = np.where(np.isfinite(vo), vo, 0.0)
            gain = np.linalg.norm(vo - other, axis=-1)
            best = int(np.argmax(gain))
            if gain[best] > np.linalg.norm(out_in - out_out) * (1 + 1e-6):
                moved = True
                new = jax.tree_util.tree_map(lambda c, b=best: c[b], variants)
                if side == 0:
                    rec_out, out_out = new, vo[best]
                else:
                    rec_in, out_in = new, vo[best]
        if not moved:
            break
    data_in = with_record(index, rec_in)
    data_out = with_record(index, rec_out)
    if attack == "trajectory":
        statistic = trajectory_statistic(estimator, hp, example.params0, data_in, data_out,
                                         weights)
    else:
        statistic = flat_statistic(out_in - out_out, out_out)
    if engine is None:
        events = probe_events(estimator, data_in, example.params0, hp)
    else:  # the events of an honest run on data_in (no extra compile)
        one = engine.tile(rec_in, 1)
        ((_, _, _, events),) = list(engine.runs(jax.random.key(seed), one, one, one, 1))
        events = jax.tree_util.tree_map(lambda x: x[0], events)
    ledger = estimator.ledger(n, hp, events)
    approx = ledger.approx_dp
    claim_kind = "ledger"
    if delta is not None and hasattr(ledger.guarantee, "to_approx_dp"):
        approx = ledger.guarantee.to_approx_dp(delta)
        claim_kind = "zcdp-curve"
    disjoint = estimator.batching == "disjoint"
    mu = _gdp_mu(events, disjoint)
    claim_eps, claim_delta = float(approx.epsilon), float(approx.delta)
    is_event = lambda x: isinstance(x, mechanisms.PrivacyEvent)  # noqa: E731
    kinds = {e.kind for e in jax.tree_util.tree_leaves(events, is_leaf=is_event)
             if is_event(e)}
    plants = plants_reaching(kinds)
    if claim == "curve" and delta is not None and mu is not None and _same_mu(
            pilot_events, mu, disjoint):
        from dpjax.accounting import gaussian_epsilon

        claim_eps, claim_delta, claim_kind = float(gaussian_epsilon(mu, delta)), delta, \
            "gdp-curve"
    return CanaryCase(entry.name, estimator, hp, example.params0, data_in, data_out, index,
                      statistic, claim_eps, claim_delta,
                      float(np.linalg.norm(out_in - out_out)), mu, None, attack, claim_kind,
                      engine, (rec_in, rec_out), weights, plants)


def _same_mu(pilot_events: PyTree, mu: float, disjoint: bool) -> bool:
    """Whether every pilot run's events give the probed ``mu`` (scales that do not depend on
    the noisy iterates), so that the GDP curve is the run's, whatever the noise drawn."""
    if pilot_events is None:
        return False
    num = jax.tree_util.tree_leaves(pilot_events)[0].shape[0]
    for r in range(num):
        m = _gdp_mu(jax.tree_util.tree_map(lambda x, r=r: x[r], pilot_events), disjoint)
        if m is None or not math.isclose(m, mu, rel_tol=1e-4):
            return False
    return True


def audit_case(
    case: CanaryCase,
    key: jax.Array,
    *,
    plant: str | None = None,
    num_trials: int = 4000,
    confidence: float = 0.95,
    batch_size: int | None = 1000,
) -> AuditResult:
    """Audit ``case`` (with the planted bug ``plant``, or honest) at its claimed delta.

    A trajectory case built by :func:`canary_case` reuses its two compiled functions (the
    plant is a traced factor there); ``batch_size`` then does not apply (the case's chunk
    does)."""
    if case.engine is not None:
        s_in, s_out = _engine_statistics(case, key, plant, num_trials)
        return epsilon_lower_bound(s_in, s_out, delta=case.delta, confidence=confidence)
    with planted_bug(plant):
        if case.attack == "trajectory":
            mech = trajectory_mechanism(case.estimator, case.hparams, case.params0)
        else:
            mech = estimator_mechanism(case.estimator, case.hparams, case.params0,
                                       case.output or _beta_output)
        return audit(mech, key, case.data_in, case.data_out, case.statistic,
                     num_trials=num_trials, delta=case.delta, confidence=confidence,
                     batch_size=batch_size)


def _engine_statistics(case: CanaryCase, key: jax.Array, plant: str | None,
                       num_trials: int) -> list[np.ndarray]:
    """:func:`trajectory_statistic` of ``num_trials`` runs on each data set of ``case``
    (keys from ``split(key)``, as :func:`audit`), through the case's compiled functions."""
    _validate.check_int_in_range(num_trials, "num_trials", 4)
    eng, (rec_in, rec_out), w = case.engine, case.records, case.weights
    tile = eng.tile
    out = []
    for k, rec in zip(jax.random.split(key), (rec_in, rec_out)):
        stats = [np.sum(w * (x - 0.5 * (a + b)) * (a - b), axis=(1, 2))
                 for x, a, b, _ in eng.runs(k, tile(rec, num_trials), tile(rec_in, num_trials),
                                            tile(rec_out, num_trials), num_trials, plant)]
        out.append(np.concatenate(stats)[:num_trials])
    return out


class CanaryRow(NamedTuple):
    """One row of the audit table: the claim and the three audited lower bounds."""

    name: str
    claim_epsilon: float
    delta: float
    honest: AuditResult
    noise_x02: AuditResult | None  # None where the plant reaches no release
    sensitivity_x05: AuditResult | None
    num_trials: int
    bounds: tuple = (None, None, None)  # CanaryCase.epsilon_bound at factors 1, 0.2, 0.5
    claim_kind: str = "ledger"  # CanaryCase.claim_kind
    # the canary's reach: separation / gdp_mu for a trajectory case with a GDP claim (the mu
    # the pair attains along the noise-free path over the mu the events claim; a halved
    # sensitivity is a violation on this pair only if reach > 1/2), else None
    reach: float | None = None


def canary_table(
    cases: list[CanaryCase], key: jax.Array, num_trials: int | dict[str, int] = 4000
) -> list[CanaryRow]:
    """Audit every case honest, with noise x 0.2 and with the sensitivity halved."""
    rows = []
    for c in cases:
        m = num_trials[c.name] if isinstance(num_trials, dict) else num_trials
        k = jax.random.fold_in(key, zlib.crc32(c.name.encode()))
        res = [audit_case(c, jax.random.fold_in(k, i), plant=p, num_trials=m)
               if p is None or p in c.plants else None
               for i, p in enumerate((None,) + PLANTS)]
        bounds = tuple(c.epsilon_bound(f) for f in (1.0, 0.2, 0.5))
        reach = (c.separation / c.gdp_mu if c.attack == "trajectory" and c.gdp_mu
                 and c.claim_kind == "gdp-curve" else None)
        rows.append(CanaryRow(c.name, c.claim_epsilon, c.delta, *res, m, bounds, c.claim_kind,
                              reach))
    return rows


def format_table(rows: list[CanaryRow]) -> str:
    """The markdown table of :func:`canary_table` (lower bounds at 95% confidence)."""
    def cell(res: AuditResult | None, claim: float, bound: float | None) -> str:
        if res is None:
            return "n/a (the plant reaches no release)"
        out = f"{res.epsilon_lower:.2f}" + (" **caught**" if res.violates(claim) else "")
        return out + ("" if bound is None else f" (≤ {bound:.3g})")

    lines = ["| estimator | claimed (epsilon, delta), from | audited LB, honest | noise x 0.2 | "
             "sensitivity x 0.5 | trials per data set | reach |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r.bounds
        lines.append(f"| `{r.name}` | ({r.claim_epsilon:.3g}, {r.delta:.3g}) {r.claim_kind} | "
                     f"{cell(r.honest, r.claim_epsilon, b[0])} | "
                     f"{cell(r.noise_x02, r.claim_epsilon, b[1])} | "
                     f"{cell(r.sensitivity_x05, r.claim_epsilon, b[2])} | {r.num_trials} | "
                     + ("" if r.reach is None else f"{r.reach:.2f}") + " |")
    return "\n".join(lines)


#: The audit configuration of each family: the privacy level of the registry example, and the
#: delta at which a rho-zCDP ledger's curve is audited (None: the ledger's own (epsilon, delta)).
AUDIT_LEVELS = {"dp-iv": 0.25}
AUDIT_DELTA = 0.05


def registry_cases(names: list[str] | None = None, **kwargs: Any) -> list[CanaryCase]:
    """The canary cases of every private registered estimator (or of ``names``): the
    trajectory attack, audited against the GDP curve of the run's Gaussian events where there
    is one (else the ledger's rho-zCDP curve, else its (epsilon, delta)), at
    :data:`AUDIT_DELTA`. ``kwargs`` go to :func:`canary_case` (e.g. a smaller search)."""
    from dpjax import registry

    return [canary_case(e, AUDIT_LEVELS.get(e.family, 1.0), delta=AUDIT_DELTA,
                        attack="trajectory", claim="curve", **kwargs)
            for e in registry.entries()
            if e.private and (names is None or e.name in names)]


def main(argv: list[str] | None = None) -> int:
    """``python -m dpjax.audit --table [--trials M] [NAME ...]``: print the audit table."""
    import argparse
    import time
    import warnings

    parser = argparse.ArgumentParser(prog="python -m dpjax.audit")
    parser.add_argument("--table", action="store_true", help="print the canary audit table")
    parser.add_argument("--trials", type=int, default=2000, help="trials per data set")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("names", nargs="*", help="registry names (default: every private one)")
    args = parser.parse_args(argv)
    if not args.table:
        parser.print_help()
        return 0
    start = time.time()
    with warnings.catch_warnings():  # the classic-Gaussian range warning at epsilon > 1
        warnings.simplefilter("ignore")
        rows = []
        from dpjax import registry

        # (name, build, trials): each case built and audited in turn (rows print as they
        # come); the Wang & Xu release is audited at delta = 1e-5, which needs 10^5 trials
        todo = [(c.name, lambda c=c: c, args.trials) for c in mechanism_cases()]
        todo += [(name, lambda name=name: crafted_case(name), args.trials)
                 for name in crafted_names()]
        todo += [(c.name, lambda c=c: c, max(args.trials, 100_000))
                 for c in wang_xu_radius_cases()]
        todo += [(e.name, lambda name=e.name: registry_cases([name])[0], args.trials)
                 for e in registry.entries() if e.private]
        if args.names:  # the named cases, in the order named
            todo = sorted((t for t in todo if t[0] in args.names),
                          key=lambda t: args.names.index(t[0]))
        for _name, build, trials in todo:
            rows += canary_table([build()], jax.random.key(args.seed), trials)
            print(format_table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(format_table(rows))
    print(f"\n{len(rows)} estimators, {time.time() - start:.0f} s")
    return 0



# --------------------------------------------------------------------------------------------
# The core mechanisms as one-release estimators (their claims are tight, or nearly)
# --------------------------------------------------------------------------------------------


class _Release(NamedTuple):
    beta: jax.Array  # (d,) the release


def _one_release(name: str, release: Callable[[jax.Array, jax.Array], jax.Array]) -> Estimator:
    def step(key, state, data, hparams):
        del state, hparams
        return _Release(release(key, data)), ()

    return Estimator(name, _Release, step, num_steps=1, batching="full", ledger=None)


def mechanism_cases(n: int = 10) -> list[CanaryCase]:
    """Canary cases of the core mechanisms of :mod:`dpjax.mechanisms`, each one release of a
    clipped mean of ``n`` records on which the canary (``+1`` against ``-1`` in the first
    coordinate, the rest of the data 0) moves the mean by exactly its declared sensitivity:

    * ``laplace_mechanism``: epsilon = 1, delta = 0 (the claim is tight: the privacy loss is
      exactly 1 in the tails);
    * ``gaussian_mechanism_zcdp``: rho = 0.5, i.e. mu = 1 GDP, audited on that curve at
      ``AUDIT_DELTA``;
    * ``gaussian_mechanism`` (classic) at (1, 1e-3): mu-GDP with ``mu = 1 / sqrt(2 log(1.25 /
      1e-3))``, audited on that curve at ``AUDIT_DELTA``;
    * ``noisy_hard_threshold``: s = 1 of d = 4, (1, 1e-3), on another pair: a fixed record
      ``(1, 1, 1, 1)`` and the canary ``(1, -1, -1, -1)`` against ``(-1, 1, 1, 1)``, so that
      the mean moves by the declared l-infinity sensitivity in *every* coordinate, from
      ``(0.2, 0, 0, 0)`` to ``(0, 0.2, 0.2, 0.2)``: the scores ``|v_j|`` of the selection
      move in opposite directions, and the statistic (the released value of coordinate 0, 0
      where it is not selected) sees the selection and the value together. On the pair above
      the selection is the same on both data sets (``|v_0| = 0.1``) and only the value
      differs: with noise x 0.2 the best event of that statistic certifies about 0.54 at any
      number of trials, on this pair about 1.49, against the claim of 1 (docs/audits.md).
    """
    from dpjax.accounting import gaussian_epsilon

    # the classic calibration at (1, 1e-3) is mu-GDP with mu = Delta / sigma: audited on that
    # curve at AUDIT_DELTA (the events it records deliver it), where a halved sensitivity shows
    classic_mu = 1.0 / float(mechanisms.epsilon_constant("gaussian-classic", 1e-3))

    def mean(x, norm):
        return mechanisms.bounded_mean(mechanisms.clip_linf(x, 1.0), 2.0, norm)

    releases = {
        "mechanism/laplace": (lambda k, x: mechanisms.laplace_mechanism(k, mean(x, "l1"), 1.0)[0],
                              1, 1.0, 0.0, None, 1.0),
        "mechanism/gaussian-zcdp": (
            lambda k, x: mechanisms.gaussian_mechanism_zcdp(k, mean(x, "l2"), 0.5)[0], 1,
            float(gaussian_epsilon(1.0, AUDIT_DELTA)), AUDIT_DELTA, 1.0, None),
        "mechanism/gaussian-classic": (
            lambda k, x: mechanisms.gaussian_mechanism(k, mean(x, "l2"), 1.0, 1e-3)[0], 1,
            float(gaussian_epsilon(classic_mu, AUDIT_DELTA)), AUDIT_DELTA, classic_mu, None),
        "mechanism/noisy-ht": (
            lambda k, x: mechanisms.noisy_hard_threshold(k, mean(x, "linf"), 1, 1.0, 1e-3).value,
            4, 1.0, 1e-3, None, None),
    }
    cases = []
    for name, (release, d, eps, delta, mu, pure) in releases.items():
        data = jnp.zeros((n, d), jnp.float32)
        data_in = data.at[0, 0].set(1.0)
        data_out = data.at[0, 0].set(-1.0)
        if name == "mechanism/noisy-ht":  # the canary moves every score (see the docstring)
            canary = jnp.array([1.0] + [-1.0] * (d - 1), jnp.float32)
            data = data.at[1].set(1.0)
            data_in, data_out = data.at[0].set(canary), data.at[0].set(-canary)
        direction = np.zeros(d)
        direction[0] = 1.0
        kind = "ledger" if mu is None else "gdp-curve"
        cases.append(CanaryCase(name, _one_release(name, release), (), jnp.zeros(d), data_in,
                                data_out, 0, flat_statistic(direction, np.zeros(d)), eps,
                                delta, 2.0 / n, mu, pure, "final", kind))
    return cases


def crafted_names() -> tuple[str, ...]:
    """The names of :func:`crafted_cases`, in order (nothing is built or compiled)."""
    return tuple(_crafted_setups())


def _reports(state: PyTree) -> jax.Array:
    """The two reports an ``ldp-nldp`` state holds (its running means), flattened."""
    return jnp.concatenate([state.sxx.ravel(), state.sxy])


def crafted_cases() -> list[CanaryCase]:
    """One-step canary cases of registered estimators on crafted data: the peeling estimators,
    where the canary moves every coordinate's score as in the core ``mechanism/noisy-ht``
    case; Gaussian releases (the low-dimensional DP-EM of the RMC model, Algorithm 1, and one
    user of each local-DP Gaussian estimator), where the pair moves (almost) every coordinate
    by (almost) the whole sensitivity; and one user of LDP-IHT, whose l2-ball randomizer is
    audited through its hemisphere coin.

    The registry examples audit ``hd-dp-em/*`` and ``alg5-noisy-iht/logistic`` through the
    trajectory statistic on simulated data, where the signal fixes the selection and the
    released values alone leave the planted noise x 0.2 below the claim. Privacy must hold on
    every data set, so these cases choose one: a single step (``N0 = T = 1``; under sample
    splitting each step is its own release on its own batch, so one step is the whole
    guarantee of ``hd-dp-em``), ``s = 1``, a budget whose ledger claims ``(1, 1e-3)``, a
    public start, and two records (a fixed one and the canary) whose noise-free pre-threshold
    vectors are, up to sign, ``lambda (1, 0, 0, 0, 0, 0)`` on ``D`` and ``lambda (0, 0, 1, 1,
    1, 1)`` on ``D'`` (``lambda``: what the pair attains of the sensitivity). Coordinate 1
    carries the start, which drives every record's posterior weight or link to its extreme and
    cancels in the pre-threshold vector (RMC: coordinates 1 and 6, d = 7). The statistic is
    the released value of coordinate 0, 0 where it is not selected.

    * ``hd-dp-em/gmm/one-step``: ``GaussianMixture(0.5)``, ``T = 1``, ``eta = 1`` (the start
      cancels), start ``0.1 (e_0 + e_1)``, records ``10^3 (3, -1, 1, 1, 1, 1)`` (fixed),
      ``10^3 (1, 1, -1, -1, -1, -1)`` (canary) and ``10^3 (-1, 3, 1, 1, 1, 1)``: every weight
      ``tanh(<y, beta>/(2 sigma^2))`` is 1, and the pair attains the declared ``2 T / n0`` in
      every coordinate but coordinate 1.
    * ``hd-dp-em/rmc/one-step``: ``RegressionMissingCovariates(1.0)``, ``T = 1``, ``eta =
      1``, start ``0.01`` in every coordinate, every ``y = 10^3``, d = 7 with two steering
      coordinates (1 and 6, one ``-10^8`` and one ``T`` per record, opposite between the fixed
      record and the others, so that ``<x_obs, beta>`` is about ``-10^6`` and their terms
      cancel). A record's term is ``-2 T^2`` or ``2 T^2`` where ``x_j`` is observed (by its
      sign) and ``3 T^2 - beta_j`` where it is missing (the conditional mean ``c beta_j`` and
      ``<nv, beta>`` are clipped at ``T``): the fixed record (all observed, ``+T``) against the
      canary (coordinate 0 missing, 2-5 at ``-10^8``) and its replacement (2-5 missing, 0 at
      ``-10^8``) attains ``5 T^2 - 0.01`` of the declared ``6 T^2 + 0.01`` (0.83).
    * ``alg5-noisy-iht/logistic/one-step``: logistic GLM, ``R = 1``, ``eta = 1``, start
      ``b e_1`` with ``b = 1 + sigmoid(b) = 1.87`` (so ``beta - eta g`` is 0 on coordinate
      1), designs ``(1, 1, 1, 1, 1, 1)``, ``(1, 1, -1, -1, -1, -1)`` and ``(-1, 1, 1, 1, 1,
      1)``, every ``y = -1``: the residual is ``b`` for every record, and the pair attains
      ``b / 2 = 0.93`` of the true sensitivity ``2 (R + c1) sigma_x / n``. The printed ``B``
      declares twice that, so the ledger delivers ``(epsilon / 2, delta)``: run at epsilon 2.

    * ``ld-dp-em/rmc/one-step``: the classic Gaussian release of the same RMC statistic
      (``Delta_2 = sqrt(d) lambda``, as the paper prints), d = 20, one record: the canary has
      every coordinate but the steering coordinate 0 missing (terms ``3 T^2 - 0.01``), its
      replacement every coordinate observed at ``-10^8`` (terms ``-2 T^2``), so the pair moves
      19 of 20 coordinates by 0.83 of ``lambda``: 0.81 of the declared l2 sensitivity. A
      halved sensitivity is then a violation (``2 x 0.81 > 1``); the claim is the GDP curve of
      the release at :data:`AUDIT_DELTA`, the statistic the projection on the difference.
    * ``alg1-noisy-gd/logistic/one-step``: Algorithm 1 (paper calibration) with ``T = 1`` at
      epsilon 2 (the printed ``B`` is twice the true sensitivity: the events give 1), ``R =
      1``, ``eta = 1``, d = 20, start ``100 e_1``, one record with ``y = -1``: the canary
      ``x = (1, 1, -1, ..., -1)`` against ``(-1, 1, 1, ..., 1)`` (on the l2 ball of radius
      ``sqrt(d)``, unclipped); the link is 1 for both, each residual 2, so the pair moves 19
      of 20 coordinates by the true ``2 (R + c1) sigma_x / n``: a reach of ``sqrt(19/20)``.
      (The registry example, T = 5 steps at ``(eps/5, delta/5)`` with ``log(2T/delta)``,
      leaves both plants within the calibration's slack at the audited delta; one step does
      not.)

    ``hd-dp-em/mor`` has no such case: for the corrected gradient the record term
    ``Pi(x) (c Pi(y) - Pi(x^T beta))`` lies in ``[-T^2, T^2]^d`` (``c Pi(y)`` has the sign of
    ``x^T beta``), so the declared ``4 T^2 / n0`` is twice the true sensitivity, and with
    noise x 0.2 a one-step release at ``(1, 1e-3)`` is at most ``0.82``-DP: no violation to
    catch (docs/audits.md).
    """
    return [crafted_case(name) for name in crafted_names()]


@functools.cache
def _crafted_setups() -> dict[str, tuple]:
    """``name -> (estimator, hparams, start, data(record), canary, replacement[, output[,
    direction]])`` of :func:`crafted_cases` (nothing compiled here)."""
    from dpjax.algorithms import dp_em, dp_gem, dp_glm, ldp_sparse
    from dpjax.models import GaussianMixture, MixtureOfRegressions, RegressionMissingCovariates
    from dpjax.models.glm import GLM, GLMData
    from dpjax.models.gmm import GMMData
    from dpjax.models.mor import MoRData
    from dpjax.models.rmc import RMCData

    d, big = 6, 1e3
    # sign patterns of the fixed record, the canary and its replacement (coordinate 1: the
    # start's): fixed + canary = (2, 0, 0, 0, 0, 0), fixed + replacement = (0, 0, 2, 2, 2, 2)
    fixed = np.array([1.0, -1.0] + [1.0] * (d - 2))
    canary = np.array([1.0, 1.0] + [-1.0] * (d - 2))
    other = np.array([-1.0, 1.0] + [1.0] * (d - 2))

    def f32(*xs):
        return tuple(jnp.asarray(x, jnp.float32) for x in xs)

    # GMM: <y, beta0> > 0 for all three records (coordinate 0 of the fixed record and
    # coordinate 1 of the replacement tripled; clipping to T = 1 undoes it)
    gmm = [big * fixed * [3, 1, 1, 1, 1, 1], big * canary, big * other * [1, 3, 1, 1, 1, 1]]
    b = 1.0
    for _ in range(100):  # the fixed point b = 1 + sigmoid(b)
        b = 1.0 + 1.0 / (1.0 + math.exp(-b))
    glm = [np.abs(fixed), canary, other]  # coordinate 1 = 1 for all: x^T beta0 = b
    # RMC (x, z): coordinates 1 and 6 steer; x = 0 where missing (z = 0)
    far, T = -1e8, 1.0
    rmc = [(np.array([T, T, T, T, T, T, far]), np.ones(7)),
           (np.array([0, far, far, far, far, far, T]), np.r_[0.0, np.ones(6)]),
           (np.array([far, far, 0, 0, 0, 0, T]), np.r_[1.0, 1.0, np.zeros(4), 1.0])]
    # ldp-gem, one user in one round: the release is beta0 + eta * (the user's report). The
    # canary's per-sample gradient is +10^6 in every coordinate but 0, its replacement's -10^6
    # (GMM and MoR: coordinate 0 at +1 steers the weight to +1 under beta0 = 0.5 e_0; RMC,
    # fully observed: y = +-10^6 times x = 1)
    dl = 10
    flip = np.r_[1.0, -np.ones(dl - 1)]
    ldp_pairs = {GaussianMixture(0.5): (big**2 * np.ones(dl), big**2 * flip),
                 MixtureOfRegressions(0.5): ((np.ones(dl), big**2), (flip, big**2)),
                 RegressionMissingCovariates(1.0): (big**2, -big**2)}
    ldp_hp = dp_gem.LDPGEMHyperparams(*f32(1.0, 1e-3, 1.0, 2.0, 0.05, np.nan))

    def _one_user(model, rec):
        if model.name == "gmm":
            return GMMData(*f32(rec[None]))
        if model.name == "mor":
            return MoRData(*f32(rec[0][None], [rec[1]]))
        return RMCData(*f32(np.ones((1, dl)), np.ones((1, dl)), [rec]))

    # the sparse LDP regressions, one user: x = 10^3 (1, 1, 1, 1) against its negation, y =
    # 10^3 (both shrink to the corners: the cross term x_bar y_bar moves by its whole range,
    # the outer product x~ x~^T not at all). ldp-nldp's state holds the two reports (the
    # estimate solves with the noisy covariance); ldp-public with the public covariance I and
    # lambda = 0 releases the cross report as its estimate.
    d_lr = 4
    x_lr = [big * np.ones(d_lr), -big * np.ones(d_lr)]
    nldp_hp = ldp_sparse.NLDPHyperparams(*f32(2.0, 1e-3, 3.0, 2.0, 2.0, 0.05))
    public_hp = ldp_sparse.PublicHyperparams(*f32(1.0, 1e-3, 2.0, 2.0, 0.0))
    x_pub = math.sqrt(d_lr) * np.eye(d_lr)  # x_pub^T x_pub / d = I

    # ld-dp-em/rmc: one record, coordinate 0 steers (observed at -10^8 in both records)
    dg = 20
    rmc_ld = [(np.r_[far, np.zeros(dg - 1)], np.r_[1.0, np.zeros(dg - 1)]),
              (np.full(dg, far), np.ones(dg))]
    setups: dict[str, tuple] = {
        "hd-dp-em/gmm/one-step": (
            dp_em.hd_dp_em(GaussianMixture(0.5), 1, 1),
            dp_em.DPEMHyperparams(*f32(1.0, 1e-3, 1.0, 1.0)), np.r_[0.1, 0.1, np.zeros(d - 2)],
            lambda r: GMMData(*f32(np.stack([r, gmm[0]]))), gmm[1], gmm[2]),
        "hd-dp-em/rmc/one-step": (
            dp_em.hd_dp_em(RegressionMissingCovariates(1.0), 1, 1),
            dp_em.DPEMHyperparams(*f32(1.0, 1e-3, 1.0, T)), np.full(7, 0.01),
            lambda r: RMCData(*f32(np.stack([r[0], rmc[0][0]]), np.stack([r[1], rmc[0][1]]),
                                   [1e3, 1e3])), rmc[1], rmc[2]),
        "alg5-noisy-iht/logistic/one-step": (
            dp_glm.noisy_iht(GLM("logistic"), 1, 1),
            # rho is informational for Algorithm 5: eps^2 / (4 T log(2 T / delta)), T = 1
            dp_glm.GLMHyperparams(*f32(2.0, 1e-3, 1.0, 1.0, 1.0 / math.log(2e3))),
            np.r_[0.0, b, np.zeros(d - 2)],
            lambda r: GLMData(*f32(np.stack([r, glm[0]]), [-1.0, -1.0])), glm[1], glm[2]),
        "alg1-noisy-gd/logistic/one-step": (
            dp_glm.noisy_gd(GLM("logistic"), 1),
            dp_glm.GLMHyperparams(*f32(2.0, 1e-3, 1.0, 1.0, 1.0 / math.log(2e3))),
            np.r_[0.0, 100.0, np.zeros(dg - 2)],
            lambda r: GLMData(*f32(r[None], [-1.0])), np.r_[1.0, 1.0, -np.ones(dg - 2)],
            np.r_[-1.0, 1.0, np.ones(dg - 2)]),
        **{f"ldp-gem/{model.name}/one-user": (
            dp_gem.ldp_gem(model, 1), ldp_hp, np.r_[0.5, np.zeros(dl - 1)],
            functools.partial(_one_user, model), rec_in, rec_out)
           for model, (rec_in, rec_out) in ldp_pairs.items()},
        **{name: (est, nldp_hp, np.zeros(d_lr),
                  lambda r: (*f32(r[None], [big]),), x_lr[0], x_lr[1], _reports)
           for name, est in (("ldp-nldp/one-user", ldp_sparse.nldp()),
                             ("ldp-nldp/per-user/one-user", ldp_sparse.nldp(per_user=True)))},
        "ldp-public/one-user": (ldp_sparse.nldp_public(), public_hp, np.zeros(d_lr),
                                lambda r: (*f32(r[None], [big], x_pub),), x_lr[0], x_lr[1]),
        "ld-dp-em/rmc/one-step": (
            dp_em.ld_dp_em(RegressionMissingCovariates(1.0), 1),
            dp_em.DPEMHyperparams(*f32(1.0, 1e-3, 1.0, T)), np.full(dg, 0.01),
            lambda r: RMCData(*f32(r[0][None], r[1][None], [1e3])), rmc_ld[0], rmc_ld[1]),
    }
    # LDP-IHT, one user in one round: the l2-ball randomizer keeps the true hemisphere with
    # probability e^eps/(e^eps+1). With theta0 = 0 the gradient is -x_bar y_bar: y = +-10^3
    # at x = 10^3 (1, 1, 1, 1) gives +-tau1 tau2 (1, 1, 1, 1), norm 2 tau1 tau2, 2/3 of the
    # radius 2 tau1 (theta_norm sqrt(k') tau1 + tau2) for tau1 = 0.25, tau2 = 1 (the sign draw
    # b is +1 with probability 5/6); k' = d = 4 (no truncation), so the release is the report
    # scaled onto the unit ball, and its projection on (1, 1, 1, 1) has the sign of the
    # hemisphere (times b): the event's log-ratio is 0.64 honest, 1.57 with noise x 0.2 (the
    # coin at 5 eps), against the claim eps = 1 (pure, from the ledger). Its noise-free
    # release is not defined (the direction is drawn even at noise x 0): the statistic is
    # given.
    setups["ldp-iht/one-user"] = (
        ldp_sparse.ldp_iht(1, d_lr), ldp_sparse.IHTHyperparams(*f32(1.0, 0.25, 1.0, 1.0)),
        np.zeros(d_lr), lambda y: (*f32(big * np.ones((1, d_lr)), [y]),), big, -big, None,
        np.ones(d_lr))
    return setups


@functools.cache
def crafted_case(name: str) -> CanaryCase:
    """The case ``name`` of :func:`crafted_cases` (built on first use: each runs its
    estimator a few times)."""
    from dpjax.accounting import gaussian_epsilon

    setups = _crafted_setups()
    if name not in setups:
        raise ValueError(f"name must be one of {sorted(setups)}; got {name!r}")
    estimator, hp, beta0, data, rec_in, rec_out, *rest = setups[name]
    output, direction = (list(rest) + [None, None])[:2]
    data_in, data_out = data(rec_in), data(rec_out)
    beta0 = jnp.asarray(beta0, jnp.float32)
    events = probe_events(estimator, data_in, beta0, hp)
    n = int(jax.tree_util.tree_leaves(data_in)[0].shape[0])  # the records (first leaf's rows)
    approx = estimator.ledger(n, hp, events).approx_dp  # the honest ledger of those events
    kinds = {e.kind for e in events}
    if direction is not None:  # a coin-based randomizer: pure eps, the statistic given
        return CanaryCase(name, estimator, hp, beta0, data_in, data_out, 0,
                          flat_statistic(direction, np.zeros(beta0.shape)),
                          float(approx.epsilon), float(approx.delta), 1.0,
                          pure_epsilon=float(approx.epsilon), plants=plants_reaching(kinds))
    # the noise-free releases at the same hyperparameters (the same clipping)
    with planted_bug("noise-x0"):
        mech = jax.jit(estimator_mechanism(estimator, hp, beta0, output or _beta_output))
        out_in, out_out = (np.asarray(mech(jax.random.key(0), x)) for x in (data_in, data_out))
    mu = _gdp_mu(events, disjoint=True)
    if mu is None:
        # the pure-DP bound of one peeling release: s rounds of report-noisy-max (2 Delta / b
        # each) and s Laplace values (Delta / b each), Delta the true sensitivity
        (ev,) = events
        pure = 3 * ev.s * float(ev.true_sensitivity[0]) / float(ev.scale[0])
        return CanaryCase(name, estimator, hp, beta0, data_in, data_out, 0,
                          flat_statistic(out_in, np.zeros(beta0.shape)), float(approx.epsilon),
                          float(approx.delta), float(np.abs(out_in - out_out).max()),
                          pure_epsilon=pure)
    # a Gaussian release: the claim is its GDP curve at AUDIT_DELTA
    return CanaryCase(name, estimator, hp, beta0, data_in, data_out, 0,
                      flat_statistic(out_in - out_out, out_out),
                      float(gaussian_epsilon(mu, AUDIT_DELTA)), AUDIT_DELTA,
                      float(np.linalg.norm(out_in - out_out)), gdp_mu=mu,
                      claim_kind="gdp-curve", output=output)


def wang_xu_radius_cases(epsilon: float = 1.0, delta: float = 1e-5) -> list[CanaryCase]:
    """Wang & Xu's (2021) published LDP-IHT gradient radius against the rectified one, where
    the radius is a privacy parameter: a Gaussian local release of one user's gradient,
    calibrated for ``(epsilon, delta)``-LDP from the declared range ``2 r``.

    The pair: two admissible records (``|x_j| <= 1``, ``|y| <= 0.1``, ``d = 64``, ``k' = 32``)
    at the worst-case unit ``k'``-sparse iterate; their gradients differ by ``sqrt(2)`` times
    the rectified radius, 3.7 times the published range, so the published radius's release is
    not ``(epsilon, delta)``-DP (its exact epsilon at ``delta = 1e-5`` is about 3.6) and the
    rectified one's is. The claim of both is ``(epsilon, delta)``. (The registered
    ``ldp-iht/wang-xu-literal`` estimator uses the l2-ball randomizer, which is epsilon-LDP for
    every radius: there the published radius biases the reports but is no privacy failure.)
    """
    from dpjax import local_randomizers as lr

    d, kp, tau1, tau2 = 64, 32, 1.0, 0.1
    theta = jnp.zeros(d).at[:kp].set(1 / math.sqrt(kp))

    def grad(record):
        return record[:d] * (jnp.dot(theta, record[:d]) - record[d])

    rec_in = jnp.concatenate([jnp.full(d, tau1), jnp.array([-tau2])])
    rec_out = rec_in.at[kp:d].set(-tau1)
    diff = np.asarray(grad(rec_in) - grad(rec_out), np.float64)
    cases = []
    for variant, label in (("rectified", "rectified"),
                           ("wang_xu_2021_literal", "published (not DP as claimed)")):
        r = lr.ldp_iht_radius(d, kp, tau1, tau2, variant=variant)

        def release(key, data, r=r):
            stat = mechanisms.BoundedStatistic(grad(data[0]), jnp.float32(2 * r), "l2", "local")
            return lr.local_gaussian(key, stat, epsilon, delta).value

        name = f"wang-xu-radius/{label}"
        mu = float(np.linalg.norm(diff)) / float(lr.local_gaussian_sigma(2 * r, epsilon, delta))
        cases.append(CanaryCase(name, _one_release(name, release), (), jnp.zeros(d),
                                rec_in[None], rec_out[None], 0,
                                flat_statistic(diff, np.zeros(d)), float(epsilon),
                                float(delta), float(np.linalg.norm(diff)), mu))
    return cases


if __name__ == "__main__":
    raise SystemExit(main())
