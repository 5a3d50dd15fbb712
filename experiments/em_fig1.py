"""Figure 1 of Zhang & Zhang, high-dimensional DP-EM for the Gaussian mixture (spec 000 §4.1).

Data: ``y_i = z_i beta* + e_i``, ``beta*`` with its first ``s*`` coordinates ``1/sqrt(s*)``,
``sigma = 0.5`` (SNR 2), ``d = 1000``, ``delta = 1/(2n)``, ``eta = 0.5``, 50 repetitions.
Algorithm 3 with honest calibration: ``T = sqrt(log n)``, ``N0 = ceil(log n)`` disjoint batches,
``s_hat = s*``, Laplace scale ``4 eta T N0 sqrt(3 s_hat log(1/delta)) / (n eps)`` (with
``N0/n -> 1/n0``), and a data-independent start ``||beta0 - beta*|| = ||beta*||/8`` on the
support. Panels: (a) n in {4000, 5000, 6000}; (b) s* in {5, 10, 15}; (c) eps in {0.3, 0.5, 0.8};
each against the non-private limit (eps = inf: same splitting and truncation, zero noise);
and (d), our addition, larger n where the private estimator works (spec 000 §7 A6).
"""

from __future__ import annotations

import math

from dpjax.algorithms import dp_em
from dpjax.models import GaussianMixture, sparse_unit_beta
from dpjax.plotting import Curve, Panel, plot_panels
from dpjax.study import ConfigError, Experiment
from dpjax.sweep import DataPlan, Setting
from experiments._em_common import BetaError, InitNearTruth

INF = math.inf
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]

DEFAULTS = {
    "d": 1000,
    "sigma": 0.5,
    "eta": 0.5,
    "n_grid": (4000, 5000, 6000),
    "s_grid": (5, 10, 15),
    "eps_grid": (0.3, 0.5, 0.8),
    "n_base": 4000,
    "s_base": 10,
    "eps_base": 0.5,
    "large_n": (20000, 50000, 100000, 200000),
    "truncation_const": 1.0,
    "init_radius": 0.125,
}
QUICK = {"large_n": (20000,)}


def _check(c):
    if c["d"] < max(max(c["s_grid"]), c["s_base"]):
        raise ConfigError("--set d: d must be at least the largest sparsity in s_grid/s_base")
    for name in ("eps_grid",):
        if any(e <= 0 for e in c[name]):
            raise ConfigError(f"--set {name}: every epsilon must be > 0")
    if c["eps_base"] <= 0:
        raise ConfigError("--set eps_base: epsilon must be > 0")
    if any(n < 10 for n in (*c["n_grid"], *c["large_n"], c["n_base"])):
        raise ConfigError("--set n_grid/large_n/n_base: n must be at least 10")


def _pairs(c):
    """(n, s) -> set of epsilons needed by the panels."""
    need: dict[tuple[int, int], set[float]] = {}
    for n in c["n_grid"]:
        need.setdefault((n, c["s_base"]), set()).update({c["eps_base"], INF})
    for s in c["s_grid"]:
        need.setdefault((c["n_base"], s), set()).update({c["eps_base"], INF})
    need.setdefault((c["n_base"], c["s_base"]), set()).update({*c["eps_grid"], INF})
    for n in c["large_n"]:
        need.setdefault((n, c["s_base"]), set()).update({c["eps_base"], INF})
    return need


def settings(c):
    model = GaussianMixture(c["sigma"])
    init, record = InitNearTruth(c["init_radius"]), BetaError()
    out = []
    for (n, s), epss in sorted(_pairs(c).items()):
        N0 = dp_em.default_num_iterations(n)
        T = c["truncation_const"] * dp_em.default_truncation(n)
        levels = tuple(
            {"epsilon": e, "delta": 1.0 / (2 * n), "eta": c["eta"], "truncation": T}
            for e in sorted(epss)
        )
        out.append(Setting(
            key=f"n={n},d={c['d']},s={s}",
            columns={"method": "hd-dp-em", "n": n, "d": c["d"], "s": s, "s_hat": s, "N0": N0},
            estimator=dp_em.hd_dp_em(model, s, N0),
            simulate=model.simulate, init=init, record=record,
            truth=sparse_unit_beta(c["d"], s), plan=DataPlan(N0, n // N0),
            hparams_type=dp_em.DPEMHyperparams, levels=levels, n=n,
        ))
    return out


def plot(iter_rows, summary, c, path):
    def eps_label(e):
        return "non-private" if math.isinf(e) else f"eps={e:g}"

    pa = [Curve(f"n={n}, {eps_label(e)}", {"n": n, "s": c["s_base"], "epsilon": e},
                COLORS[i % 5], "-" if math.isfinite(e) else "--")
          for i, n in enumerate(c["n_grid"]) for e in (c["eps_base"], INF)]
    pb = [Curve(f"s*={s}, {eps_label(e)}", {"n": c["n_base"], "s": s, "epsilon": e},
                COLORS[i % 5], "-" if math.isfinite(e) else "--")
          for i, s in enumerate(c["s_grid"]) for e in (c["eps_base"], INF)]
    pc = [Curve(eps_label(e), {"n": c["n_base"], "s": c["s_base"], "epsilon": e},
                COLORS[i % 5] if math.isfinite(e) else "black", "-" if math.isfinite(e) else "--")
          for i, e in enumerate((*c["eps_grid"], INF))]
    pd = [Curve(f"n={n}, {eps_label(e)}", {"n": n, "s": c["s_base"], "epsilon": e},
                COLORS[i % 5], "-" if math.isfinite(e) else "--")
          for i, n in enumerate(c["large_n"]) for e in (c["eps_base"], INF)]
    panels = [
        Panel(f"(a) s*={c['s_base']}, eps={c['eps_base']:g}: varying n", pa),
        Panel(f"(b) n={c['n_base']}, eps={c['eps_base']:g}: varying s*", pb),
        Panel(f"(c) n={c['n_base']}, s*={c['s_base']}: varying eps", pc),
        Panel(f"(d) added: larger n, s*={c['s_base']}, eps={c['eps_base']:g}", pd),
    ]
    plot_panels(iter_rows, panels, path, suptitle=(
        f"HD DP-EM, Gaussian mixture (spec 000 Fig. 1), d={c['d']}, sigma={c['sigma']:g}, "
        "honest calibration; error bars: 1 s.e."))


EXPERIMENTS = [
    Experiment(
        name="em_fig1",
        title="DP-EM paper, Figure 1: high-dimensional Gaussian mixture (Alg 3), error vs t",
        defaults=DEFAULTS,
        settings=settings,
        quick=QUICK,
        reps=50,
        quick_reps=5,
        plot=plot,
        check=_check,
        description="Panels vary n, s* and epsilon as in the paper, plus a panel at larger n. "
        "Honest calibration (T = sqrt(log n), N0 = ceil(log n)); see experiments/README.md.",
    )
]

