"""LDP iterative hard thresholding (Zhu et al., ICLR 2024; spec 001 §2.5, §2.6): Algorithm 2
(isotropic covariates) and Algorithm 4 (Toeplitz covariance) against n, epsilon and k, with
fitted log-log slopes, and Algorithm 2 against Algorithm 1 at equal epsilon.

The paper has no experiments; this is our design (spec §4.2). Data: ``x ~ N(0, Sigma)`` with
``Sigma = I_d`` (Alg 2) or ``Sigma_ij = rho^|i-j|`` (Alg 4), ``theta*`` ``k``-sparse with a
random support, random signs and entries ``1/sqrt(k)`` (``||theta*||_2 = 1``: Remark 1 allows
it for the interactive bounds, and it keeps the signal fixed across ``k``),
``y = <theta*, x> + N(0, noise_sd^2)``.

Algorithms (every constant an explicit knob): ``k' = c_k k`` (capped at ``d``; Theorem 7's
``8k`` exceeds ``d`` here), ``tau1 = tau2 = c_tau sqrt(log n)``, rectified randomizer radius.
Alg 2: ``eta = 1``, ``T`` rounds, projection onto the unit ball. Alg 4: ``eta_0 = 2/(3 gamma)``
(``gamma, mu``: the extreme eigenvalues of ``Sigma``), ``T4`` rounds, projection radius 2.
Each round's group is streamed in chunks of at most ``chunk`` users
(``ldp_iht(..., chunks_per_round=C)``), so memory does not grow with ``n``.
Algorithm 1 (aggregate noise, streamed; ``c_r``, ``c_tau1``, ``lambda`` by the noise rule
of spec §2.1 times ``c_lam``) runs on the isotropic data at the same ``epsilon`` with
``delta``.

Panels (column ``panel``): ``n`` (every ``n`` of ``n_grid``; Alg 2, Alg 4 at ``eps_grid`` and
``epsilon = inf``; Alg 1 at ``eps_grid`` over ``n_grid + alg1_extra_n``), ``eps`` (Alg 2 at
``n_eps`` and the extra levels ``eps_extra``), ``k`` (Alg 2 and 4 at ``n_k``, ``eps_k``, every
``k`` of ``k_grid`` other than ``k``); ``--set panels=...`` and ``methods=...`` keep some of
them (``panels=n methods=alg2``: Algorithm 2 alone over ``n_grid``, as the benchmark harness
``benchmarks/run.py`` times it). ``plot`` writes ``slopes.csv``: each fitted slope beside
the theory's rate and beside the slope of the exact noise scale of the last round
(``eta sqrt(k') B / sqrt(d m)``, ``B`` the randomizer's output norm, ``m`` the group size).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import local_randomizers as LR
from dpjax import plotting, sweep
from dpjax.algorithms import ldp_sparse as L
from dpjax.config import Config, param
from dpjax.experiments._common import ZeroInit, finish_figure
from dpjax.experiments._ldp_common import fit_slope, iht_plan, record_nldp, select
from dpjax.models import sparse_lr as M
from dpjax.results import write_csv
from dpjax.study import Experiment

# the paper's Gaussian calibration (classic where a release's epsilon <= 1), passed by name so
# the committed report regenerates unchanged (the estimators' default is "analytic")
CLASSIC = "classic-or-analytic"

INF = math.inf
METHODS = ("alg2", "alg4", "alg1")
PANELS = ("n", "eps", "k")


@dataclasses.dataclass(frozen=True)
class IHTConfig(Config):
    d: int = param(10, ge=2, le=64, doc="dimension")
    k: int = param(2, ge=1, doc="sparsity of theta* (entries 1/sqrt(k)) in the n and eps panels")
    n_grid: tuple[int, ...] = param((500_000, 1_000_000, 2_000_000, 4_000_000), ge=1000,
                                    doc="numbers of users (n panel)")
    eps_grid: tuple[float, ...] = param((0.5, 1.0), gt=0, le=2,
                                        doc="each user's epsilon (n panel; Alg 1 too)")
    n_eps: int = param(2_000_000, ge=1000, doc="users of the eps panel")
    eps_extra: tuple[float, ...] = param((0.25, 2.0), gt=0,
                                         doc="extra epsilons of the eps panel (Alg 2)")
    k_grid: tuple[int, ...] = param((1, 2, 3, 4), ge=1, doc="sparsities (k panel)")
    n_k: int = param(2_000_000, ge=1000, doc="users of the k panel")
    eps_k: float = param(1.0, gt=0, doc="epsilon of the k panel")
    c_k: int = param(2, ge=1, doc="k' = c_k k (capped at d)")
    c_tau: float = param(0.5, gt=0, doc="tau1 = tau2 = c_tau sqrt(log n) (Alg 2, 4)")
    rounds: int = param(3, ge=1, doc="T, rounds (user groups) of Alg 2")
    rounds4: int = param(6, ge=1, doc="T, rounds of Alg 4")
    rho: float = param(0.3, gt=0, lt=1, doc="Toeplitz correlation of Alg 4's covariates")
    noise_sd: float = param(0.5, ge=0, doc="sd of the regression noise")
    delta: float = param(1e-5, gt=0, lt=1, doc="Alg 1's delta")
    c_r: float = param(0.3, gt=0, doc="Alg 1: r = c_r sqrt(d log n)")
    c_tau1: float = param(math.sqrt(2), gt=0, doc="Alg 1: tau = c_tau1 sqrt(log n)")
    c_lam: float = param(0.25, ge=0, doc="Alg 1: lambda = c_lam x the noise rule")
    alg1_extra_n: tuple[int, ...] = param((16_000_000,), ge=1000,
                                          doc="Alg 1 only: n beyond n_grid")
    chunk: int = param(250_000, ge=100, doc="users per streamed chunk")
    theta_seed: int = param(0, ge=0, doc="seed of theta*")
    methods: tuple[str, ...] = param(METHODS, choices=METHODS,
                                     doc="the algorithms run (alg1: n panel only; alg2 and "
                                     "alg4: n and k panels, alg2 also the eps panel)")
    panels: tuple[str, ...] = param(PANELS, choices=PANELS, doc="the panels run")

    def check(self) -> None:
        for k in (self.k, *self.k_grid):
            if k > self.d:
                raise ValueError(f"--set k / k_grid: each k must be <= d = {self.d}; got {k}")
        iht = "alg2" in self.methods or "alg4" in self.methods
        if not ("n" in self.panels or ("eps" in self.panels and "alg2" in self.methods)
                or ("k" in self.panels and iht and set(self.k_grid) - {self.k})):
            raise ValueError("--set methods / panels: no setting to run (alg1 runs in the n "
                             "panel only, the eps panel is alg2's)")


DEFAULTS = IHTConfig()
QUICK = dataclasses.replace(
    DEFAULTS, n_grid=(100_000, 200_000), eps_grid=(1.0,), n_eps=100_000, eps_extra=(0.5,),
    k_grid=(1, 2), n_k=100_000, alg1_extra_n=(400_000,), chunk=50_000)


def _theta(c, k: int) -> np.ndarray:
    return np.asarray(M.sparse_theta(jax.random.key(c["theta_seed"]), c["d"], k, norm="l2"))


def _k_prime(c, k: int) -> int:
    return min(c["c_k"] * k, c["d"])


def _gamma_mu(c) -> tuple[float, float]:
    ev = np.linalg.eigvalsh(M.toeplitz(c["d"], c["rho"]))
    return float(ev[-1]), float(ev[0])


def _plan(c, n: int, rounds: int) -> tuple[int, int, int]:
    return iht_plan(n, rounds, c["chunk"])


def _record(state, truth):
    """IHT rows carry ``indefinite = 0`` so that every row has Algorithm 1's columns."""
    return {"error": jnp.linalg.norm(state.beta - truth), "indefinite": jnp.float32(0.0)}


