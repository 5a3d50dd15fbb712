"""The real-data tables of Cai, Wang & Zhang ("Figure 3", spec 003 §5) on a substitute data set.

The paper fits sparse logistic regression by Algorithm 5 to the UCI Swarm Behaviour data
(n = 24016, d = 2400), which cannot be loaded offline. Substitute (documented deviation): the
Wisconsin breast-cancer data bundled with scikit-learn (569 records, 30 features; label
malignant = 1), or with ``--set dataset=digits`` scikit-learn's handwritten digits (1797 records,
64 pixels; label "digit >= 5").

Protocol, per repetition (the paper's where it states it):

1. split the records at random into two halves (training / test), the permutation drawn from the
   repetition's key (:class:`dpjax.sweep.PerRepetition`: the study runs through the sweep
   engine like the simulations, with its keys, chunking, resume and ledgers);
2. scale the features with the mean and standard deviation of the *test* half -- public with
   respect to the training records, so the fit stays DP for them (the paper states no
   preprocessing) -- clip to ``[-clip, clip]`` and divide by ``clip`` (so ``sigma_x = 1``), and
   append an intercept column of ones;
3. fit Algorithm 5 on the training half: ``T = 50``, ``eta = 0.5``, ``beta0 = 0`` (paper), ``R = 1``
   (``y`` in {0, 1}), ``B = 8`` as printed, for every ``s`` in ``s_grid``, ``epsilon`` in
   ``eps_grid`` and ``delta`` in {``1/(2 n)``, ``1/n^2``} with ``n`` the training size;
4. report the test misclassification rate of the rule ``x^T beta > 0``.

The paper's ``s`` in {25, 50, 100} exceeds ``d = 31`` here; ``s_grid`` is chosen for this
``d``. Results: mean and standard error over repetitions, in the form of the paper's tables.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import sweep
from dpjax.algorithms import dp_glm
from dpjax.config import Config, ConfigError, param
from dpjax.experiments._common import INF, eps_label
from dpjax.models.glm import GLM, GLMData
from dpjax.plotting import Curve, Panel, plot_panels
from dpjax.study import Experiment

COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "black"]
DELTA_RULES = ("1/(2n)", "1/n^2")

DATASETS = ("breast_cancer", "digits")


@dataclasses.dataclass(frozen=True)
class RealConfig(Config):
    dataset: str = param("breast_cancer", choices=DATASETS,
                         doc="scikit-learn's bundled data set")
    T: int = param(50, ge=1, doc="iterations")
    eta: float = param(0.5, gt=0, doc="step size")
    R: float = param(1.0, gt=0, doc="truncation level of y")
    b_constant: float = param(4.0, ge=2, doc="c in the declared sensitivity B = 2c")
    clip: float = param(3.0, gt=0, doc="features clipped to [-clip, clip] after scaling")
    s_grid: tuple[int, ...] = param((5, 10, 20), ge=1, doc="the algorithm's sparsities s")
    eps_grid: tuple[float, ...] = param((0.2, 0.5, INF), gt=0, allow_inf=True,
                                        doc="the epsilons (inf: non-private)")


DEFAULTS = RealConfig()
QUICK = dataclasses.replace(DEFAULTS, s_grid=(5, 10))


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Features and 0/1 labels of a data set bundled with scikit-learn (no download)."""
    from sklearn import datasets

    if name == "breast_cancer":
        x, y = datasets.load_breast_cancer(return_X_y=True)
        return x.astype(np.float64), (y == 0).astype(np.float64)  # 1 = malignant
    if name == "digits":
        x, y = datasets.load_digits(return_X_y=True)
        return x.astype(np.float64), (y >= 5).astype(np.float64)
    raise ConfigError(f"--set dataset: expected breast_cancer or digits, got {name!r}")


