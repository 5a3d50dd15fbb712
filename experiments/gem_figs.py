"""The simulation figures of the DP gradient EM paper (spec 002 §4, Figures 1-4 and 6-10).

The paper's figures are images missing from the source; only the captions and the stated
settings survive (SNR 3, eps in {0.2, 0.5, 1}, delta = 1/n, T = 22 (Figs 6-8) or 5 (Fig 9),
random initialisation, clipping C = 1 after Fig 1). The grids and every unstated value follow
spec 002 §4.3 (see :mod:`dpjax.experiments._gem_common`).

* ``gem_fig1``: Algorithm 1 (clipped) for ``C in {0.1, 1, 5, 10}`` on the three models, error
  against iteration, with Algorithm 2 and non-private gradient EM.
* ``gem_fig2`` / ``gem_fig3`` / ``gem_fig4``: GMM / MRM / RMC, error against iteration, panels
  varying eps, d and n.
* ``gem_fig6`` / ``gem_fig7`` / ``gem_fig8``: the same designs, final error (T = 22) against
  eps, d and n; raw and sign-aligned (spec 002 A13).
* ``gem_fig9`` / ``gem_fig10``: Algorithm 3 (DP EM) against Algorithm 2 and non-private EM on
  the GMM: final error at T = 5 against eps, d, n; and the traces (T = 22).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dpjax.config import Config, param
from dpjax.experiments._common import COLORS, INF, final_rows
from dpjax.experiments._gem_common import (
    METHOD_LABELS,
    MODEL_TITLES,
    MODELS,
    STUDY,
    GemConfig,
    dense_beta,
    design_settings,
    gem_level,
    method_setting,
    oracle_tau,
)
from dpjax.plotting import Curve, Mark, Panel, plot_panels
from dpjax.study import Experiment

# ------------------------------------------------------------------------------------------
# Figures 2-4 and 6-10: the three-panel design
# ------------------------------------------------------------------------------------------


def _nonprivate_label(c) -> str:
    return "exact EM (non-private)" if "dp-em-exact" in c["methods"] else \
        "gradient EM (non-private)"


def _metric(c) -> str:
    return "error" if c["model"] == "rmc" else "error_sym"


def _private_methods(c):
    return list(c["methods"])


def _final_panels(c, metric: str, row: str) -> list[Panel]:
    base_nd = {"n": c["n_base"], "d": c["d_base"]}
    np_method = c["methods"][0] if c["methods"][0] != "clipped-gem" else "dp-gem"
    pa = [Curve(METHOD_LABELS[m], {"method": m, **base_nd}, COLORS[i], "-", "o", y=metric)
          for i, m in enumerate(_private_methods(c))]
    pb, pc = [], []
    for i, m in enumerate(_private_methods(c)):
        pb.append(Curve(METHOD_LABELS[m], {"method": m, "n": c["n_base"],
                                           "epsilon": c["eps_base"]}, COLORS[i], "-", "o",
                        y=metric))
        pc.append(Curve(METHOD_LABELS[m], {"method": m, "d": c["d_base"],
                                           "epsilon": c["eps_base"]}, COLORS[i], "-", "o",
                        y=metric))
    if c["non_private"]:
        lab = _nonprivate_label(c)
        pb.append(Curve(lab, {"method": np_method, "n": c["n_base"], "epsilon": INF}, "black",
                        "--", "s", y=metric))
        pc.append(Curve(lab, {"method": np_method, "d": c["d_base"], "epsilon": INF}, "black",
                        "--", "s", y=metric))
    return [
        Panel(f"{row}(a) n={c['n_base']}, d={c['d_base']}: vs eps", pa, x="epsilon",
              xlabel="epsilon", logx=True),
        Panel(f"{row}(b) n={c['n_base']}, eps={c['eps_base']:g}: vs d", pb, x="d",
              xlabel="d", logx=True),
        Panel(f"{row}(c) d={c['d_base']}, eps={c['eps_base']:g}: vs n", pc, x="n",
              xlabel="n", logx=True),
    ]


def plot_final(iter_rows, summary, c, path):
    rows = final_rows(iter_rows)
    np_method = c["methods"][0] if c["methods"][0] != "clipped-gem" else "dp-gem"
    metrics = [("error", "raw ||beta^T - beta*||: ")]
    if c["model"] != "rmc":
        metrics.append(("error_sym", "sign-aligned: "))
    panels = []
    for metric, row in metrics:
        ps = _final_panels(c, metric, row)
        if c["non_private"]:  # the non-private error at (n_base, d_base): a line in panel (a)
            vals = [r[metric] for r in rows if r["method"] == np_method
                    and r["n"] == c["n_base"] and r["d"] == c["d_base"]
                    and math.isinf(r["epsilon"])]
            if vals:
                ps[0] = dataclasses.replace(ps[0], marks=(Mark(
                    float(np.mean(vals)), _nonprivate_label(c), axis="y", role="nonprivate"),))
        panels += ps
    plot_panels(rows, panels, path, ncols=3, ylabel="mean final error", suptitle=(
        f"DP gradient EM (spec 002), {MODEL_TITLES[c['model']]}, SNR {c['snr']:g}, "
        f"T={c['T']}, delta=1/n"))


def plot_traces(iter_rows, summary, c, path):
    metric = _metric(c)
    nd = {"n": c["n_base"], "d": c["d_base"]}
    np_method = c["methods"][0] if c["methods"][0] != "clipped-gem" else "dp-gem"
    pa = [Curve(f"{METHOD_LABELS[m]}, eps={e:g}", {"method": m, "epsilon": e, **nd},
                COLORS[j], "-", None if m == np_method else "^")
          for m in c["methods"] for j, e in enumerate(sorted(c["eps_grid"]))]
    pb = [Curve(f"d={d}", {"method": np_method, "n": c["n_base"], "d": d,
                           "epsilon": c["eps_base"]}, COLORS[j])
          for j, d in enumerate(c["d_grid"])]
    pc = [Curve(f"n={n}", {"method": np_method, "d": c["d_base"], "n": n,
                           "epsilon": c["eps_base"]}, COLORS[j])
          for j, n in enumerate(c["n_grid"])]
    if c["non_private"]:
        lab = _nonprivate_label(c)
        pa.append(Curve(lab, {"method": np_method, "epsilon": INF, **nd}, "black", "--"))
        pb += [Curve(f"{lab}, d={d}", {"method": np_method, "n": c["n_base"], "d": d,
                                       "epsilon": INF}, COLORS[j], "--")
               for j, d in enumerate(c["d_grid"])]
        pc += [Curve(f"{lab}, n={n}", {"method": np_method, "d": c["d_base"], "n": n,
                                       "epsilon": INF}, COLORS[j], "--")
               for j, n in enumerate(c["n_grid"])]
    panels = [
        Panel(f"(a) n={c['n_base']}, d={c['d_base']}: varying eps", pa),
        Panel(f"(b) n={c['n_base']}, eps={c['eps_base']:g} ({METHOD_LABELS[np_method]}): "
              "varying d", pb),
        Panel(f"(c) d={c['d_base']}, eps={c['eps_base']:g} ({METHOD_LABELS[np_method]}): "
              "varying n", pc),
    ]
    kind = "sign-aligned " if metric == "error_sym" else ""
    plot_panels(iter_rows, panels, path, y=metric, ylabel=f"mean {kind}error", suptitle=(
        f"DP gradient EM (spec 002), {MODEL_TITLES[c['model']]}, SNR {c['snr']:g}, "
        f"delta=1/n"))


# --quick: one (n, d) shape per method (compilation dominates a small run)
_SMALL = dict(eps_grid=(0.5, 1.0), d_grid=(5,), n_grid=(10000,), n_base=10000, d_base=5)


def _design(name, fig, model, title, plot, methods=("dp-gem", "clipped-gem"), T=22,
            description=""):
    defaults = GemConfig(model=model, methods=methods, T=T)
    return Experiment(
        name=name, title=f"DP gradient EM paper, Figure {fig}: {title}", defaults=defaults,
        settings=design_settings, quick=dataclasses.replace(defaults, **_SMALL), plot=plot,
        **STUDY,
        description=description or "Spec 002 §4.3 grid: eps in {0.2, 0.5, 1}, d in "
        "{5, 10, 20, 40}, n in {1e4, 3e4, 1e5, 3e5}; Alg 2 against Alg 1 (C = 1) and "
        "non-private gradient EM.",
    )


# ------------------------------------------------------------------------------------------
# Figure 1: Algorithm 1 for several clipping norms C
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Fig1Config(Config):
    models: tuple[str, ...] = param(MODELS, choices=MODELS, doc="the models (one panel each)")
    sigma: float = param(1.0, gt=0, doc="noise standard deviation")
    snr: float = param(3.0, gt=0, doc="||beta*|| / sigma")
    p_m: float = param(0.1, ge=0, lt=1, doc="RMC: probability that a covariate is missing")
    n: int = param(100000, ge=100, doc="sample size")
    d: int = param(10, ge=1, doc="dimension")
    epsilon: float = param(0.5, gt=0, doc="the privacy budget of every private curve")
    clips: tuple[float, ...] = param((0.1, 1.0, 5.0, 10.0), gt=0,
                                     doc="Algorithm 1's clipping norms C")
    T: int = param(22, ge=1, doc="iterations")
    eta: float = param(1.0, gt=0, doc="step size")
    zeta: float = param(0.05, gt=0, lt=1, doc="failure probability")
    tau_scale: float = param(1.0, gt=0, doc="tau = tau_scale * the oracle bound")


def fig1_settings(c):
    out = []
    for model in c["models"]:
        truth = dense_beta(c["d"], c["snr"], c["sigma"])
        tau = c["tau_scale"] * oracle_tau(model, truth, c["sigma"], c["p_m"])
        n = c["n"]
        out.append(method_setting("dp-gem", model, n, c["d"], [
            gem_level(e, n, tau, c) for e in (c["epsilon"], INF)], c, c["T"]))
        out.append(method_setting("clipped-gem", model, n, c["d"], [
            gem_level(c["epsilon"], n, tau, c, clip) for clip in c["clips"]], c, c["T"]))
    return out


def fig1_plot(iter_rows, summary, c, path):
    panels = []
    for model in c["models"]:
        metric = "error" if model == "rmc" else "error_sym"
        curves = [Curve(f"Alg 1, C={clip:g}", {"method": "clipped-gem", "model": model,
                                                "clip": clip}, COLORS[j], "-", "^", y=metric)
                  for j, clip in enumerate(c["clips"])]
        curves.append(Curve("Alg 2", {"method": "dp-gem", "model": model,
                                      "epsilon": c["epsilon"]}, COLORS[len(c["clips"]) % 10],
                            "-", "o", y=metric))
        curves.append(Curve("gradient EM (non-private)", {"method": "dp-gem", "model": model,
                                                          "epsilon": INF}, y=metric))
        kind = "" if metric == "error" else ", sign-aligned"
        panels.append(Panel(f"{MODEL_TITLES[model]}{kind}", curves))
    plot_panels(iter_rows, panels, path, ylabel="mean error", suptitle=(
        f"Spec 002 Fig. 1: clipped DP gradient EM, n={c['n']}, d={c['d']}, "
        f"eps={c['epsilon']:g}, delta=1/n, SNR {c['snr']:g}"))


FIG1_DEFAULTS = Fig1Config()

EXPERIMENTS = [
    Experiment(
        name="gem_fig1",
        title="DP gradient EM paper, Figure 1: clipped DP gradient EM (Alg 1) for several C",
        defaults=FIG1_DEFAULTS, settings=fig1_settings,
        quick=dataclasses.replace(FIG1_DEFAULTS, n=10000, d=5), plot=fig1_plot, **STUDY,
        description="Alg 1 with C in {0.1, 1, 5, 10} (zCDP calibration of spec 002 §2.4), "
        "Alg 2 and non-private gradient EM on the three models; error against iteration.",
    ),
    _design("gem_fig2", 2, "gmm", "Gaussian mixture, error against iteration", plot_traces),
    _design("gem_fig3", 3, "mrm", "mixture of regressions, error against iteration",
            plot_traces),
    _design("gem_fig4", 4, "rmc", "missing covariates, error against iteration", plot_traces),
    _design("gem_fig6", 6, "gmm", "Gaussian mixture, final error against eps, d, n",
            plot_final),
    _design("gem_fig7", 7, "mrm", "mixture of regressions, final error", plot_final),
    _design("gem_fig8", 8, "rmc", "missing covariates, final error", plot_final),
    _design("gem_fig9", 9, "gmm", "Gaussian mixture, Alg 3 (DP EM) against Alg 2, T = 5",
            plot_final, methods=("dp-gem", "dp-em-exact"), T=5,
            description="Alg 3 (psi-robust private exact M-step) against Alg 2 and "
            "non-private EM, final error at T = 5 against eps, d and n."),
    _design("gem_fig10", 10, "gmm", "Gaussian mixture, Alg 3 against Alg 2, traces",
            plot_traces, methods=("dp-gem", "dp-em-exact"), T=22),
]
