"""Wang & Xu (2021) LDP-IHT as published vs as rectified by Zhu et al. (ICLR 2024; spec 001
§2.5, §6.1): estimation error and audited epsilon lower bounds.

Design (Wang & Xu's own setting, where their analysis was claimed): ``x ~ Uniform{-1, 1}^d``,
``y in {-1, 1}`` with ``P(y = 1 | x) = (1 + <x, theta*>)/2`` (bounded noise ``|zeta| <= 2``),
``theta*`` ``k``-sparse with entries ``1/k``; shrinkage ``tau1 = tau2 = 1`` (inactive: the data
are already bounded), ``k' = min(8k, d)``, ``eta = 1``, ``T = ceil(c_T log n)`` equal groups of
users (Algorithm 2). The two variants differ only in the randomizer radius:
rectified ``sqrt(d) tau1 (sqrt(k') tau1 + tau2)``, published ``sqrt(d) tau1 (tau1 + tau2)``.

``plot`` also runs per-user audits (``audit.csv``; 99% Clopper-Pearson lower bounds):

* ``randomizer``: the estimator's own first round, one user, two neighbouring records with
  opposite gradients, attacked along the gradient: the privacy of the l2-ball randomizer for
  each radius (claimed: eps-LDP);
* ``gaussian``: for contrast, an *additive* Gaussian release of the same gradient calibrated to
  the range ``2 r`` of each radius (claimed: (eps, 1e-5)-LDP), on two admissible records whose
  gradients differ by more than the published range (``d = 64``, ``k' = 32``).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import audit, sweep
from dpjax import local_randomizers as LR
from dpjax.algorithms import ldp_sparse as L
from dpjax.config import Config, param
from dpjax.experiments._common import ZeroInit
from dpjax.experiments._ldp_common import fit_slope, loglog_figure, record_iht, select
from dpjax.mechanisms import BoundedStatistic
from dpjax.models import sparse_lr as M
from dpjax.results import write_csv
from dpjax.study import Experiment

VARIANTS = ("rectified", "wang_xu_2021_literal")


@dataclasses.dataclass(frozen=True)
class WangXuConfig(Config):
    d: int = param(20, ge=2, le=256, doc="dimension")
    k: int = param(2, ge=1, doc="sparsity of theta* (entries 1/k)")
    n_grid: tuple[int, ...] = param((100_000, 300_000, 1_000_000), ge=1000,
                                    doc="numbers of users")
    eps_grid: tuple[float, ...] = param((0.5, 1.0, 2.0, math.inf), gt=0, allow_inf=True,
                                        doc="each user's epsilon (inf: identity randomizer)")
    c_t: float = param(0.5, gt=0, doc="T = ceil(c_T log n) rounds")
    audit_trials: int = param(100_000, ge=1000, doc="trials per record of each audit")
    audit_eps: float = param(1.0, gt=0, le=1, doc="epsilon of the audited releases")
    theta_seed: int = param(0, ge=0, doc="seed of theta*")

    def check(self) -> None:
        if self.k > self.d:
            raise ValueError(f"--set k: must be <= d = {self.d}; got {self.k}")


DEFAULTS = WangXuConfig()
QUICK = dataclasses.replace(DEFAULTS, n_grid=(100_000,), eps_grid=(1.0, math.inf),
                            audit_trials=20_000)


def _theta(c) -> np.ndarray:
    return np.asarray(M.sparse_theta(jax.random.key(c["theta_seed"]), c["d"], c["k"]))


def _rounds(c, n: int) -> int:
    return max(1, math.ceil(c["c_t"] * math.log(n)))


def settings(c):
    theta = _theta(c)
    kp = min(8 * c["k"], c["d"])
    out = []
    for n in c["n_grid"]:
        T = _rounds(c, n)
        m = n // T
        levels = tuple({"epsilon": e, "tau1": 1.0, "tau2": 1.0, "eta": 1.0}
                       for e in c["eps_grid"])
        for variant in VARIANTS:
            out.append(sweep.Setting(
                key=f"ldp_wangxu,{variant},n={T * m},d={c['d']},k={c['k']}",
                columns={"method": variant, "n": T * m, "d": c["d"], "k": c["k"], "T": T},
                estimator=L.ldp_iht(T, kp, variant=variant, batching="disjoint"),
                simulate=M.HardInstanceModel(), init=ZeroInit(), record=record_iht,
                truth=theta, plan=sweep.DataPlan(num_blocks=T, block_size=m),
                hparams_type=L.IHTHyperparams, levels=levels, n=T * m, final_only=True))
    return out


def audits(c, seed: int = 0) -> list[dict]:
    """The per-user audits of the module docstring, one row per (release, variant)."""
    d, eps, kp = c["d"], c["audit_eps"], min(8 * c["k"], c["d"])
    key = jax.random.key(seed)
    rows = []
    # (1) the estimator's first round (theta_0 = 0), one user: records (tau1 1, -tau2) and
    # (tau1 1, +tau2) have opposite gradients; tau1 << tau2 puts both near the ball's surface
    tau1, tau2 = 0.01, 1.0
    rec_in = (jnp.full((1, d), tau1), jnp.full((1,), -tau2))
    rec_out = (rec_in[0], jnp.full((1,), tau2))
    direction = jnp.ones(d) / math.sqrt(d)
    hp = L.IHTHyperparams(*map(jnp.float32, (eps, tau1, tau2, 1.0)))
    for i, variant in enumerate(VARIANTS):
        est = L.ldp_iht(1, kp, variant=variant, batching="disjoint")

        def release(k, data, est=est):
            return est.step(k, est.init(jnp.zeros(d)), data, hp)[0].beta

        res = audit.audit(release, jax.random.fold_in(key, i), rec_in, rec_out,
                          lambda out: jnp.dot(out, direction), num_trials=c["audit_trials"],
                          delta=0.0, confidence=0.99, batch_size=20_000)
        rows.append({"release": "randomizer (Alg 2 round)", "variant": variant,
                     "claimed_epsilon": eps, "delta": 0.0,
                     "radius": LR.ldp_iht_radius(d, kp, tau1, tau2, variant=variant),
                     "epsilon_lower": res.epsilon_lower, "p_in": res.p_in, "p_out": res.p_out,
                     "violates": res.violates(eps)})
    # (2) additive Gaussian noise calibrated to 2 r: records at the worst-case iterate, in a
    # fixed dimension 64 with k' = 32 (the published range is then 3.7x too small)
    d, kp, tau1, tau2, delta = 64, 32, 1.0, 0.1, 1e-5
    theta = jnp.zeros(d).at[:kp].set(1 / math.sqrt(kp))
    rec_a = (jnp.full(d, tau1), jnp.float32(-tau2))
    rec_b = (jnp.full(d, tau1).at[kp:].set(-tau1), jnp.float32(-tau2))

    def grad(rec):
        x, y = rec
        return x * (jnp.dot(theta, x) - y)

    diff = grad(rec_a) - grad(rec_b)
    for i, variant in enumerate(VARIANTS):
        r = LR.ldp_iht_radius(d, kp, tau1, tau2, variant=variant)

        def mech(k, rec, r=r):
            stat = BoundedStatistic(grad(rec), jnp.float32(2 * r), "l2", "local")
            return LR.local_gaussian(k, stat, eps, delta).value

        res = audit.audit(mech, jax.random.fold_in(key, 10 + i), rec_a, rec_b,
                          lambda out: jnp.dot(out, diff), num_trials=c["audit_trials"],
                          delta=delta, confidence=0.99, batch_size=20_000)
        rows.append({"release": "additive Gaussian at range 2r (contrast)", "variant": variant,
                     "claimed_epsilon": eps, "delta": delta, "radius": r,
                     "epsilon_lower": res.epsilon_lower, "p_in": res.p_in, "p_out": res.p_out,
                     "violates": res.violates(eps)})
    return rows


def slopes(summary) -> list[dict]:
    out = []
    for variant in VARIANTS:
        for eps in sorted({r["epsilon"] for r in summary}):
            rows = sorted(select(summary, method=variant, epsilon=eps), key=lambda r: r["n"])
            if len(rows) >= 2 and math.isfinite(eps):
                s, lo, hi = fit_slope([r["n"] for r in rows], [r["mean"] for r in rows],
                                      [r["se"] for r in rows])
                out.append({"variant": variant, "epsilon": eps, "points": len(rows),
                            "slope_n": s, "ci_low": lo, "ci_high": hi, "theory": -0.5})
    return out


def plot(iter_rows, summary, c, path):
    del iter_rows
    curves = []
    for variant in VARIANTS:
        for eps in c["eps_grid"]:
            rows = sorted(select(summary, method=variant, epsilon=float(eps)),
                          key=lambda r: r["n"])
            label = f"{'rectified' if variant == 'rectified' else 'published'}, " + (
                "identity randomizer" if math.isinf(eps) else f"eps={eps:g}")
            curves.append((label, [r["n"] for r in rows], [r["mean"] for r in rows],
                           [r["se"] for r in rows], "-" if variant == "rectified" else "-.",
                           "nonprivate" if math.isinf(eps) else "dp"))
    ns = sorted({r["n"] for r in summary})
    refs = [("lower bound rate sqrt(dk/(n eps^2)), eps=1", ns,
             [M.lower_bound_interactive(n, c["d"], c["k"], 1.0) for n in ns])]
    loglog_figure(curves, path, f"LDP-IHT (Alg 2) on x ~ U{{-1,1}}^{c['d']}, k={c['k']}: "
                  "Wang & Xu radius (dash-dot) vs rectified (solid)", "n (users)", refs=refs,
                  hline=float(np.linalg.norm(_theta(c))))
    write_csv(Path(path).with_name("slopes.csv"), slopes(summary))
    write_csv(Path(path).with_name("audit.csv"), audits(c))


EXPERIMENTS = [
    Experiment(
        name="ldp_wangxu",
        title="LDP-IHT: Wang & Xu (2021) published radius vs rectified (Zhu et al. 2024)",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        reps=10, quick_reps=3,
        description="Error vs n and epsilon on Wang & Xu's design; per-user audits of both "
        "radii in audit.csv. See experiments/reports/ldp_wangxu.md.",
    )
]