@functools.cache
def _arrays(name: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = load(name)
    return x.astype(np.float32), y.astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Split:
    """Repetition ``r``'s public split, drawn from its key (steps 1-2 of the protocol):
    ``draw(key) -> (x_train, y_train, x_test, y_test)``, features scaled by the test half."""

    dataset: str
    clip: float

    def draw(self, key: jax.Array):
        x, y = (jnp.asarray(a) for a in _arrays(self.dataset))
        n_all = x.shape[0]
        perm = jax.random.permutation(key, n_all)
        train, test = perm[: n_all // 2], perm[n_all // 2:]
        mu, sd = x[test].mean(axis=0, keepdims=True), x[test].std(axis=0, keepdims=True)
        sd = jnp.where(sd > 0, sd, 1.0)
        z = jnp.clip((x - mu) / sd, -self.clip, self.clip) / self.clip
        z = jnp.concatenate([z, jnp.ones((n_all, 1), z.dtype)], axis=1)
        return z[train], y[train], z[test], y[test]


def _train(key, m, split):
    del key, m  # the repetition's training half (a public split of fixed data)
    return GLMData(split[0], split[1])


def _zeros(key, split):
    del key
    return jnp.zeros(split[0].shape[1], split[0].dtype)  # the paper's beta0 = 0


def _test_error(state, split):
    """Misclassification rate of ``x^T beta > 0`` on the repetition's test half."""
    x_test, y_test = split[2], split[3]
    return {"error": jnp.mean(((x_test @ state.beta) > 0) != (y_test > 0.5))}


def settings(c):
    x, _ = _arrays(c["dataset"])
    n = x.shape[0] // 2
    d = x.shape[1] + 1  # with the intercept
    split = sweep.PerRepetition(Split(c["dataset"], c["clip"]).draw)
    out = []
    for s in c["s_grid"]:
        est = dp_glm.noisy_iht(GLM(), s, c["T"], c["b_constant"], calibration="paper")
        for rule, delta in zip(DELTA_RULES, (1.0 / (2 * n), 1.0 / n**2)):
            levels = tuple(
                {"epsilon": e, "delta": delta, "eta": c["eta"], "truncation": c["R"],
                 "rho": dp_glm.calibrate_rho(e, delta, "paper", c["T"])}
                for e in c["eps_grid"])
            out.append(sweep.Setting(
                key=f"alg5,s={s},delta={rule}",
                columns={"dataset": c["dataset"], "method": "alg5", "n": n, "d": d, "s": s,
                         "delta_rule": rule, "T": c["T"]},
                estimator=est, simulate=_train, init=_zeros, record=_test_error, truth=split,
                plan=sweep.DataPlan(1, n), hparams_type=dp_glm.GLMHyperparams, levels=levels,
                n=n, data_group="splits"))  # every setting sees the repetition's split
    return out


def plot(iter_rows, summary, c, path):
    del iter_rows
    panels = []
    for rule in DELTA_RULES:
        curves = [Curve(eps_label(e), {"delta_rule": rule, "epsilon": e},
                        COLORS[i] if math.isfinite(e) else "black",
                        "-" if math.isfinite(e) else "--", "o")
                  for i, e in enumerate(c["eps_grid"])]
        panels.append(Panel(f"delta = {rule}", curves, x="s", xlabel="sparsity s"))
    rows = []
    for r in summary:
        # two points whose mean is the cell mean and whose s.e. (n = 2) is the cell s.e.
        se = r["se"] if np.isfinite(r["se"]) else 0.0
        for sign in (-1.0, 1.0):
            rows.append(r | {"error": r["mean"] + sign * se})
    plot_panels(rows, panels, path, logy=False, ylabel="test misclassification rate",
                suptitle=(f"Alg 5 on {c['dataset']} (substitute for the Swarm data), T={c['T']}, "
                          f"eta={c['eta']:g}"))


EXPERIMENTS = [
    Experiment(
        name="glm_real",
        title="DP GLM paper, real-data tables (Alg 5): misclassification vs epsilon and s, "
        "on scikit-learn's breast cancer data (substitute for Swarm)",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        quick_reps=3,
        description="Random half splits; Alg 5 with the paper's T = 50, eta = 0.5 on the "
        "training half, misclassification on the test half; delta = 1/(2n) and 1/n^2.",
    )
]