def _iht_setting(c, alg: int, panel: str, n: int, k: int, epsilons) -> sweep.Setting:
    rounds = c["rounds"] if alg == 2 else c["rounds4"]
    chunks, m, n_eff = _plan(c, n, rounds)
    kp = _k_prime(c, k)
    tau = c["c_tau"] * math.sqrt(math.log(n_eff))
    if alg == 2:
        eta, model, norm = 1.0, M.SparseLinearModel(noise_sd=c["noise_sd"]), 1.0
    else:
        eta = 2 / (3 * _gamma_mu(c)[0])
        model, norm = M.SparseLinearModel(noise_sd=c["noise_sd"], rho=c["rho"]), 2.0
    radius = float(LR.ldp_iht_radius(c["d"], kp, tau, tau, theta_norm=norm))
    # delta = 0 (pure LDP), r the randomizer radius, lam = 0 (none): Alg 1's columns
    levels = tuple({"epsilon": e, "tau1": tau, "tau2": tau, "eta": eta, "delta": 0.0,
                    "r": radius, "lam": 0.0} for e in epsilons)
    return sweep.Setting(
        key=f"ldp_iht,{panel},alg{alg},n={n_eff},d={c['d']},k={k}",
        columns={"panel": panel, "method": f"alg{alg}", "n": n_eff, "d": c["d"], "k": k,
                 "k_prime": kp, "T": rounds, "group": chunks * m},
        estimator=L.ldp_iht(rounds, kp, theta_norm=norm, batching="disjoint",
                            chunks_per_round=chunks),
        simulate=model, init=ZeroInit(), record=_record, truth=_theta(c, k),
        plan=sweep.DataPlan(num_blocks=rounds * chunks, block_size=m),
        hparams_type=L.IHTHyperparams, levels=levels, n=n_eff, final_only=True)


