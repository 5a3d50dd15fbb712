"""The three private 1-D heavy-tailed mean estimators of spec 002 (§2.2, §2.3; check 8).

The paper has no such experiment (its improvement over Wang et al. 2020 is only theoretical):
this is the first. Data: ``x = mu + t_3`` (Student-t with 3 degrees of freedom: finite variance
3, infinite fourth moment) or ``x = Lomax(alpha = 3)`` (Pareto II, finite variance); ``tau`` is
the true ``E x^2`` (a public input). Estimators (``dpjax.robust_mean``):

* ``wang2020``: mechanism (13) with the paper's Lemma 2 parameters (Holland's non-private ``s``,
  ``beta = 2 log(1/zeta)``); predicted error ``sqrt(tau / n) (1 + c / eps)``: n-slope -1/2 and,
  where the noise dominates, eps-slope -1;
* ``thm2``: mechanism (13) with the paper's Theorem 2 ``s`` (re-balanced against the noise):
  n-slope -1/2, eps-slope -1/2;
* ``local``: the local mechanism (each user releases ``psi(x_i) + N(0, sigma_loc^2)``) with the
  corrected ``s`` of spec 002 A5: n-slope -1/4, eps-slope -1/2.

Each estimator is (epsilon, delta)-DP (central) or (epsilon, delta)-LDP (per user) by the
classic Gaussian calibration, proven for epsilon <= 1; ``delta = 1/n``, ``zeta = 0.05``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import robust_mean as rm
from dpjax.accounting import ApproxDP, Ledger, Release
from dpjax.base import Estimator, Padded, fold_rows
from dpjax.config import Config, param
from dpjax.experiments._common import COLORS
from dpjax.experiments._gem_common import fit_loglog
from dpjax.mechanisms import PrivacyEvent
from dpjax.models import prefix_stable
from dpjax.plotting import Claim, Curve, Panel, plot_panels
from dpjax.study import Experiment
from dpjax.sweep import DataPlan, Setting

METHODS = ("wang2020", "thm2", "local")
LABELS = {"wang2020": "central, Wang et al. 2020 (Lemma 2)", "thm2": "central, Theorem 2",
          "local": "local DP (Thm 8, corrected s)"}
PREDICTED = {"wang2020": (-0.5, -1.0), "thm2": (-0.5, -0.5), "local": (-0.25, -0.5)}
SOURCES = {"wang2020": "Lemma 2", "thm2": "Thm 2", "local": "Thm 8"}


class MeanHyperparams(NamedTuple):
    epsilon: jax.Array  # ()
    delta: jax.Array  # ()
    tau: jax.Array  # () public bound on E x^2
    zeta: jax.Array  # ()


class MeanState(NamedTuple):
    beta: jax.Array  # (1,) the released mean


class MeanInfo(NamedTuple):
    events: tuple[PrivacyEvent]  # the one release (central) or one user's release (local)


def _step(method: str, key, state, x, hp: MeanHyperparams):
    del state
    if method == "local":
        rel = rm.private_mean_local(key, x, hp.epsilon, hp.delta, hp.tau, hp.zeta)
    else:
        rel = rm.private_mean_central(key, x, hp.epsilon, hp.delta, hp.tau, hp.zeta,
                                      parameterisation=method)
    return MeanState(jnp.reshape(rel.value, (1,))), MeanInfo((rel.event,))


def _ledger(method: str, n: int, hp, events) -> Ledger:
    eps, delta = float(np.asarray(hp.epsilon)), float(np.asarray(hp.delta))
    what = ("psi_{s,beta}(x_i), each user's own report" if method == "local"
            else "(1/n) sum_i psi_{s,beta}(x_i)")
    release = Release.from_event(events[0], what, "one record" if method == "local"
                                 else f"all {n} records")
    return Ledger.build(f"dp-mean/{method}", [release], "basic",
                        relation="local" if method == "local" else "replace-one",
                        requested=ApproxDP(eps, delta),
                        notes=["classic Gaussian calibration: proven for epsilon <= 1"])


#: rows per block of the central estimators' padded step: 1-D records, so a block is 4 kB and
#: every n from 512 up shares one program
ROW_BLOCK = 1024


def _init(beta0):
    return MeanState(jnp.asarray(beta0, jnp.float32))


def _padded_step(method: str, key, state, x, hp: MeanHyperparams, sizes):
    """:func:`_step` of a central method on ``x`` padded past its ``sizes.count`` records: the
    smoothing parameters of the count, the scores added up over blocks of records up to it
    (:func:`dpjax.base.fold_rows`; a padded row is set to 0, whose score is 0), the release
    from their sum."""
    del state
    count = sizes.count.astype(jnp.float32)
    params = rm.central_parameters(count, hp.epsilon, hp.delta, hp.tau, hp.zeta, method)
    total = fold_rows(lambda rows, m: rm.psi_sums(jnp.where(m, rows, 0.0), params.s,
                                                  params.beta_smooth), x, sizes.mask, ROW_BLOCK)
    rel = rm.private_mean_central_from_sum(key, total, count, hp.epsilon, hp.delta, params)
    return MeanState(jnp.reshape(rel.value, (1,))), MeanInfo((rel.event,))


@functools.lru_cache(maxsize=8)
def mean_estimator(method: str) -> Estimator:
    """The estimator of ``method``; the central ones with a padded form (one program for
    every ``n``); the local one's per-user noise follows the padded rows, so it keeps one
    program per ``n``."""
    padded = None if method == "local" else Padded(
        f"dp-mean/{method}", _init, functools.partial(_padded_step, method), "full",
        row_block=ROW_BLOCK)
    return Estimator(f"dp-mean/{method}", _init, functools.partial(_step, method), 1, "full",
                     functools.partial(_ledger, method), padded=padded)


@dataclasses.dataclass(frozen=True)
class HeavyTailed:
    """``n`` records: ``truth[0] + t_df`` (``dist="student_t"``) or ``Lomax(alpha)``
    (``dist="lomax"``, mean ``1/(alpha - 1)``; ``truth`` must be that mean)."""

    dist: str
    shape: float

    @prefix_stable
    def __call__(self, key, n, truth):
        if self.dist == "student_t":
            return truth[0] + jax.random.t(key, self.shape, (n,), jnp.float32)
        u = jax.random.uniform(key, (n,), jnp.float32, minval=1e-12, maxval=1.0)
        return jnp.power(u, -1.0 / self.shape) - 1.0  # Lomax(alpha): (1 - U)^(-1/alpha) - 1

    def mean_and_tau(self, mu: float) -> tuple[float, float]:
        a = self.shape
        if self.dist == "student_t":
            return mu, mu**2 + a / (a - 2)
        m = 1 / (a - 1)
        return m, a / ((a - 1) ** 2 * (a - 2)) + m**2


@dataclasses.dataclass(frozen=True)
class AbsError:
    def __call__(self, state, truth):
        return {"error": jnp.abs(state.beta[0] - truth[0])}


@dataclasses.dataclass(frozen=True)
class MeanConfig(Config):
    dist: str = param("student_t", choices=("student_t", "lomax"), doc="the data distribution")
    shape: float = param(3.0, gt=2, doc="degrees of freedom (student_t) or alpha (lomax)")
    mu: float = param(1.0, doc="student_t: the true mean (lomax: 1/(alpha - 1))")
    methods: tuple[str, ...] = param(METHODS, choices=METHODS, doc="the estimators")
    n_grid: tuple[int, ...] = param((1000, 3000, 10000, 30000, 100000), ge=10,
                                    doc="panel (a): the sample sizes (at eps_base)")
    eps_grid: tuple[float, ...] = param((0.1, 0.2, 0.5, 1.0), gt=0, le=1,
                                        doc="panel (b): the epsilons (at n_base)")
    n_base: int = param(10000, ge=10, doc="the sample size of panel (b)")
    eps_base: float = param(0.5, gt=0, le=1, doc="the epsilon of panel (a)")
    zeta: float = param(0.05, gt=0, lt=1, doc="failure probability")


def _start_at_truth(key, truth):
    """The start value (unused by a one-step mean): the truth, one function for every setting
    (so settings of one program share its data program)."""
    del key
    return truth


def settings(c):
    sim = HeavyTailed(c["dist"], c["shape"])
    mean, tau = sim.mean_and_tau(c["mu"])
    need: dict[int, set[float]] = {}
    for n in c["n_grid"]:
        need.setdefault(n, set()).add(c["eps_base"])
    need.setdefault(c["n_base"], set()).update(c["eps_grid"])
    out = []
    for n, epss in sorted(need.items()):
        for m in c["methods"]:
            out.append(Setting(
                key=f"{m},n={n}", columns={"method": m, "n": n, "dist": c["dist"]},
                estimator=mean_estimator(m), simulate=sim, init=_start_at_truth,
                record=AbsError(), truth=np.array([mean], np.float32),
                plan=DataPlan(1, n), hparams_type=MeanHyperparams,
                levels=tuple({"epsilon": e, "delta": 1.0 / n, "tau": tau, "zeta": c["zeta"]}
                             for e in sorted(epss)),
                n=n, data_group=f"n={n}"))
    return out


def slopes(rows, c) -> dict[str, dict[str, tuple[float, float]]]:
    """Fitted log-log slopes of the mean absolute error against n and against epsilon."""
    from dpjax.plotting import curve_stats

    out = {}
    for m in c["methods"]:
        xn, mn, sn = curve_stats(rows, {"method": m, "epsilon": c["eps_base"]}, "n")
        xe, me, se = curve_stats(rows, {"method": m, "n": c["n_base"]}, "epsilon")
        out[m] = {"n": fit_loglog(xn, mn, sn) if len(xn) > 1 else (math.nan, math.nan),
                  "epsilon": fit_loglog(xe, me, se) if len(xe) > 1 else (math.nan, math.nan)}
    return out


def plot(iter_rows, summary, c, path):
    rows = [r for r in iter_rows if r["iteration"] == 1]
    fitted = slopes(rows, c)

    def lab(m, axis, k):
        b, se = fitted[m][axis]
        return f"{LABELS[m]}: slope {b:+.2f}±{se:.2f} (theory {PREDICTED[m][k]:+.2f})"

    pa = [Curve(lab(m, "n", 0), {"method": m, "epsilon": c["eps_base"]}, COLORS[i], "-", "o")
          for i, m in enumerate(c["methods"])]
    pb = [Curve(lab(m, "epsilon", 1), {"method": m, "n": c["n_base"]}, COLORS[i], "-", "o")
          for i, m in enumerate(c["methods"])]
    # the rates the paper proves (PREDICTED), drawn through each measured curve's first point
    ca = [Claim(f"rate n^{PREDICTED[m][0]:g}", SOURCES[m], slope=PREDICTED[m][0],
                through={"method": m, "epsilon": c["eps_base"]}, color=COLORS[i])
          for i, m in enumerate(c["methods"])]
    cb = [Claim(f"rate eps^{PREDICTED[m][1]:g}", SOURCES[m], slope=PREDICTED[m][1],
                through={"method": m, "n": c["n_base"]}, color=COLORS[i])
          for i, m in enumerate(c["methods"])]
    plot_panels(rows, [
        Panel(f"(a) eps={c['eps_base']:g}: error vs n", pa, x="n", xlabel="n", logx=True,
              claims=ca),
        Panel(f"(b) n={c['n_base']}: error vs eps", pb, x="epsilon", xlabel="epsilon",
              logx=True, claims=cb),
    ], path, ylabel="mean |mu_hat - mu|", suptitle=(
        f"Private heavy-tailed 1-D mean (spec 002 §2.2-2.3), {c['dist']}({c['shape']:g}), "
        "delta=1/n, zeta=0.05"))


DEFAULTS = MeanConfig()
EXPERIMENTS = [
    Experiment(
        name="gem_mean",
        title="DP gradient EM paper: the three private heavy-tailed 1-D means, error vs n, eps",
        defaults=DEFAULTS, settings=settings,
        quick=dataclasses.replace(DEFAULTS, n_grid=(1000,), eps_grid=(0.5, 1.0), n_base=1000),
        reps=200, quick_reps=20, plot=plot,
        description="Wang et al. 2020 (Lemma 2) and Theorem 2 central means and the local "
        "mean (corrected s, A5) on Student-t(3) data; fitted log-log slopes against theory "
        "(spec 002 check 8). Not in the paper.",
    )
]
