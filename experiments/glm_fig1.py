"""Figure 1 of Cai, Wang & Zhang: low-dimensional logistic regression by Algorithm 1
(spec 003 §4.2), with dpjax's tighter accounting beside the paper's.

Design (spec 003 §4.1): ``x ~ U(-1, 1)^d``, ``beta`` uniform on the unit sphere (one draw per
``d``, shared by every curve), ``y ~ Bernoulli(sigmoid(x^T beta))``, ``beta0 = 0``,
``eta = 1``, ``delta = 1/(2n)``. Panels: (a) ``d in {10, 20, 40}`` at ``n = 40000``;
(b) ``n in {20000, 40000, 80000}`` at ``d = 20``; (c) ``eps in {0.2, 0.5, 0.8, inf}``; and our
addition (d): the final error against ``T``. Unstated values, chosen here: ``T = 50`` (non-private
GD reaches its statistical floor in about 40 steps at ``eta = 1``), ``R = 1`` (``y`` in {0, 1}),
``B = 4 (R + c1) sigma_x = 8`` as printed, ``sigma_x = 1``.

Calibrations (solid / dashed): ``paper`` -- classic Gaussian at ``(eps/T, delta/T)`` per step,
basic composition; ``gaussian`` -- the same ``(eps, delta)`` for the same declared sensitivity by
the exact curve of the composed Gaussian steps (``sigma_t`` grows like ``sqrt(T)``). Both ledgers
are exact; with the printed ``B`` (twice the sensitivity) both deliver more privacy than
requested. Grey dotted, panel (a): every step at the full ``(eps, delta)`` -- **not DP** at the
stated budget, shown because it resembles the paper's figure (spec 003 §4.4).
"""

from __future__ import annotations

import dataclasses

from dpjax.algorithms import dp_glm
from dpjax.config import ConfigError, param
from dpjax.experiments._common import COLORS, INF, ZeroInit, eps_label
from dpjax.experiments._glm_common import GLMRecord, GLMStudyConfig, truth
from dpjax.models.glm import GLM
from dpjax.plotting import Curve, Panel, plot_panels
from dpjax.study import Experiment
from dpjax.sweep import DataPlan, Setting

# the calibrations differ by marker (dashed, dotted and dash-dot mark the non-private,
# comparator and NOT DP curves in every figure)
STYLE = {"paper": ("-", "o"), "gaussian": ("-", "^")}


@dataclasses.dataclass(frozen=True)
class Fig1Config(GLMStudyConfig):
    d_grid: tuple[int, ...] = param((10, 20, 40), ge=1, doc="panel (a): the dimensions")
    d_base: int = param(20, ge=1, doc="the dimension of panels (b), (c), (d)")
    T_grid: tuple[int, ...] = param((5, 10, 20, 50), ge=1,
                                    doc="panel (d), added: the horizons T (must contain T)")
    unsplit: bool = param(True, doc="add the budget-unsplit curve (NOT DP) to panel (a)")
    beta_seed: int = param(0, ge=0, doc="seed of the true beta (one draw per d)")

    def check(self) -> None:
        if self.T not in self.T_grid:
            raise ConfigError(f"--set T_grid: must contain T = {self.T} (panel (d) reuses the "
                              f"main runs); got {','.join(map(str, self.T_grid))}")


DEFAULTS = Fig1Config()
QUICK = dataclasses.replace(DEFAULTS, n_grid=(4000,), n_base=4000, d_grid=(5, 10), d_base=5,
                            T=20, T_grid=(20,), unsplit=False)


def _needs(c):
    """(n, d, T) -> epsilons, for the main calibrations."""
    T = c["T"]
    need: dict[tuple[int, int, int], set[float]] = {}
    for d in c["d_grid"]:
        need.setdefault((c["n_base"], d, T), set()).add(c["eps_base"])
    for n in c["n_grid"]:
        need.setdefault((n, c["d_base"], T), set()).add(c["eps_base"])
    need.setdefault((c["n_base"], c["d_base"], T), set()).update(c["eps_grid"])
    for t in c["T_grid"]:
        need.setdefault((c["n_base"], c["d_base"], t), set()).add(c["eps_base"])
    return need