def _alg1_setting(c, n: int) -> sweep.Setting:
    chunks = max(1, math.ceil(n / max(c["chunk"], 1_000_000)))
    block = n // chunks
    n_eff = chunks * block
    levels = []
    for eps in c["eps_grid"]:
        hp = L.nldp_hparams(n_eff, c["d"], eps, c["delta"], c_r=c["c_r"], c_tau=c["c_tau1"],
                            c_lam=c["c_lam"], lam_rule="noise", calibration=CLASSIC)
        levels.append({f: float(v) for f, v in zip(L.NLDPHyperparams._fields, hp)}
                      | {"eta": 0.0})  # no step size: the IHT rows' column
    return sweep.Setting(
        key=f"ldp_iht,n,alg1,n={n_eff},d={c['d']},k={c['k']}",
        columns={"panel": "n", "method": "alg1", "n": n_eff, "d": c["d"], "k": c["k"],
                 "k_prime": c["k"], "T": 1, "group": n_eff},
        estimator=L.nldp(chunks, calibration=CLASSIC),
        simulate=M.SparseLinearModel(noise_sd=c["noise_sd"]),
        init=ZeroInit(), record=record_nldp, truth=_theta(c, c["k"]),
        plan=sweep.DataPlan(num_blocks=chunks, block_size=block),
        hparams_type=L.NLDPHyperparams, levels=tuple(levels), n=n_eff, final_only=True)


