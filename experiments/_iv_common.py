"""Pieces shared by the DP-IV experiments (spec 004).

* :func:`tracked` wraps an IV estimator for a study: its state also carries the closed-form 2SLS
  estimate of the repetition's data set (a diagnostic, so that both ``||beta_t - beta||`` and
  ``||beta_t - beta_hat_2SLS||`` can be recorded: spec 004 §6 B4) and the last step's clip
  fractions. A study over many horizons ``T`` records only the final iterate with
  ``Setting(final_only=True)`` (the sweep engine's option; no nested scan here). The privacy
  ledger is the wrapped estimator's, composed from the wrapped steps' privacy events: the
  diagnostic is never released.
* :class:`IVRecord` -- the recorded metrics.
* :func:`level` -- one privacy level: the hyperparameters plus display columns (the requested
  and delivered rho, and the (epsilon, delta) the delivered rho converts to), from the ledger of
  the estimator's privacy events (:func:`dpjax.base.probe_events`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.algorithms import dp_iv
from dpjax.base import Estimator, Padded, probe_events
from dpjax.config import Config, ConfigError, param
from dpjax.experiments._common import INF
from dpjax.experiments._common import ZeroInit as _ZeroInit
from dpjax.models.iv import IVData, LinearIV, mask_rows, two_stage_least_squares
from dpjax.sweep import DataPlan, Setting

DELTA = 1e-5  # the paper's delta for the (epsilon, delta) display (Sec 4, footnote 3)


@dataclasses.dataclass(frozen=True)
class IVConfig(Config):
    """The setting every IV experiment has (its configuration derives from this)."""

    delta: float = param(DELTA, gt=0, lt=1,
                         doc="target delta of the ledger's (epsilon, delta) conversion")


# What the simulated IV studies share: 100 repetitions (5 with --quick) and these metrics.
# At epsilon = inf, error_2sls is the distance between the noiseless iterate and the 2SLS
# solution, which agree in exact arithmetic: float32 round-off of vectors of norm about 5
# (ulp 4.8e-7), about 1e-6, which moves with any change in the order of the arithmetic;
# `dpjax run --all` compares it within 1e-5 (20 ulp). At finite epsilon its means are 1e-3 and
# above, with standard errors far larger than that.
STUDY = dict(reps=100, quick_reps=5, summary_extra=("error_2sls", "clip1", "clip2"),
             compare_atol=(("error_2sls", 1e-5),))


class TrackedState(NamedTuple):
    inner: dp_iv.DPIVState  # the estimator's state
    beta_2sls: jax.Array  # (p,) closed-form 2SLS of the data set (diagnostic; 0 before step 1)
    clip1: jax.Array  # () first-stage clip fraction of the last step
    clip2: jax.Array  # () second-stage clip fraction of the last step


class TrackedInfo(NamedTuple):
    events: tuple  # the wrapped step's privacy events (Theta, beta)


def _tracked_init(init):
    def tracked_init(params0: Any) -> TrackedState:
        inner = init(params0)
        zero = jnp.zeros((), inner.beta.dtype)
        return TrackedState(inner, jnp.zeros_like(inner.beta), zero, zero)

    return tracked_init


def _tracked_state(inner, info, data: IVData) -> tuple[TrackedState, TrackedInfo]:
    # the same for every step and level: XLA hoists it out of the scan
    beta_hat, _ = two_stage_least_squares(data)
    dtype = inner.beta.dtype
    return TrackedState(inner, beta_hat.astype(dtype), info.clip_frac1.astype(dtype),
                        info.clip_frac2.astype(dtype)), TrackedInfo(info.events)


@functools.cache
def tracked(estimator: Estimator) -> Estimator:
    """The estimator with a 2SLS diagnostic in its state (see the module docstring); with the
    estimator's padded form wrapped alike (:func:`_tracked_padded`), so that settings that
    differ in ``n`` or ``T`` share one program."""

    def step(key: jax.Array, state: TrackedState, data: IVData, hparams: Any):
        inner, info = estimator.step(key, state.inner, data, hparams)
        return _tracked_state(inner, info, data)

    padded = None if estimator.padded is None else _tracked_padded(estimator.padded)
    return Estimator(estimator.name, _tracked_init(estimator.init), step, estimator.num_steps,
                     "full", estimator.ledger, padded=padded)


@functools.cache
def _tracked_padded(padded: Padded) -> Padded:
    """:func:`tracked` of a padded form: the 2SLS diagnostic of the records, the padded rows
    set to zero (:func:`~dpjax.models.iv.mask_rows`: zero rows add nothing to the normal
    equations). Its row blocks are the wrapped form's: the diagnostic, the same for every step,
    is computed once per call (outside the steps' loop)."""

    def step(key: jax.Array, state: TrackedState, data: IVData, hparams: Any, sizes: Any):
        inner, info = padded.step(key, state.inner, data, hparams, sizes)
        return _tracked_state(inner, info, mask_rows(data, sizes.mask))

    return Padded(f"tracked {padded.family}", _tracked_init(padded.init), step, "full",
                  row_block=padded.row_block)


@dataclasses.dataclass(frozen=True)
class IVRecord:
    """``error = ||beta_t - beta||`` (``beta = truth[:p]``), ``error_2sls = ||beta_t -
    beta_hat||``, ``error_of_2sls = ||beta_hat - beta||`` (2SLS on the same data),
    ``estimate = beta_t[0]``, and the clip fractions."""

    p: int

    def __call__(self, state: TrackedState, truth: jax.Array) -> dict[str, jax.Array]:
        beta = state.inner.beta
        return {
            "error": jnp.linalg.norm(beta - truth[: self.p]),
            "error_2sls": jnp.linalg.norm(beta - state.beta_2sls),
            # the closed-form 2SLS estimate of the same data set (a plain function, computed in
            # the diagnostic): the 2SLS reference curve of the figures
            "error_of_2sls": jnp.linalg.norm(state.beta_2sls - truth[: self.p]),
            "estimate": beta[0],
            "clip1": state.clip1,
            "clip2": state.clip2,
        }


def ZeroInit(q: int, p: int) -> _ZeroInit:
    """The paper's start ``Theta^(0) = 0`` (``q x p``), ``beta^(0) = 0`` (data-independent)."""
    return _ZeroInit(((q, p), (p,)))


def parameters(model: LinearIV, seed: int, theta_file: str = ""):
    """The true parameters of ``model``, drawn once per ``(p, q, r)`` and ``seed`` (spec 004
    §6 B5), with the first-stage ``Theta`` read from ``theta_file`` (a ``.npy`` of shape
    ``(q, p)``) when one is given -- the IV error depends strongly on Theta -- and the packed
    vector."""
    key = jax.random.fold_in(jax.random.key(seed), 1_000_000 * model.p + 1000 * model.q + model.r)
    prm = model.draw_parameters(key)
    if theta_file:
        prm = prm._replace(theta=load_theta(theta_file, model.q, model.p))
    return prm, model.pack(prm)


def load_theta(path: str, q: int, p: int) -> np.ndarray:
    """A given first-stage Theta: a finite ``(q, p)`` array saved with ``numpy.save``."""
    try:
        theta = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--set theta_file: cannot read {path!r} as a .npy array ({exc})"
                          ) from None
    if theta.shape != (q, p) or not np.issubdtype(theta.dtype, np.number):
        raise ConfigError(f"--set theta_file: Theta must be a real array of shape (q, p) = "
                          f"({q}, {p}); got {theta.dtype} {theta.shape}")
    if not np.isfinite(theta).all():
        raise ConfigError("--set theta_file: Theta must be finite")
    return theta.astype(np.float32)


