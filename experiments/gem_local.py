"""Local-DP gradient EM against central Algorithm 2 (ours: not in the paper).

The paper's local-DP result (App F, Thm 8) covers the 1-D mean only; the local-DP gradient EM
(:func:`dpjax.algorithms.ldp_gem.ldp_gem`) is ours: ``T`` disjoint user groups, each user of
group ``t`` releases its ``psi``-scored gradient at the public iterate once with Gaussian
noise calibrated to the vector's l2 range (``sqrt(d) (4 sqrt2/3) s``) for
``(epsilon, delta)``-LDP via ``rho = eps~^2``-zCDP, and the server steps along the group mean.
Central Algorithm 2 runs at the same ``(epsilon, delta)`` (its ``d T`` releases composed in
zCDP). Protocol of spec 002 §4.3 (SNR 3, ``sigma = 1``, ``beta* = (3/sqrt d) 1_d``, ``T = 22``,
``eta = 1``, ``zeta = 0.05``, ``delta = 1/n``, oracle ``tau``, random start).

What theory predicts (the noise-dominated regime; ``m = n/T`` users per group):

* central Algorithm 2: per-coordinate noise ``(2/(3 beta_s)) sqrt(d T tau/(n eps~))``: error
  ``∝ n^(-1/2) eps~^(-1/2)``;
* local: the group mean carries ``sigma_loc / sqrt(m)`` per coordinate with
  ``sigma_loc ∝ sqrt(d) s / eps~`` and ``s ∝ (sqrt(m) tau eps~)^(1/2)``, i.e. noise (and the
  truncation bias ``~ tau / s``) ``∝ sqrt(d) (T/n)^(1/4) eps~^(-1/2)``: an n-slope of -1/4
  (the local 1-D mean's rate, Thm 8 with A5) and an eps-slope of -1/2, so the local error is
  larger by a factor growing like ``n^(1/4)``.

Panels: (a) final error against n at ``eps_base`` for both (the local grid extends to larger
n: it is cheap, every user is touched once); (b) against epsilon at ``n_eps``. Fitted log-log
slopes of the sign-aligned final error (spec 002 A13) are in the legends.
"""

from __future__ import annotations

import dataclasses

from dpjax.config import Config, ConfigError, param
from dpjax.experiments._common import COLORS, final_rows
from dpjax.experiments._gem_common import (
    INF,
    METHOD_LABELS,
    STUDY,
    dense_beta,
    fit_loglog,
    gem_level,
    method_setting,
    oracle_tau,
)
from dpjax.plotting import Curve, Panel, curve_stats, plot_panels
from dpjax.study import Experiment

METHODS = ("ldp-gem", "dp-gem")
PREDICTED = {"ldp-gem": {"n": -0.25, "epsilon": -0.5}, "dp-gem": {"n": -0.5, "epsilon": -0.5}}


@dataclasses.dataclass(frozen=True)
class LocalConfig(Config):
    """Local-DP gradient EM against central Algorithm 2 (error against n and epsilon)."""

    model: str = param("gmm", choices=("gmm", "mrm", "rmc"), doc="the model")
    sigma: float = param(1.0, gt=0, doc="noise standard deviation")
    snr: float = param(3.0, gt=0, doc="||beta*|| / sigma (the paper: 3)")
    p_m: float = param(0.1, ge=0, lt=1, doc="RMC: probability that a covariate is missing")
    d: int = param(10, ge=1, doc="dimension")
    T: int = param(22, ge=1, doc="iterations = user groups of the local method")
    eta: float = param(1.0, gt=0, doc="step size")
    zeta: float = param(0.05, gt=0, lt=1, doc="failure probability (sets beta_s)")
    tau_scale: float = param(1.0, gt=0, doc="tau = tau_scale * the oracle bound")
    n_local: tuple[int, ...] = param((30000, 100000, 300000, 1000000, 3000000), ge=100,
                                     doc="panel (a): the sample sizes of the local method")
    n_central: tuple[int, ...] = param((10000, 30000, 100000, 300000), ge=100,
                                       doc="panel (a): the sample sizes of central Alg 2")
    eps_base: float = param(0.5, gt=0, doc="the epsilon of panel (a)")
    eps_grid: tuple[float, ...] = param((0.2, 0.5, 1.0, 2.0), gt=0,
                                        doc="panel (b): the epsilons (at n_eps)")
    n_eps: int = param(100000, ge=100, doc="the sample size of panel (b)")
    non_private: bool = param(True, doc="add each method's eps = inf level at every n")

    def check(self) -> None:
        if min(*self.n_local, self.n_eps) < self.T:
            raise ConfigError("--set n_local: the local method needs n >= T users")


