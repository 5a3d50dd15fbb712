"""Pieces shared by the DP gradient EM experiments (spec 002, Wang, Ding, Xie, Pan & Xu).

The reproduction protocol of spec 002 §4.3 (the paper states SNR = 3, eps in {0.2, 0.5, 1},
delta = 1/n, T = 22 and "random initialisation"; everything else is ours):

* ``sigma = 1``, ``beta* = (3 / sqrt(d)) 1_d`` (SNR ``||beta*|| / sigma = 3``); RMC ``p_m = 0.1``;
* ``beta0 ~ N(0, (||beta*||^2 / d) I_d)``, data-independent (spec 002 §2.8);
* ``eta = 1`` (``2 / (mu + v)``), ``zeta = 0.05``, ``s`` by the sigma-consistent rule (A1);
* ``tau`` (a public input of the algorithms, never estimated from the data) by the oracle bound
  of :func:`oracle_tau` (spec 002 §2.8, A8);
* every method of a setting sees the same data sets and starting values (one data group per
  model, n and d), and the metric is recorded raw and sign-aligned (A13).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.algorithms import dp_gem, ldp_gem
from dpjax.config import Config, ConfigError, param
from dpjax.models import GaussianMixture, MixtureOfRegressions, RegressionMissingCovariates
from dpjax.sweep import DataPlan, Setting

INF = math.inf
MODELS = ("gmm", "mrm", "rmc")
METHODS = ("dp-gem", "clipped-gem", "dp-em-exact", "dp-gem-split", "ldp-gem")
MODEL_TITLES = {"gmm": "Gaussian mixture", "mrm": "mixture of regressions",
                "rmc": "regression with missing covariates"}
METHOD_LABELS = {"dp-gem": "Alg 2 (DP gradient EM)", "clipped-gem": "Alg 1 (clipped)",
                 "dp-em-exact": "Alg 3 (DP EM)", "dp-gem-split": "Alg 2, sample split (ours)",
                 "ldp-gem": "local-DP gradient EM (ours)"}
# every level carries every field (0 where a method does not read it): uniform result columns
LEVEL_FIELDS = ("epsilon", "delta", "eta", "tau", "zeta", "s", "clip")
# the family's study: repetitions (default, --quick) and the sign-aligned error summarised too
# "clip" is a column of every level (0 where the method has no clipping norm)
STUDY = dict(reps=20, quick_reps=2, summary_extra=("error_sym",), level_columns=("clip",))


def make_model(name: str, sigma: float, p_m: float) -> Any:
    if name == "gmm":
        return GaussianMixture(sigma)
    if name == "mrm":
        return MixtureOfRegressions(sigma)
    if name == "rmc":
        return RegressionMissingCovariates(sigma, p_m)
    raise ConfigError(f"--set model: must be one of {', '.join(MODELS)}; got {name!r}")


def dense_beta(d: int, snr: float, sigma: float) -> np.ndarray:
    """``beta* = (snr sigma / sqrt(d)) 1_d``: ``||beta*|| / sigma = snr`` (spec 002 §4.3)."""
    return np.full(d, snr * sigma / math.sqrt(d), np.float32)


def oracle_tau(model: str, truth: np.ndarray, sigma: float, p_m: float) -> float:
    """The public bound ``tau`` on ``E (grad_j q_i)^2`` (spec 002 §2.8; A8: dimension-free).

    * GMM: ``||beta*||_inf^2 + sigma^2`` (the spec's simple form; also bounds ``E f_ij^2`` of the
      M-step terms of Algorithm 3);
    * MRM: ``2 (||b||^2 + 2 ||b||_inf^2 + sigma^2) + 2 (||b||^2 + 2 ||b||_inf^2)`` at
      ``b = beta*`` (the spec's bound with ``beta`` in the ball at the truth);
    * RMC: the spec gives no closed form: twice the largest coordinate second moment at
      ``beta*``, computed from 200,000 records *simulated from the model* (a public computation,
      no private data) with a fixed key.
    """
    b2, binf2 = float(np.sum(truth**2)), float(np.max(np.abs(truth))) ** 2
    if model == "gmm":
        return binf2 + sigma**2
    if model == "mrm":
        return 2 * (b2 + 2 * binf2 + sigma**2) + 2 * (b2 + 2 * binf2)
    m = make_model(model, sigma, p_m)
    beta = jnp.asarray(truth)
    g = m.per_sample_gradients(beta, m.simulate(jax.random.key(20201026), 200_000, beta))
    return 2.0 * float(jnp.max(jnp.mean(jnp.square(g), axis=0)))


@dataclasses.dataclass(frozen=True)
class RandomInit:
    """``beta0 ~ N(0, (||beta*||^2 / d) I_d)`` (spec 002 §2.8), data-independent."""

    def __call__(self, key: jax.Array, truth: jax.Array) -> jax.Array:
        scale = jnp.linalg.norm(truth) / math.sqrt(truth.shape[0])
        return scale * jax.random.normal(key, truth.shape, truth.dtype)


@dataclasses.dataclass(frozen=True)
class GemError:
    """``error = ||beta - beta*||`` and ``error_sym = min(||beta - beta*||, ||beta + beta*||)``
    (spec 002 A13: GMM and MRM identify ``beta*`` only up to sign)."""

    def __call__(self, state, truth: jax.Array) -> dict[str, jax.Array]:
        err = jnp.linalg.norm(state.beta - truth)
        return {"error": err, "error_sym": jnp.minimum(err, jnp.linalg.norm(state.beta + truth))}


def gem_level(epsilon: float, n: int, tau: float, c: Mapping[str, Any], clip: float = 0.0
              ) -> dict[str, float]:
    """One level: ``delta = 1/n`` (the paper), the configured ``eta``, ``zeta``, and ``tau``."""
    return {"epsilon": epsilon, "delta": 1.0 / n, "eta": c["eta"], "tau": tau,
            "zeta": c["zeta"], "s": 0.0, "clip": clip}


def method_setting(method: str, model_name: str, n: int, d: int, levels: Sequence[dict],
                   c: Mapping[str, Any], T: int) -> Setting:
    """One compiled shape: ``method`` on ``model_name`` with ``n`` records in dimension ``d``,
    ``T`` iterations; the data group is shared by every method at (model, n, d)."""
    model = make_model(model_name, c["sigma"], c["p_m"])
    if method == "dp-gem":
        est, hp_type = dp_gem.dp_gem(model, T, calibration="paper"), dp_gem.DPGEMHyperparams
    elif method == "dp-gem-split":
        est = dp_gem.dp_gem(model, T, sample_split=True, calibration="paper")
        hp_type = dp_gem.DPGEMHyperparams
    elif method == "clipped-gem":
        est, hp_type = dp_gem.clipped_gem(model, T, "paper"), dp_gem.ClippedGEMHyperparams
    elif method == "dp-em-exact":
        est = dp_gem.dp_exact_em(model, T, calibration="paper")
        hp_type = dp_gem.DPEMExactHyperparams
    elif method == "ldp-gem":  # one disjoint user group per round, generated round by round
        est = ldp_gem.ldp_gem(model, T, batching="disjoint", calibration="paper")
        hp_type = ldp_gem.LDPGEMHyperparams
    else:
        raise ConfigError(f"--set methods: must be among {', '.join(METHODS)}; got {method!r}")
    split = method in ("dp-gem-split", "ldp-gem")
    return Setting(
        key=f"{method},{model_name},n={n},d={d},T={T}",
        columns={"method": method, "model": model_name, "n": n, "d": d, "T": T},
        estimator=est, simulate=model.simulate, init=RandomInit(), record=GemError(),
        truth=dense_beta(d, c["snr"], c["sigma"]),
        plan=DataPlan(T, n // T) if split else DataPlan(1, n),
        hparams_type=hp_type, levels=tuple(levels),
        n=T * (n // T) if method == "ldp-gem" else n,  # the users the groups hold
        data_group=f"{model_name},n={n},d={d}",
    )


@dataclasses.dataclass(frozen=True)
class GemConfig(Config):
    """The three-panel design of spec 002 §4.3 (vary epsilon, d, n; the others at their base)."""

    model: str = param("gmm", choices=MODELS, doc="the model (gmm, mrm, rmc)")
    methods: tuple[str, ...] = param(("dp-gem", "clipped-gem"), choices=METHODS,
                                     doc="the private methods (each with its own curves)")
    sigma: float = param(1.0, gt=0, doc="noise standard deviation")
    snr: float = param(3.0, gt=0, doc="||beta*|| / sigma (the paper: 3)")
    p_m: float = param(0.1, ge=0, lt=1, doc="RMC: probability that a covariate is missing")
    eps_grid: tuple[float, ...] = param((0.2, 0.5, 1.0), gt=0,
                                        doc="panel (a): the epsilons (at n_base, d_base)")
    d_grid: tuple[int, ...] = param((5, 10, 20, 40), ge=1,
                                    doc="panel (b): the dimensions (at n_base, eps_base)")
    n_grid: tuple[int, ...] = param((10000, 30000, 100000, 300000), ge=100,
                                    doc="panel (c): the sample sizes (at d_base, eps_base)")
    eps_base: float = param(0.5, gt=0, doc="the epsilon of panels (b) and (c)")
    d_base: int = param(10, ge=1, doc="the dimension of panels (a) and (c)")
    n_base: int = param(100000, ge=100, doc="the sample size of panels (a) and (b)")
    T: int = param(22, ge=1, doc="iterations (the paper: 22; Fig 9: 5)")
    eta: float = param(1.0, gt=0, doc="step size of gradient EM (theory: 1)")
    zeta: float = param(0.05, gt=0, lt=1, doc="failure probability (sets beta_s)")
    tau_scale: float = param(1.0, gt=0, doc="tau = tau_scale * the oracle bound")
    clip: float = param(1.0, gt=0, doc="Algorithm 1's clipping norm C (the paper: 1)")
    non_private: bool = param(True, doc="add each method's eps = inf level (non-private EM)")

    def check(self) -> None:
        if self.model != "gmm" and "dp-em-exact" in self.methods:
            raise ConfigError("--set methods: dp-em-exact (Algorithm 3) needs --set model=gmm")
        if "dp-gem-split" in self.methods and min(*self.n_grid, self.n_base) < self.T:
            raise ConfigError("--set n_grid: dp-gem-split needs n >= T")


def design_pairs(c: Mapping[str, Any]) -> dict[tuple[int, int], set[float]]:
    """(n, d) -> the epsilons the three panels need."""
    need: dict[tuple[int, int], set[float]] = {}
    need.setdefault((c["n_base"], c["d_base"]), set()).update(c["eps_grid"])
    for d in c["d_grid"]:
        need.setdefault((c["n_base"], d), set()).add(c["eps_base"])
    for n in c["n_grid"]:
        need.setdefault((n, c["d_base"]), set()).add(c["eps_base"])
    return need


def design_settings(c: Mapping[str, Any]) -> list[Setting]:
    """Every method at every (n, d) of :func:`design_pairs`; Algorithm 1 at ``C = clip``."""
    out = []
    for (n, d), epss in sorted(design_pairs(c).items()):
        tau = c["tau_scale"] * oracle_tau(c["model"], dense_beta(d, c["snr"], c["sigma"]),
                                          c["sigma"], c["p_m"])
        for method in c["methods"]:
            eps = sorted(epss) + ([INF] if c["non_private"] and method != "clipped-gem" else [])
            clip = c["clip"] if method == "clipped-gem" else 0.0
            levels = [gem_level(e, n, tau, c, clip) for e in eps]
            out.append(method_setting(method, c["model"], n, d, levels, c, c["T"]))
    return out


def fit_loglog(xs: Sequence[float], means: Sequence[float], ses: Sequence[float]
               ) -> tuple[float, float]:
    """Weighted least-squares slope of ``log mean`` on ``log x`` and its standard error
    (delta method: ``se(log mean) = se / mean``)."""
    x, m, se = (np.asarray(v, np.float64) for v in (xs, means, ses))
    lx, ly = np.log(x), np.log(m)
    w = 1.0 / np.maximum(se / m, 1e-12) ** 2
    X = np.stack([np.ones_like(lx), lx], 1)
    cov = np.linalg.inv(X.T @ (w[:, None] * X))
    coef = cov @ X.T @ (w * ly)
    # scale by the residual variance when the fit is worse than the error bars say
    dof = max(len(x) - 2, 1)
    chi2 = float(np.sum(w * (ly - X @ coef) ** 2)) / dof
    return float(coef[1]), float(math.sqrt(cov[1, 1] * max(chi2, 1.0)))