def settings(c):
    finite = tuple(c["eps_grid"])
    methods, panels = set(c["methods"]), set(c["panels"])
    iht = [alg for alg in (2, 4) if f"alg{alg}" in methods]
    out = []
    if "n" in panels:
        for alg in iht:
            for n in c["n_grid"]:
                out.append(_iht_setting(c, alg, "n", n, c["k"], (*finite, INF)))
    if "eps" in panels and 2 in iht:
        out.append(_iht_setting(c, 2, "eps", c["n_eps"], c["k"], tuple(c["eps_extra"])))
    if "k" in panels:
        for alg in iht:
            for k in c["k_grid"]:
                if k != c["k"]:
                    out.append(_iht_setting(c, alg, "k", c["n_k"], k, (c["eps_k"],)))
    if "n" in panels and "alg1" in methods:
        for n in (*c["n_grid"], *c["alg1_extra_n"]):
            out.append(_alg1_setting(c, n))
    return out


# --------------------------------------------------------------------------------------------
# Predicted noise scale and slopes
# --------------------------------------------------------------------------------------------


def noise_scale(c, alg: int, n: int, k: int, eps: float) -> float:
    """``eta sqrt(k') B / sqrt(d m)``: the l2 size on ``k'`` coordinates of the last round's
    averaged randomizer noise (``B``: the exact unbiased output norm, per-coordinate variance
    ``B^2/d`` per report), the scale the error should follow where it dominates."""
    rounds = c["rounds"] if alg == 2 else c["rounds4"]
    chunks, m, n_eff = _plan(c, n, rounds)
    kp = _k_prime(c, k)
    tau = c["c_tau"] * math.sqrt(math.log(n_eff))
    norm = 1.0 if alg == 2 else 2.0
    eta = 1.0 if alg == 2 else 2 / (3 * _gamma_mu(c)[0])
    r = LR.ldp_iht_radius(c["d"], kp, tau, tau, theta_norm=norm)
    b = float(LR.randomizer_scale(r, eps, c["d"]))
    return eta * math.sqrt(kp) * b / math.sqrt(c["d"] * chunks * m)


def _fit(rows, xkey):
    rows = sorted(rows, key=lambda r: r[xkey])
    return fit_slope([r[xkey] for r in rows], [r["mean"] for r in rows],
                     [r["se"] for r in rows])


def slopes(summary, c) -> list[dict]:
    """Log-log slopes of the mean error (95% intervals) beside the theory's rates (Table 1,
    spec §3.3: n -1/2, eps -1 for eps <= 1, k +1 for Algs 2, 4; Alg 1 n -1/2) and the slope of
    :func:`noise_scale` over the same points."""
    out = []

    def add(against, method, level, rows, xkey, theory, pred_x):
        if len(rows) < 2:
            return
        s, lo, hi = _fit(rows, xkey)
        xs = sorted(r[xkey] for r in rows)
        pred = math.nan
        if pred_x is not None:
            pred = float(np.polyfit(np.log(xs), np.log([pred_x(x) for x in xs]), 1)[0])
        out.append({"against": against, "method": method, "level": level,
                    "points": len(rows), "x_min": xs[0], "x_max": xs[-1], "slope": s,
                    "ci_low": lo, "ci_high": hi, "theory": theory, "noise_scale_slope": pred,
                    "error_max": max(r["mean"] for r in rows)})

    k0 = c["k"]
    for alg in (2, 4):
        for eps in c["eps_grid"]:
            rows = select(summary, panel="n", method=f"alg{alg}", epsilon=float(eps))
            add("n", f"alg{alg}", f"eps={eps:g}", rows, "n", -0.5,
                lambda n, alg=alg, eps=eps: noise_scale(c, alg, int(n), k0, eps))
    for eps in c["eps_grid"]:
        rows = [r for r in select(summary, panel="n", method="alg1", epsilon=float(eps))
                if r["indefinite_mean"] == 0]
        add("n", "alg1", f"eps={eps:g}, PD covariance only", rows, "n", -0.5, None)
    # epsilon at n_eps: the n panel's levels at that n and the eps panel's extra levels
    n_eps = _plan(c, c["n_eps"], c["rounds"])[2]
    rows = [r for r in summary if r["method"] == "alg2" and r["n"] == n_eps
            and r["k"] == k0 and r["panel"] in ("n", "eps") and math.isfinite(r["epsilon"])]
    small = [r for r in rows if r["epsilon"] <= 1]
    add("epsilon (eps <= 1)", "alg2", f"n={n_eps}", small, "epsilon", -1.0,
        lambda e: noise_scale(c, 2, c["n_eps"], k0, e))
    add("epsilon (all)", "alg2", f"n={n_eps}", rows, "epsilon", math.nan,
        lambda e: noise_scale(c, 2, c["n_eps"], k0, e))
    for alg in (4, 2):
        for n in sorted({r["n"] for r in select(summary, panel="n", method=f"alg{alg}")}):
            if alg == 2 and n == n_eps:
                continue
            rows = [r for r in select(summary, panel="n", method=f"alg{alg}", n=n)
                    if math.isfinite(r["epsilon"])]
            nn = n
            add("epsilon (eps <= 1)", f"alg{alg}", f"n={n}", rows, "epsilon", -1.0,
                lambda e, alg=alg, nn=nn: noise_scale(c, alg, _n_nominal(c, nn, alg), k0, e))
    for alg in (2, 4):
        n_k = _plan(c, c["n_k"], c["rounds"] if alg == 2 else c["rounds4"])[2]
        rows = [r for r in summary if r["method"] == f"alg{alg}" and r["n"] == n_k
                and r["panel"] in ("n", "k") and r["epsilon"] == c["eps_k"]]
        add("k", f"alg{alg}", f"n={n_k}, eps={c['eps_k']:g}", rows, "k", 1.0,
            lambda k, alg=alg: noise_scale(c, alg, c["n_k"], int(k), c["eps_k"]))
    return out