def _needs(ns, c) -> dict[int, set[float]]:
    need = {n: {c["eps_base"]} for n in ns}
    need.setdefault(c["n_eps"], set()).update(c["eps_grid"])
    return need


def settings(c):
    truth = dense_beta(c["d"], c["snr"], c["sigma"])
    tau = c["tau_scale"] * oracle_tau(c["model"], truth, c["sigma"], c["p_m"])
    common = {"sigma": c["sigma"], "snr": c["snr"], "p_m": c["p_m"], "eta": c["eta"],
              "zeta": c["zeta"]}
    out = []
    for method, ns in (("ldp-gem", c["n_local"]), ("dp-gem", c["n_central"])):
        for n, epss in sorted(_needs(ns, c).items()):
            eps = sorted(epss) + ([INF] if c["non_private"] else [])
            levels = [gem_level(e, n, tau, common) for e in eps]
            out.append(method_setting(method, c["model"], n, c["d"], levels, common, c["T"]))
    return out


def slopes(rows, c, metric: str) -> dict[str, dict[str, tuple[float, float]]]:
    """Fitted log-log slopes of each method's mean final error against n and epsilon."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for m in METHODS:
        out[m] = {}
        for axis, where in (("n", {"epsilon": c["eps_base"]}), ("epsilon", {"n": c["n_eps"]})):
            xs, mean, se = curve_stats(rows, {"method": m, **where}, axis, metric)
            keep = [i for i, x in enumerate(xs) if x != INF]
            out[m][axis] = (fit_loglog(xs[keep], mean[keep], se[keep]) if len(keep) > 1
                            else (float("nan"), float("nan")))
    return out


def plot(iter_rows, summary, c, path):
    rows = final_rows(iter_rows)
    metric = "error" if c["model"] == "rmc" else "error_sym"
    fitted = slopes(rows, c, metric)

    def label(m, axis):
        b, se = fitted[m][axis]
        return (f"{METHOD_LABELS[m]}: slope {b:+.2f} ± {se:.2f} "
                f"(theory {PREDICTED[m][axis]:+.2f})")

    pa, pb = [], []
    for i, m in enumerate(METHODS):
        pa.append(Curve(label(m, "n"), {"method": m, "epsilon": c["eps_base"]}, COLORS[i],
                        "-", "o", y=metric))
        pb.append(Curve(label(m, "epsilon"), {"method": m, "n": c["n_eps"]}, COLORS[i], "-",
                        "o", y=metric))
        if c["non_private"]:
            pa.append(Curve(f"{METHOD_LABELS[m]}, eps = inf", {"method": m, "epsilon": INF},
                            COLORS[i], ":", "x", y=metric))
    plot_panels(rows, [
        Panel(f"(a) eps = {c['eps_base']:g}: final error vs n", pa, x="n", xlabel="n",
              logx=True, logy=True),
        Panel(f"(b) n = {c['n_eps']}: final error vs eps", pb, x="epsilon", xlabel="epsilon",
              logx=True, logy=True),
    ], path, ylabel="mean final error (sign-aligned)" if metric == "error_sym" else
        "mean final error", suptitle=(
        f"Local-DP gradient EM (ours) vs central Alg 2, {c['model']}, d = {c['d']}, "
        f"T = {c['T']}, delta = 1/n"))


DEFAULTS = LocalConfig()
EXPERIMENTS = [
    Experiment(
        name="gem_local",
        title="DP gradient EM: local-DP gradient EM (ours) vs central Algorithm 2",
        defaults=DEFAULTS, settings=settings,
        quick=dataclasses.replace(DEFAULTS, d=5, T=10, n_local=(2000, 8000),
                                  n_central=(2000,), eps_grid=(0.5, 1.0), n_eps=2000,
                                  non_private=False),
        plot=plot, **STUDY,
        description="Error against n and epsilon of the local-DP gradient EM (ours; each "
        "user releases one psi-gradient once) and central Algorithm 2 at the same "
        "(epsilon, delta), with fitted log-log slopes (theory: -1/4 and -1/2 in n).",
    )
]