#: the display columns :func:`level` adds to the hyperparameters (read by no estimator)
LEVEL_COLUMNS = ("rho", "rho_delivered", "epsilon", "epsilon_bs")


def level(estimator: Estimator, n: int, *, rho1: float, rho2: float, eta: float, alpha: float,
          gamma1: float = INF, gamma2: float = INF, delta: float = DELTA,
          **extra: float) -> dict[str, float]:
    """One level: the hyperparameters and display columns computed from the estimator's ledger
    (requested and delivered rho; epsilon at ``delta`` -- the experiment's ``delta`` setting,
    default the paper's 1e-5 -- by the ledger's conversion and by the paper's Bun-Steinke
    formula). The ledger is composed from the events of one step probed on a public zero-data
    batch of ``n`` records: the IV events depend on ``n`` and the hyperparameters only (not on
    the data, the iterate or the dimensions), so they are those of every step of a run."""
    hp = dp_iv.DPIVHyperparams(*(np.float64(v)
                                 for v in (rho1, rho2, eta, alpha, gamma1, gamma2, delta)))
    led = estimator.ledger(n, hp, _probe(estimator, n, hp))
    rho_req = led.requested.rho if led.requested is not None else INF
    rho_del = led.guarantee.rho if hasattr(led.guarantee, "rho") else INF
    from dpjax.accounting import zcdp_to_approx_dp

    return {
        "rho1": float(rho1), "rho2": float(rho2), "eta": float(eta), "alpha": float(alpha),
        "gamma1": float(gamma1), "gamma2": float(gamma2),
        "rho": float(rho_req), "rho_delivered": float(rho_del),
        "epsilon": float(led.approx_dp.epsilon), "delta": float(delta),
        "epsilon_bs": float(zcdp_to_approx_dp(rho_del, delta, "bun-steinke").epsilon),
        **{k: float(v) for k, v in extra.items()},
    }


def _probe(estimator: Estimator, n: int, hp: dp_iv.DPIVHyperparams):
    # q = p = 1 and z = 1 (so that the 2SLS baseline is well posed): the events do not depend on
    # the dimensions or the data.
    batch = IVData(jnp.ones((n, 1)), jnp.zeros((n, 1)), jnp.zeros((n,)))
    return probe_events(estimator, batch, (jnp.zeros((1, 1)), jnp.zeros((1,))), hp)


def horizon_setting(key: str, method: str, estimator: Estimator, model: LinearIV, truth,
                    n: int, T: int, levels: tuple[dict[str, float], ...]) -> Setting:
    """A setting that runs ``estimator`` (horizon ``T``) and records only its final iterate."""
    return Setting(
        key=key,
        columns={"method": method, "n": n, "d": model.p, "s": model.p, "p": model.p,
                 "q": model.q, "r": model.r, "T": T},
        estimator=tracked(estimator), simulate=model.simulate,
        init=ZeroInit(model.q, model.p), record=IVRecord(model.p), truth=truth,
        plan=DataPlan(1, n), hparams_type=dp_iv.DPIVHyperparams, levels=levels, n=n,
        final_only=True,
    )