def _n_nominal(c, n_eff: int, alg: int) -> int:
    """The ``n_grid`` entry whose streamed plan has ``n_eff`` users."""
    rounds = c["rounds"] if alg == 2 else c["rounds4"]
    for n in (*c["n_grid"], c["n_eps"], c["n_k"]):
        if _plan(c, n, rounds)[2] == n_eff:
            return n
    return n_eff


# --------------------------------------------------------------------------------------------
# Figure
# --------------------------------------------------------------------------------------------


def plot(iter_rows, summary, c, path):
    del iter_rows
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    drawn = [bool(select(summary, panel="n")), False, False]  # panels may be switched off
    ax = axes[0]
    styles = {"alg2": "-", "alg4": "--", "alg1": ":"}
    for method in ("alg2", "alg4", "alg1"):
        levels = sorted({r["epsilon"] for r in select(summary, panel="n", method=method)})
        for eps in levels:
            rows = sorted(select(summary, panel="n", method=method, epsilon=eps),
                          key=lambda r: r["n"])
            label = {"alg2": "Alg 2", "alg4": f"Alg 4 (rho={c['rho']:g})",
                     "alg1": "Alg 1"}[method] + (", no noise" if math.isinf(eps)
                                                 else f", eps={eps:g}")
            plotting.draw_curve(ax, [r["n"] for r in rows], [r["mean"] for r in rows],
                                [r["se"] for r in rows], label, linestyle=styles[method],
                                marker="o", logy=True,
                                role="nonprivate" if math.isinf(eps) else "dp",
                                color=f"C{len(ax.get_lines()) % 10}", several_nonprivate=True)
    ns = sorted({r["n"] for r in select(summary, panel="n", method="alg2")})
    for eps in c["eps_grid"]:
        ax.plot(ns, [M.lower_bound_interactive(n, c["d"], c["k"], eps) for n in ns], "-",
                color="black", linewidth=0.6)
    ax.plot([], [], "-", color="black", linewidth=0.6,
            label="SI-LDP lower-bound rate sqrt(dk/(n eps^2)), eps = " +
            ", ".join(f"{e:g}" for e in c["eps_grid"]))
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--",
               label="||theta*|| (estimate 0)")
    ax.set_title(f"error vs n (d={c['d']}, k={c['k']}, k'={_k_prime(c, c['k'])})", fontsize=10)
    ax.set_xlabel("n (users)")

    ax = axes[1]
    n_eps = _plan(c, c["n_eps"], c["rounds"])[2]
    rows = sorted([r for r in summary if r["method"] == "alg2" and r["n"] == n_eps
                   and r["k"] == c["k"] and r["panel"] in ("n", "eps")
                   and math.isfinite(r["epsilon"])], key=lambda r: r["epsilon"])
    if rows:
        drawn[1] = True
        es = [r["epsilon"] for r in rows]
        plotting.draw_curve(ax, es, [r["mean"] for r in rows], [r["se"] for r in rows],
                            f"Alg 2, n={n_eps}", marker="o", logy=True)
        scale = rows[0]["mean"] / noise_scale(c, 2, c["n_eps"], c["k"], es[0])
        ax.plot(es, [scale * noise_scale(c, 2, c["n_eps"], c["k"], e) for e in es], ":",
                color="gray", label="noise scale (B ~ (e^eps+1)/(e^eps-1)), matched at left")
    ax.set_title("error vs epsilon", fontsize=10)
    ax.set_xlabel("epsilon (each user, pure LDP)")

    ax = axes[2]
    for alg, ls in ((2, "-"), (4, "--")):
        n_k = _plan(c, c["n_k"], c["rounds"] if alg == 2 else c["rounds4"])[2]
        rows = sorted([r for r in summary if r["method"] == f"alg{alg}" and r["n"] == n_k
                       and r["panel"] in ("n", "k") and r["epsilon"] == c["eps_k"]],
                      key=lambda r: r["k"])
        if rows:
            drawn[2] = True
            ks = [r["k"] for r in rows]
            plotting.draw_curve(ax, ks, [r["mean"] for r in rows], [r["se"] for r in rows],
                                f"Alg {alg}, n={n_k}", marker="o", linestyle=ls, logy=True,
                                color=f"C{alg}")
            scale = rows[0]["mean"] / noise_scale(c, alg, c["n_k"], ks[0], c["eps_k"])
            ax.plot(ks, [scale * noise_scale(c, alg, c["n_k"], k, c["eps_k"]) for k in ks],
                    ":", color="gray")
    ax.plot([], [], ":", color="gray", label="noise scale sqrt(k') B, matched at k=1")
    ax.set_title(f"error vs k (k' = {c['c_k']}k, eps={c['eps_k']:g})", fontsize=10)
    ax.set_xlabel("k")
    for ax, has_rows in zip(axes, drawn):
        if not has_rows:  # no log axes without data: "not run" instead
            ax.cla()
            ax.text(0.5, 0.5, "not run (--set panels / methods / n)", ha="center",
                    va="center", transform=ax.transAxes, color="gray")
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylabel("||theta_hat - theta*||_2")
        ax.legend(fontsize=7)
    finish_figure(fig, path, "LDP-IHT (Zhu et al. 2024, Algs 2 and 4) and Alg 1 at equal "
                  "epsilon; ")
    write_csv(Path(path).with_name("slopes.csv"), slopes(summary, c))


EXPERIMENTS = [
    Experiment(
        name="ldp_iht",
        title="LDP sparse regression (Zhu et al. 2024), Algorithms 2 and 4 (LDP-IHT): error vs "
              "n, epsilon and k; Alg 2 vs Alg 1",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        reps=5, quick_reps=2,
        summary_extra=("indefinite",),
        # Algorithm 1's keys: columns of every row, read only where Alg 1 is in the study
        # (`--set methods=alg2` runs LDP-IHT alone)
        level_columns=("delta", "r", "lam"),
        description="Per-user randomised gradients, each round's group streamed in chunks; "
        "fitted slopes beside the theory and the exact noise scale in slopes.csv. See "
        "experiments/reports/ldp_iht.md.",
    )
]
