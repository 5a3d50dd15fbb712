"""Algorithm 1 with heavy-tailed responses (Zhu et al., ICLR 2024, Theorem 5; spec 001 §2.2):
error against n for Student-t regression noise, beside the rate ``n^{-(p-1)/(2p)}``.

Our design: ``x ~ N(0, I_d)``, ``theta*`` ``k``-sparse with entries ``1/k``,
``y = <theta*, x> + noise_sd * t_df``. With ``df`` degrees of freedom ``E|y|^{2p} < inf`` for
``2p < df``; each ``df`` is paired with a moment order ``p`` (config ``p_grid``). Parameters of
Theorem 5 (:func:`dpjax.algorithms.ldp_sparse.heavy_tailed_hparams`): ``tau2 = c_tau2
(n eps^2 / log d)^{1/(2p)}`` grows with ``n``; ``tau1``, ``r`` as in Theorem 3. Levels:
``lambda`` of Theorem 5 (times ``c_lam``) and ``lambda = 0`` at each ``epsilon``, and
``epsilon = inf``. With ``lambda = 0`` the noise term is ``~ tau2 / sqrt(n) ~ n^{-(p-1)/(2p)}``,
the theorem's n-slope. ``plot`` writes the fitted slopes to ``slopes.csv``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import numpy as np

from dpjax import sweep
from dpjax.algorithms import ldp_sparse as L
from dpjax.config import Config, param
from dpjax.experiments._common import ZeroInit
from dpjax.experiments._ldp_common import fit_slope, loglog_figure, record_nldp, select
from dpjax.models import sparse_lr as M
from dpjax.results import write_csv
from dpjax.study import Experiment

# the paper's Gaussian calibration (classic where a release's epsilon <= 1), passed by name so
# the committed report regenerates unchanged (the estimators' default is "analytic")
CLASSIC = "classic-or-analytic"


@dataclasses.dataclass(frozen=True)
class HeavyConfig(Config):
    d: int = param(4, ge=2, le=64, doc="dimension")
    k: int = param(2, ge=1, doc="sparsity of theta* (entries 1/k)")
    n_grid: tuple[int, ...] = param((1_000_000, 3_000_000, 10_000_000), ge=1000,
                                    doc="numbers of users")
    df_grid: tuple[float, ...] = param((3.0, 5.0), gt=2, doc="Student-t degrees of freedom")
    p_grid: tuple[float, ...] = param((1.4, 2.4), gt=1, doc="moment order p per df (2p < df)")
    eps_grid: tuple[float, ...] = param((1.0,), gt=0, le=2, doc="each user's epsilon")
    delta: float = param(1e-5, gt=0, lt=1, doc="each user's delta")
    c_r: float = param(0.3, gt=0, doc="r = c_r sqrt(d log n)")
    c_tau: float = param(math.sqrt(2), gt=0, doc="tau1 = c_tau sqrt(log n)")
    c_tau2: float = param(0.25, gt=0, doc="tau2 = c_tau2 (n eps^2 / log d)^(1/(2p))")
    c_lam: float = param(0.05, ge=0, doc="lambda = c_lam x Theorem 5's rate")
    noise_sd: float = param(0.5, ge=0, doc="scale of the t noise")
    chunk: int = param(1_000_000, ge=1000, doc="users per streamed chunk")
    theta_seed: int = param(0, ge=0, doc="seed of theta*")

    def check(self) -> None:
        if len(self.p_grid) != len(self.df_grid):
            raise ValueError("--set p_grid: needs one p per entry of df_grid")
        for df, p in zip(self.df_grid, self.p_grid):
            if not 2 * p < df:
                raise ValueError(f"--set p_grid: E|y|^(2p) is finite only for 2p < df; got "
                                 f"p = {p:g} with df = {df:g}")
        if self.k > self.d:
            raise ValueError(f"--set k: must be <= d = {self.d}; got {self.k}")


DEFAULTS = HeavyConfig()
QUICK = dataclasses.replace(DEFAULTS, n_grid=(100_000, 300_000), df_grid=(3.0,),
                            p_grid=(1.4,))


def _theta(c) -> np.ndarray:
    return np.asarray(M.sparse_theta(jax.random.key(c["theta_seed"]), c["d"], c["k"]))


def settings(c):
    theta = _theta(c)
    out = []
    for df, p in zip(c["df_grid"], c["p_grid"]):
        for n in c["n_grid"]:
            chunks = max(1, n // c["chunk"])
            block = n // chunks
            n_eff = chunks * block
            levels = []
            for eps in (*c["eps_grid"], math.inf):
                hp = L.heavy_tailed_hparams(n_eff, c["d"], eps, c["delta"], p, c_r=c["c_r"],
                                            c_tau=c["c_tau"], c_tau2=c["c_tau2"],
                                            c_lam=c["c_lam"])
                lv = {f: float(v) for f, v in zip(L.NLDPHyperparams._fields, hp)}
                if math.isinf(eps):  # same tau2 as the private levels, no noise, lambda = 0
                    lv["tau2"] = levels[0]["tau2"]
                    levels.append(lv)
                else:
                    levels += [lv, lv | {"lam": 0.0}]
            out.append(sweep.Setting(
                key=f"ldp_heavy,df={df:g},n={n_eff},d={c['d']}",
                columns={"method": "alg1", "df": df, "p": p, "n": n_eff, "d": c["d"],
                         "k": c["k"]},
                estimator=L.nldp(chunks, calibration=CLASSIC),
                simulate=M.SparseLinearModel(noise_sd=c["noise_sd"], df=df), init=ZeroInit(),
                record=record_nldp, truth=theta,
                plan=sweep.DataPlan(num_blocks=chunks, block_size=block),
                hparams_type=L.NLDPHyperparams, levels=tuple(levels), n=n_eff,
                final_only=True))
    return out


def _rows(summary, df, eps, thresholded):
    rows = [r for r in select(summary, df=df, epsilon=eps)
            if (r["lam"] > 0) == thresholded or math.isinf(eps)]
    return sorted(rows, key=lambda r: r["n"])


def slopes(summary, c) -> list[dict]:
    out = []
    for df, p in zip(c["df_grid"], c["p_grid"]):
        for eps in c["eps_grid"]:
            for thr in (True, False):
                rows = [r for r in _rows(summary, df, eps, thr) if r["indefinite_mean"] == 0]
                if len(rows) >= 2:
                    s, lo, hi = fit_slope([r["n"] for r in rows], [r["mean"] for r in rows],
                                          [r["se"] for r in rows])
                    out.append({"df": df, "p": p, "epsilon": eps,
                                "lambda": "Thm 5 rule" if thr else "0", "points": len(rows),
                                "slope_n": s, "ci_low": lo, "ci_high": hi,
                                "theory": -(p - 1) / (2 * p)})
    return out


def plot(iter_rows, summary, c, path):
    del iter_rows
    curves = []
    for df, p in zip(c["df_grid"], c["p_grid"]):
        for eps in (*c["eps_grid"], math.inf):
            for thr in ((True, False) if math.isfinite(eps) else (False,)):
                rows = _rows(summary, df, eps, thr)
                label = f"t_{df:g} (p={p:g}), " + ("non-private" if math.isinf(eps) else
                                                   f"eps={eps:g}, lambda="
                                                   + ("Thm 5" if thr else "0"))
                curves.append((label, [r["n"] for r in rows], [r["mean"] for r in rows],
                               [r["se"] for r in rows], "-" if thr else ":",
                               "nonprivate" if math.isinf(eps) else "dp"))
    loglog_figure(curves, path, f"Alg 1, heavy-tailed responses, d={c['d']}, k={c['k']}",
                  "n (users)", hline=float(np.linalg.norm(_theta(c))))
    write_csv(Path(path).with_name("slopes.csv"), slopes(summary, c))


EXPERIMENTS = [
    Experiment(
        name="ldp_heavy",
        title="LDP sparse regression, Algorithm 1 with heavy-tailed (Student-t) responses",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        reps=5, quick_reps=3,
        summary_extra=("indefinite",),
        description="Theorem 5's parameters; n-slopes against -(p-1)/(2p) in slopes.csv. See "
        "experiments/reports/ldp_heavy.md.",
    )
]
