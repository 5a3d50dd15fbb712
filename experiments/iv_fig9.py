"""Figure 9 of Liang et al. (App. G.3, spec 004 §4.7): non-private 2S-GD vs 2SLS against n.

Settings (paper): p = q = r = 20, n from 500 to 5000; 2S-GD (Algorithm 2) with T = 100;
metric ||beta^(T) - beta|| for 2S-GD and ||beta_hat - beta|| for 2SLS; 100 runs; the paper's
step sizes (tau = 5, from the true Theta, psi = 0).

Unstated, chosen here: n in {500, 1000, 2000, 3000, 4000, 5000} (spec 004 §6 B2). Added: 2S-GD
with T = 1000 (same steps), which shows that the gap at T = 100 is non-convergence of GD with
the conservative alpha on an ill-conditioned Theta, not a rate gap: the fixed point of 2S-GD is
2SLS exactly (spec 004 §6 A3). ``error_2sls`` = ||beta^(T) - beta_hat_2SLS||.
"""

from __future__ import annotations

import dataclasses

from dpjax.algorithms import dp_iv
from dpjax.config import param
from dpjax.experiments._common import INF, final_rows
from dpjax.experiments._iv_common import (
    LEVEL_COLUMNS,
    IVConfig,
    horizon_setting,
    level,
    parameters,
)
from dpjax.models.iv import LinearIV
from dpjax.plotting import Curve, Panel, plot_panels
from dpjax.study import Experiment


@dataclasses.dataclass(frozen=True)
class Fig9Config(IVConfig):
    dim: int = param(20, ge=1, doc="p = q = r")
    n_grid: tuple[int, ...] = param((500, 1000, 2000, 3000, 4000, 5000), ge=10,
                                    doc="the sample sizes")
    T_grid: tuple[int, ...] = param((100, 1000), ge=1, doc="the horizons T of 2S-GD")
    tau: float = param(5.0, ge=0, doc="tail parameter of the step sizes")
    param_seed: int = param(0, ge=0, doc="seed of the true parameters")
    theta_file: str = param("", doc="a .npy file with the first-stage Theta (q x p) to use "
                            "instead of the one drawn from param_seed (empty: draw it)")


DEFAULTS = Fig9Config()
QUICK = dataclasses.replace(DEFAULTS, n_grid=(500, 2000), T_grid=(100,))


def settings(c):
    d = c["dim"]
    model = LinearIV(d, d, d)
    prm, truth = parameters(model, c["param_seed"], c["theta_file"])
    out = []
    for n in c["n_grid"]:
        s = dp_iv.paper_step_sizes(prm.theta, n, c["tau"])
        common = dict(rho1=INF, rho2=INF, eta=s.eta, alpha=s.alpha, delta=c["delta"])
        for T in c["T_grid"]:
            gd = dp_iv.two_stage_gd(T)
            out.append(horizon_setting(f"gd,T={T},n={n}", gd.name, gd, model, truth, n, T,
                                       (level(gd, n, **common),)))
    return out


def plot(iter_rows, summary, c, path):
    cols = ["tab:blue", "tab:green", "tab:purple"]
    # every curve here is non-private: 2S-GD (dashed, one colour per T) against 2SLS
    curves = [Curve(f"2S-GD, T = {T}" + (" (paper)" if T == 100 else " (added)"),
                    {"method": "2s-gd", "T": T}, cols[i % 3], "-", "o", role="nonprivate")
              for i, T in enumerate(c["T_grid"])]
    # 2SLS is a closed form, computed on each data set as a diagnostic (error_of_2sls)
    T0 = c["T_grid"][0]
    curves.append(Curve("2SLS (closed form, same data)", {"method": "2s-gd", "T": T0},
                        marker="s", y="error_of_2sls", role="reference"))
    model = LinearIV(c["dim"], c["dim"], c["dim"])
    prm, _ = parameters(model, c["param_seed"], c["theta_file"])
    import numpy as np

    sv = np.linalg.svd(prm.theta, compute_uv=False)
    plot_panels(final_rows(iter_rows), [Panel(
        f"sigma_min(Theta) = {sv[-1]:.3f}, ||Theta|| = {sv[0]:.2f}",
        curves, x="n", xlabel="n", logx=True)], path, ylabel="mean ||beta - beta_true||_2",
        suptitle=f"2S-GD vs 2SLS (spec 004 Fig. 9)\np = q = r = {c['dim']}")


EXPERIMENTS = [
    Experiment(
        name="iv_fig9",
        title="DP-IV paper, Figure 9: non-private 2S-GD (T = 100) vs 2SLS against n",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        level_columns=LEVEL_COLUMNS,
        reps=100, quick_reps=5,
        summary_extra=("error_2sls", "error_of_2sls"),
        description="p = q = r = 20, n from 500 to 5000, plus 2S-GD at T = 1000. See "
        "experiments/reports/iv_fig9.md.",
    )
]
