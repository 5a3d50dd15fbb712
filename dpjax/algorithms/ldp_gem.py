r"""Local-DP gradient EM, **ours** (not in spec 002, whose local-DP result covers the 1-D mean
only), for every model of :mod:`dpjax.models` that supplies ``per_sample_gradients``.

:func:`ldp_gem` (the estimator) and :func:`fit_ldp_gem` (one data set): the users are split
into ``T`` disjoint groups, each user of group ``t`` releases its ``d``-vector of
``psi``-scored gradients at the public iterate once, with its own Gaussian noise calibrated to
the vector's l2 range for ``(epsilon, delta)``-LDP, and the server steps along the group's
average. Its ledger states each user's local guarantee. It adapts the truncation rule and the
accounting of Algorithm 2 (:mod:`dpjax.algorithms.dp_gem`, which re-exports every public name
of this module), so that the two compare at the same ``(epsilon, delta)``.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate, registry
from dpjax.accounting import ApproxDP, Ledger, Release, parallel_pld
from dpjax.algorithms._gem_core import (
    GEMInfo,
    _checked,
    _example_problem,
    _f32,
    _robust_fields,
    eps_tilde,
)
from dpjax.base import Estimator, FitResult, Padded, fit
from dpjax.mechanisms import (
    BoundedStatistic,
    PrivacyEvent,
    gaussian_mechanism_zcdp,
    local_mechanism,
)
from dpjax.mechanisms.calibration import gaussian_multiplier_analytic
from dpjax.models.protocol import EMModel, algorithm_view
from dpjax.robust_mean import local_scores

__all__ = [
    "LDPGEMHyperparams",
    "LDPGEMState",
    "LDP_S_RULES",
    "fit_ldp_gem",
    "ldp_gem",
    "ldp_smoothing_parameters",
    "ldp_user_groups",
    "local_gradient_scores",
]

LDPSRule = Literal["ldp", "explicit"]
LDP_S_RULES: tuple[str, ...] = ("ldp", "explicit")
#: how each user's zCDP budget ``rho`` is set from (epsilon, delta): ``"gaussian"`` (default) --
#: ``rho = mu^2 / 2`` with ``mu`` the analytic Gaussian mechanism's of (epsilon, delta) (Balle &
#: Wang 2018): the user's one Gaussian report is then exactly (epsilon, delta)-LDP by its PLD
#: (the exact Gaussian curve), which the ledger reads; ``"paper"`` -- ``rho = eps~^2``, Algorithm
#: 2's accounting (Bun-Steinke), which the exact curve reads back as only part of the request
LDP_CALIBRATIONS: tuple[str, ...] = ("gaussian", "paper")


def user_rho(epsilon: Any, delta: Any, calibration: str) -> Any:
    """Each user's zCDP budget under ``calibration`` (:data:`LDP_CALIBRATIONS`); inf at
    epsilon = inf (traceable)."""
    if calibration == "paper":
        return jnp.square(eps_tilde(epsilon, delta))
    m = gaussian_multiplier_analytic(epsilon, delta)  # 1 / mu (0 at epsilon = inf)
    with np.errstate(divide="ignore"):
        return 0.5 / (m * m)


class LDPGEMHyperparams(NamedTuple):
    """Swept hyperparameters of the local-DP gradient EM (:func:`ldp_gem`)."""

    epsilon: jax.Array  # () each user's budget (one release per user); inf: non-private
    delta: jax.Array  # () each user's delta
    eta: jax.Array  # () step size
    tau: jax.Array  # () public bound on the per-coordinate second moment of grad q_i
    zeta: jax.Array  # () failure probability (sets beta_s)
    s: jax.Array  # () truncation scale; read only with s_rule="explicit" (else NaN)

    POSITIVE = ("eta", "tau", "zeta")  # in (0, inf], checked with the budgets by dpjax.fit


class LDPGEMState(NamedTuple):
    beta: jax.Array  # (d,) current iterate (public: built from earlier groups' releases)
    t: jax.Array  # () int32, the user group of the next step


def ldp_user_groups(n: int, num_iterations: int) -> tuple[int, ...]:
    """The public group sizes of :func:`ldp_gem`: ``T`` consecutive index blocks of
    ``floor(n/T)`` users, the remainder ``n mod T`` joining the last block (no user dropped).

    Examples:
        >>> ldp_user_groups(303, 5)
        (60, 60, 60, 60, 63)
    """
    n = _validate.check_int_in_range(n, "n", 1)
    num_iterations = _validate.check_int_in_range(num_iterations, "num_iterations", 1)
    if n < num_iterations:
        raise ValueError(f"n = {n} users cannot form num_iterations = {num_iterations} "
                         "non-empty groups")
    m0 = n // num_iterations
    return (m0,) * (num_iterations - 1) + (m0 + n % num_iterations,)


def ldp_smoothing_parameters(s_rule: LDPSRule, m: int, d: int, hp: LDPGEMHyperparams
                             ) -> tuple[jax.Array, jax.Array]:
    r"""``(s, beta_s)`` of the local-DP gradient EM for groups of ``m`` users in dimension ``d``.

    ``beta_s = sqrt(log(d / zeta))`` (as Algorithm 2) and, for ``s_rule="ldp"`` (default),
    ``s = sqrt(sqrt(m) tau eps~) / (2 beta_s)``: Algorithm 2's sigma-consistent rule with
    ``n`` replaced by ``sqrt(m)``, the substitution spec 002 A5 makes for the local 1-D mean
    (the server averages ``m`` independent user noises, so the noise in the average falls like
    ``s / (eps~ sqrt(m))`` instead of ``s / (eps~ n)``; balancing it against the truncation
    bias ``tau / s`` gives ``s ~ (m tau^2 eps~^2)^(1/4)``). Ours, not the paper's.
    ``s_rule="explicit"`` reads ``hp.s``. ``epsilon = inf`` gives ``s = inf`` with ``"ldp"``.
    """
    et = eps_tilde(hp.epsilon, hp.delta)
    dtype = et.dtype
    beta_s = jnp.sqrt(jnp.log(d / jnp.asarray(hp.zeta, dtype)))
    if s_rule == "ldp":
        # m a host number, or the runtime group size of the padded form (ldp_gem's)
        root_m = math.sqrt(m) if isinstance(m, (int, float)) else jnp.sqrt(m)
        s = jnp.sqrt(root_m * jnp.asarray(hp.tau, dtype) * et) / (2.0 * beta_s)
    elif s_rule == "explicit":
        s = jnp.asarray(hp.s, dtype)
    else:
        raise ValueError(f"s_rule must be one of {LDP_S_RULES}; got {s_rule!r}")
    return s, beta_s


def local_gradient_scores(model: EMModel, beta: jax.Array, data: Any, s: Any, beta_s: Any
                          ) -> BoundedStatistic:
    r"""Every user's coordinate-wise robust gradient, ready for a local mechanism.

    Row ``i`` is the ``d``-vector :math:`(\psi_{s,\beta_s}(\nabla_j q_i(\beta;\beta)))_j` of
    user ``i`` (:func:`dpjax.robust_mean.local_scores` of the per-sample gradients), with
    relation ``"local"`` and the l2 range of one user's vector,
    ``sqrt(d) (4 sqrt2 / 3) s`` (each coordinate lies in ``[-2 sqrt2 s/3, 2 sqrt2 s/3]`` whatever
    the record: ``psi`` is clamped and maps NaN to 0).
    """
    return local_scores(model.per_sample_gradients(beta, data), s, beta_s)


def _user_group(data: Any, t: jax.Array, num_iterations: int, n: int):
    """Group ``t`` of :func:`ldp_user_groups` as ``m_max = floor(n/T) + n mod T`` rows from
    ``t floor(n/T)``, with its validity mask and size (rows past the group, only for
    ``t < T - 1``, belong to the next group and are masked out)."""
    m0 = n // num_iterations
    m_max = m0 + n % num_iterations
    start = t * m0
    batch = jax.tree_util.tree_map(
        lambda x: jax.lax.dynamic_slice_in_dim(x, start, m_max), data)
    size = jnp.where(t == num_iterations - 1, m_max, m0)
    return batch, jnp.arange(m_max) < size, size


def _make_ldp_step(model: EMModel, num_iterations: int | None, s_rule: LDPSRule,
                   batching: str, calibration: str = "gaussian"):
    """The step; ``num_iterations=None``: the padded form's (disjoint groups only,
    :func:`_padded_ldp`), the group's size from the runtime ``sizes`` and its padded rows'
    gradients zero (their reports are dropped)."""
    def step(key, state: LDPGEMState, data, hp: LDPGEMHyperparams, sizes=None):
        beta = state.beta
        n, d = model.num_records(data), beta.shape[0]
        if sizes is not None:  # a padded group: the mask's rows are its users
            batch, valid = data, sizes.mask
            size = m = sizes.count.astype(beta.dtype)
        elif batching == "disjoint":  # data is this round's group already
            batch, valid, size, m = data, jnp.ones((n,), bool), jnp.asarray(n), n
        else:
            if n < num_iterations:
                raise ValueError(f"n = {n} users cannot form num_iterations = "
                                 f"{num_iterations} non-empty groups")
            batch, valid, size = _user_group(data, state.t, num_iterations, n)
            m = n // num_iterations
        s, beta_s = ldp_smoothing_parameters(s_rule, m, d, hp)
        # each user releases once: the whole per-user budget on this one report
        rho = user_rho(hp.epsilon, hp.delta, calibration)
        scores = (local_gradient_scores(model, beta, batch, s, beta_s) if sizes is None else
                  local_scores(model.per_sample_gradients(beta, batch, mask=valid), s, beta_s))
        reports, ev = local_mechanism(key, scores, gaussian_mechanism_zcdp, rho)
        reports = jnp.where(valid[:, None], reports.astype(beta.dtype), 0.0)
        g = jnp.sum(reports, axis=0) / size.astype(beta.dtype)  # a public group size
        new = beta + jnp.asarray(hp.eta, beta.dtype) * g
        return (LDPGEMState(new, state.t + 1),
                GEMInfo(ev.scale.astype(beta.dtype), s.astype(beta.dtype), (ev,)))

    return step


def _ldp_init(beta0: Any) -> LDPGEMState:
    return LDPGEMState(jnp.asarray(beta0, dtype=jnp.result_type(float)),
                       jnp.zeros((), jnp.int32))


@functools.lru_cache(maxsize=512)
def ldp_gem(model: EMModel, num_iterations: int, s_rule: LDPSRule = "ldp",
            batching: Literal["full", "disjoint"] = "full",
            calibration: str = "gaussian") -> Estimator:
    r"""Local-DP gradient EM (**ours**: beyond the paper, whose local-DP result, App F, covers
    the 1-D mean only; an extension of ours).

    The ``n`` users are split into ``T`` disjoint groups of consecutive indices
    (:func:`ldp_user_groups`: ``floor(n/T)`` users each, the remainder ``n mod T`` joining the
    last group, so no user is dropped). In round ``t`` the server publishes ``beta^{t-1}``;
    every user ``i`` of group ``t`` computes the coordinate-wise score vector
    ``psi_{s,beta_s}(grad q_i(beta^{t-1}; beta^{t-1}))`` (:func:`local_gradient_scores`) and
    releases it once, with its own Gaussian noise:

    .. math::

        r_i = \big(\psi_{s,\beta_s}(\nabla_j q_i(\beta^{t-1};\beta^{t-1}))\big)_{j \le d}
              + N(0, \sigma_{loc}^2 I_d), \qquad
        \sigma_{loc} = \frac{\sqrt d\,(4\sqrt2/3)\, s}{\sqrt{2\rho}}, \quad
        \rho = \mu^2/2,

    and the server steps :math:`\beta^t = \beta^{t-1} + \eta\, \frac{1}{|G_t|}\sum_{i\in G_t}
    r_i` (``|G_t|`` public). ``s`` from :func:`ldp_smoothing_parameters` with ``m =
    floor(n/T)`` (the same ``s`` in every round), ``beta_s = sqrt(log(d/zeta))``.

    with ``mu`` the analytic Gaussian mechanism's of (epsilon, delta) (``calibration=
    "gaussian"``, the default; ``"paper"``: ``rho = eps~^2``, Algorithm 2's paper accounting).

    Privacy (local relation: one user's record replaced by any other): each report is a
    Gaussian mechanism on a vector whose l2 range is ``sqrt(d) (4 sqrt2/3) s`` for every record
    (``psi`` is clamped), with ``mu = Delta / sigma`` the analytic Gaussian mechanism's, so its
    privacy loss distribution (the exact Gaussian curve) gives exactly ``(epsilon, delta)``
    (``"paper"``: ``rho = eps~^2``-zCDP, which the Bun-Steinke conversion turns into
    ``(epsilon, delta)`` and the exact curve into less); each user releases once and the
    iterate it sees is post-processing of the other groups' reports, so every user's
    guarantee is ``(epsilon, delta)``-LDP (sequentially interactive), with no composition
    across users or rounds. Both calibrations are valid for every ``epsilon > 0`` (unlike the
    classic one of the paper's Thm 8, proven for ``epsilon <= 1``), and each matches Algorithm
    2's under the same name, so the two compare at the same ``(epsilon, delta)``. ``s`` keeps
    its rule (``eps~``) under both. ``epsilon = inf``: no noise and (with ``s_rule="ldp"``)
    ``s = inf``, i.e. non-private minibatch gradient EM on the same groups.

    Args:
        model: a model with ``per_sample_gradients`` (hashable, bound statically).
        num_iterations: ``T``, the number of rounds = user groups (static).
        s_rule: ``"ldp"`` (default) or ``"explicit"`` (``hparams.s``).
        batching: ``"full"`` (default): the data set of all ``n`` users; round ``t`` slices its
            group inside the step (the remainder joins the last group: no user dropped).
            ``"disjoint"``: step ``t`` receives its group as the batch
            (:func:`dpjax.base.split_batches`, which keeps ``T floor(n/T)`` users, or a streamed
            ``batch(t)``, as in the sweep engine); equal groups, ``s`` from the batch size.
        calibration: ``"gaussian"`` (default) or ``"paper"`` (:data:`LDP_CALIBRATIONS`).
    """
    _validate.check_int_in_range(num_iterations, "num_iterations", 1)
    if s_rule not in LDP_S_RULES:
        raise ValueError(f"s_rule must be one of {LDP_S_RULES}; got {s_rule!r}")
    if batching not in ("full", "disjoint"):
        raise ValueError(f"batching must be 'full' or 'disjoint'; got {batching!r}")
    _validate.check_choice(calibration, "calibration", LDP_CALIBRATIONS)
    name = f"ldp-gem/{model.name}"
    ledger_fn = functools.partial(_ldp_ledger, name, model, num_iterations, s_rule, calibration)
    return Estimator(name, _ldp_init,
                     _make_ldp_step(model, num_iterations, s_rule, batching, calibration),
                     num_iterations, batching, ledger_fn,
                     padded=(_padded_ldp(algorithm_view(model), s_rule, calibration)
                             if batching == "disjoint" else None))


@functools.lru_cache(maxsize=256)
def _padded_ldp(model: EMModel, s_rule: LDPSRule, calibration: str) -> Padded | None:
    """The disjoint-group estimator with the group size and ``T`` as runtime values (one
    program for every ``n`` and ``T``): the step reads neither but through its group's size
    (``s`` and the average); the padded rows are no users (masked gradients, reports
    dropped). Per-user noise keys ``split(key, rows)`` keep every real user's draw (JAX's
    partitionable threefry: a prefix of a longer split)."""
    if not getattr(model, "supports_mask", False) or not jax.config.jax_threefry_partitionable:
        return None
    return Padded(f"ldp-gem/{model.name}[{s_rule},{calibration}]", _ldp_init,
                  _make_ldp_step(model, None, s_rule, "disjoint", calibration), "disjoint")


def _ldp_ledger(name: str, model: EMModel, num_iterations: int, s_rule: str, calibration: str,
                n: int, hparams: Any, events: tuple[PrivacyEvent, ...]) -> Ledger:
    """Each user's guarantee: the one report of that user (the ``T`` stacked events are the
    ``T`` groups' reports, one event per round standing for every user of its group), composed
    in parallel (disjoint users): ``"gaussian"`` each report by its PLD (the exact Gaussian
    curve), ``"paper"`` in zCDP converted by Bun-Steinke."""
    (ev,) = events
    eps = float(np.asarray(hparams.epsilon))
    delta = float(np.asarray(hparams.delta))
    sizes = ldp_user_groups(n, num_iterations)
    statistic = ("one user's d-vector (psi_{s,beta_s}(grad_j q_i(beta^t; beta^t)))_j; l2 range "
                 "sqrt(d) (4 sqrt2/3) s")
    data = (f"each user once, in its group's round ({num_iterations} disjoint groups of "
            f"{sizes[0]} users, the last {sizes[-1]})")
    notes = [
        "local DP, ours (not in the paper): each user releases one noisy robust gradient, in "
        "its own round; the iterate it is computed at is public (post-processing of earlier "
        "rounds), so nothing composes across users or rounds",
        f"n = {n}, T = {num_iterations}, eta = {float(np.asarray(hparams.eta)):g}; "
        f"s_rule = {s_rule!r}, tau = {float(np.asarray(hparams.tau)):g}, zeta = "
        f"{float(np.asarray(hparams.zeta)):g}",
    ]
    notes.extend(model.gradient_notes)
    release = Release.from_event(ev, statistic, data)
    if calibration != "paper":
        notes.append("calibration 'gaussian': each user's rho = mu^2/2, mu the analytic Gaussian "
                     "mechanism's of (epsilon, delta) (the paper accounting's rho = eps~^2 is "
                     "calibration='paper')")
        return parallel_pld(name, release, requested=ApproxDP(eps, delta), delta=delta,
                            relation="local", notes=notes,
                            what=f"{num_iterations} disjoint user groups (one report per user)")
    return Ledger.build(name, [release], "parallel",
                        variant="corrected", relation="local",
                        requested=ApproxDP(eps, delta), delta=delta,
                        conversion="bun-steinke", notes=notes)


@_validate.host_only
def fit_ldp_gem(
    key: Any, data: Any, model: EMModel, *, epsilon: Any, delta: Any = None,
    num_iterations: int, beta0: Any, tau: Any, eta: Any = 1.0, zeta: Any = 0.05,
    s_rule: LDPSRule = "ldp", s: Any = None, on_invalid: str = "raise", secure: bool = False,
    accountant: Any = None, calibration: str | None = None,
) -> FitResult:
    """Fit the local-DP gradient EM (:func:`ldp_gem`; ours, not in the paper) to one data set
    of ``n`` users, one record each.

    Arguments as :func:`fit_dp_gem`, except: ``epsilon`` and ``delta`` are each user's local
    budget (every user releases once; ``delta`` defaults to ``1/(2n)``, ``n`` the users);
    ``num_iterations`` ``T`` is also the number of user groups (needs ``n >= T``; the remainder
    ``n mod T`` joins the last group); ``s_rule`` is ``"ldp"`` (default,
    :func:`ldp_smoothing_parameters`) or ``"explicit"``; ``calibration`` is ``"gaussian"``
    (default, ``None``: each report is the analytic Gaussian mechanism of the request, its PLD
    delivers it) or ``"paper"`` (``rho = eps~^2``; :data:`LDP_CALIBRATIONS`).

    Returns:
        :class:`~dpjax.base.FitResult`; its ledger (relation ``"local"``) delivers exactly
        ``(epsilon, delta)`` to every user.
    """
    key, data, n, num_iterations, eps, dl, beta0 = _checked(
        key, data, model, num_iterations, on_invalid, epsilon, delta, eta, beta0)
    groups = ldp_user_groups(n, num_iterations)  # raises if n < T
    if s_rule not in LDP_S_RULES:
        raise ValueError(f"s_rule must be one of {LDP_S_RULES}; got {s_rule!r}")
    # public values only: the largest group's sum of reports must not overflow
    fields = _robust_fields(eps, tau, zeta, "explicit" if s_rule == "explicit" else
                            "sigma_consistent", s, max(groups), local=True)
    cal = "gaussian" if calibration is None else calibration
    _validate.check_choice(cal, "calibration", LDP_CALIBRATIONS)
    est = ldp_gem(model, num_iterations, s_rule, calibration=cal)
    return fit(est, key, data, beta0, LDPGEMHyperparams(*_f32(eps, dl, eta), *fields), n=n,
               secure=secure, accountant=accountant)


# --------------------------------------------------------------------------------------------
# Registry: the estimator on each model's small example problem
# --------------------------------------------------------------------------------------------


def _example(model: EMModel, d: int, seed: int, n: int) -> registry.Example:
    data, beta0 = _example_problem(model, d, seed, n)

    def hp(eps):
        f = functools.partial(jnp.asarray, dtype=jnp.float32)
        # each user's delta: 1/n, but at most 1/400 (the one-user-per-round example has n = 4)
        return LDPGEMHyperparams(f(eps), f(1.0 / max(n, 400)), f(1.0), f(2.0), f(0.05),
                                 f(jnp.nan))

    return registry.Example(data, beta0, hp)


def _register() -> None:
    from dpjax.models import GaussianMixture, MixtureOfRegressions, RegressionMissingCovariates

    models = [(GaussianMixture(0.5), 4, 0), (MixtureOfRegressions(0.5), 3, 1),
              (RegressionMissingCovariates(1.0, 0.2), 3, 2)]
    for model, d, seed in models:
        # gmm: the full data set, n = 403 not a multiple of T (the last group carries the
        # remainder); rmc: one group per step (disjoint batching), which puts the canary
        # audit's record in the last round; mor: groups of ONE user (n = T = 4), so the
        # released iterate moves by that user's whole report and the canary audit tests the
        # per-user local guarantee itself (with m users a round's mean is about sqrt(m) times
        # more private than each report, beyond what an audit of the iterate can see)
        batching, n_users = {"gmm": ("full", 403), "mor": ("disjoint", 4)}.get(
            model.name, ("disjoint", 400))
        registry.register(registry.Entry(
            f"ldp-gem/{model.name}", "dp-gem",
            functools.partial(ldp_gem, model, 4, "ldp", batching),
            functools.partial(_example, model, d, seed, n_users),
            requested=lambda eps: ("epsilon", eps)))


_register()