def settings(c):
    model = GLM()
    out = []

    def add(calibration, n, d, T, epss):
        delta = 1.0 / (2 * n)
        levels = tuple(
            {"epsilon": e, "delta": delta, "eta": c["eta"], "truncation": c["R"],
             "rho": dp_glm.calibrate_rho(e, delta, calibration, T)}
            for e in sorted(epss)
        )
        method = "alg1-unsplit-not-dp" if calibration == "unsplit" else f"alg1-{calibration}"
        out.append(Setting(
            key=f"{method},T={T},n={n},d={d}",
            columns={"method": method, "calibration": calibration, "n": n, "d": d, "s": d,
                     "T": T},
            estimator=dp_glm.noisy_gd(model, T, calibration, c["b_constant"]),
            simulate=model.simulate, init=ZeroInit(), record=GLMRecord(),
            truth=truth(c["beta_seed"], d), plan=DataPlan(1, n),
            hparams_type=dp_glm.GLMHyperparams, levels=levels, n=n,
        ))

    for (n, d, T), epss in sorted(_needs(c).items()):
        add("paper", n, d, T, epss | {INF})  # eps = inf: the non-private GD limit
        add("gaussian", n, d, T, epss)
    if c["unsplit"]:
        for d in c["d_grid"]:
            add("unsplit", c["n_base"], d, c["T"], {c["eps_base"]})
    return out


def _final_rows(iter_rows):
    return [r | {"kind": "final"} for r in iter_rows if r["iteration"] == r["T"]]


def plot(iter_rows, summary, c, path):
    T, nb, db, eb = c["T"], c["n_base"], c["d_base"], c["eps_base"]

    def curves(key, values, fixed, label):
        cs = []
        fixed = {**fixed, "kind": None}  # not the derived final rows of panel (d)
        for i, v in enumerate(values):
            for cal in ("paper", "gaussian"):
                cs.append(Curve(f"{label}={v}, {cal}", {"method": f"alg1-{cal}", "T": T,
                                                        key: v, **fixed, "epsilon": eb},
                                COLORS[i % 5], *STYLE[cal]))
            cs.append(Curve(f"{label}={v}, non-private", {"method": "alg1-paper", "T": T,
                                                          key: v, **fixed, "epsilon": INF},
                            COLORS[i % 5]))
        return cs

    pa = curves("d", c["d_grid"], {"n": nb}, "d")
    if c["unsplit"]:
        pa += [Curve(f"d={d}, every step at eps (NOT DP)",
                     {"method": "alg1-unsplit-not-dp", "d": d, "kind": None}, COLORS[i % 5],
                     role="not-dp")
               for i, d in enumerate(c["d_grid"])]
    pb = curves("n", c["n_grid"], {"d": db}, "n")
    pc = []
    for i, e in enumerate(c["eps_grid"]):
        for cal in ("paper", "gaussian"):
            pc.append(Curve(f"{eps_label(e)}, {cal}", {"method": f"alg1-{cal}", "T": T,
                                                        "n": nb, "d": db, "epsilon": e,
                                                        "kind": None},
                            COLORS[i % 5], *STYLE[cal]))
    pc.append(Curve("non-private", {"method": "alg1-paper", "T": T, "n": nb, "d": db,
                                    "epsilon": INF, "kind": None}))
    pd = [Curve(f"{cal}, eps={eb:g}", {"kind": "final", "method": f"alg1-{cal}", "n": nb,
                                       "d": db, "epsilon": eb}, COLORS[i], *STYLE[cal])
          for i, cal in enumerate(("paper", "gaussian"))]
    pd.append(Curve("non-private", {"kind": "final", "method": "alg1-paper", "n": nb, "d": db,
                                    "epsilon": INF}, marker="s"))
    panels = [
        Panel(f"(a) n={nb}, eps={eb:g}: varying d", pa),
        Panel(f"(b) d={db}, eps={eb:g}: varying n", pb),
        Panel(f"(c) n={nb}, d={db}: varying eps", pc),
        Panel(f"(d) added: final error vs T (n={nb}, d={db})", pd, x="T",
              xlabel="number of iterations T", logx=True),
    ]
    plot_panels(iter_rows + _final_rows(iter_rows), panels, path, y="log_sq_error", logy=False,
                ylabel="mean log ||beta_t - beta||^2", ncols=4, suptitle=(
                    f"Alg 1 (noisy GD), logistic, T={T}, B={2 * c['b_constant']:g}, "
                    "delta=1/(2n); circles: paper's accounting, triangles: exact Gaussian "
                    "composition (same eps, delta)"))


EXPERIMENTS = [
    Experiment(
        name="glm_fig1",
        title="DP GLM paper, Figure 1: low-dimensional logistic regression (Alg 1), log error "
        "vs t, paper vs exact accounting",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        quick_reps=3,
        description="Panels vary d, n and epsilon as in the paper, each with the paper's "
        "calibration and the exact-Gaussian calibration of the same (eps, delta); panel (d) "
        "the final error against T; a budget-unsplit curve labelled NOT DP.",
    )
]
