"""The real-data table of Zhang & Zhang (printed as "Table 3", captioned "Figure 3"; spec 000 §5):
Algorithm 3 (high-dimensional DP-EM for the Gaussian mixture) as a two-class clusterer on the
Breast Cancer Wisconsin (Diagnostic) data.

Data: scikit-learn's bundled copy (``sklearn.datasets.load_breast_cancer``: 569 records, 30
attributes, 212 malignant, 357 benign). Pipeline, as the paper states it:

1. standardise every attribute to mean 0 and variance 1 (over all 569 records);
2. drop 145 benign records at random (424 remain: 212 + 212);
3. subtract the overall mean of the 424 records;
4. split at random into 70% training (297) and 30% test (127).

Steps 2-4 are redrawn in every repetition from the repetition's key (the paper does not say; this
is the reading that makes its "repeat the whole training and testing stages 50 times" vary the
data): the split is a :class:`dpjax.sweep.PerRepetition` truth shared by every method, and the
study runs through the sweep engine like the simulations (keys, chunks, resume, ledgers).

Training (stated): Algorithm 3 for ``N0 = 50`` iterations, ``eta = 0.5``,
``beta0 = (1/sqrt(30)) 1``, ``delta = 1/(2 n_train)``, ``s_hat in {5, 10, 15}``,
``epsilon in {0.2, 0.5, inf}``. Unstated, chosen here: ``sigma = 1`` (the attributes have unit
variance); ``T = sqrt(log n_train) = 2.39``; 50 iterations means 50 disjoint batches of
``floor(297/50) = 5`` records (47 training records unused), as the privacy proof requires
(spec 000 §7 A6). Testing: a test record is called malignant iff ``<x, beta_hat> > 0``, i.e. it is
closer to ``beta_hat`` than to ``-beta_hat``; the orientation is the one fixed by ``beta0`` (all
attributes are size/shape measurements, larger for malignant tumours), no labels are used (A7).
We also record the label-switching-free rate ``min(err, 1 - err)``.

Methods: ``alg3`` (the paper's configuration); ``wang2015`` (the paper's epsilon = inf baseline:
non-private truncated EM of Wang et al. 2015 on all training records in each of the 50
iterations, no truncation); and, our addition, ``alg3-logn`` with the theory's
``N0 = ceil(log n_train) = 6`` batches of 49 records.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import sweep
from dpjax.algorithms import dp_em
from dpjax.config import Config, ConfigError, param
from dpjax.experiments._common import COLORS, INF, eps_label, final_rows
from dpjax.models import GaussianMixture, GMMData
from dpjax.plotting import Claim, Curve, Panel, plot_panels
from dpjax.study import Experiment

N_RECORDS, N_FEATURES, N_MALIGNANT = 569, 30, 212


@dataclasses.dataclass(frozen=True)
class Table3Config(Config):
    s_hat_grid: tuple[int, ...] = param((5, 10, 15), ge=1, le=N_FEATURES,
                                        doc="the algorithm's sparsities s_hat")
    eps_grid: tuple[float, ...] = param((0.2, 0.5), gt=0,
                                        doc="the epsilons (eps = inf is always added)")
    num_iterations: int = param(50, ge=1,
                                doc="N0: iterations, each on its own batch of training records")
    eta: float = param(0.5, gt=0, doc="step size")
    sigma: float = param(1.0, gt=0, doc="the mixture's noise standard deviation")
    truncation_const: float = param(1.0, gt=0,
                                    doc="truncation level T = truncation_const sqrt(log n)")
    num_dropped: int = param(145, ge=0, lt=N_RECORDS - N_MALIGNANT,
                             doc="benign records dropped at random in each repetition")
    train_fraction: float = param(0.7, gt=0, lt=1, doc="the fraction of records for training")
    extra_logn_variant: bool = param(True, doc="also run Alg 3 with N0 = ceil(log n_train)")

    def check(self) -> None:
        kept = N_RECORDS - self.num_dropped
        n_train = int(round(self.train_fraction * kept))
        if not 1 <= n_train < kept:
            raise ConfigError(f"--set train_fraction: must leave at least one training and one "
                              f"test record of the {kept}; got {self.train_fraction!r}")
        if self.num_iterations > n_train:
            raise ConfigError(f"--set num_iterations: must be <= the number of training records "
                              f"({n_train}: one batch of at least one record per iteration); "
                              f"got {self.num_iterations}")


# The paper's Table 3: mean misclassification rate by s_hat (columns) and eps (rows; its
# eps = inf row is the non-private baseline), as printed (spec 000 §5).
PAPER_S_HAT = (5, 10, 15)
PAPER_TABLE3 = {0.2: (0.14, 0.12, 0.10), 0.5: (0.08, 0.07, 0.07), INF: (0.07, 0.06, 0.06)}

DEFAULTS = Table3Config()
QUICK = dataclasses.replace(DEFAULTS, s_hat_grid=(10,))


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def load_standardised() -> tuple[np.ndarray, np.ndarray]:
    """``(X, malignant)``: the 569 x 30 attributes standardised to mean 0, variance 1 (ddof 0),
    and a boolean label (scikit-learn codes malignant as 0)."""
    try:
        from sklearn.datasets import load_breast_cancer
    except ImportError as exc:  # pragma: no cover - scikit-learn is in the [dev] extra
        raise SystemExit("em_table3 needs scikit-learn (pip install scikit-learn)") from exc
    raw = load_breast_cancer()
    x = np.asarray(raw.data, np.float64)
    x = (x - x.mean(0)) / x.std(0)
    return x, np.asarray(raw.target) == 0


@functools.cache
def _arrays() -> tuple[np.ndarray, np.ndarray]:
    x, malignant = load_standardised()
    return x.astype(np.float32), malignant


@dataclasses.dataclass(frozen=True)
class Split:
    """Repetition ``r``'s public preprocessing, drawn from its key (steps 2-4 above): drop
    ``num_dropped`` random benign records, centre by the mean of the rest, shuffle, split.
    ``draw(key) -> (x_train, y_train, x_test, y_test)`` (labels: 1.0 = malignant)."""

    num_dropped: int = 145
    train_fraction: float = 0.7

    def sizes(self) -> tuple[int, int]:
        kept = N_RECORDS - self.num_dropped
        n_train = int(round(self.train_fraction * kept))
        return n_train, kept - n_train

    def draw(self, key: jax.Array):
        x, malignant = _arrays()
        key_drop, key_split = jax.random.split(key)
        benign = jnp.asarray(np.flatnonzero(~malignant))
        kept = jnp.concatenate([jnp.asarray(np.flatnonzero(malignant)),
                                jax.random.permutation(key_drop, benign)[self.num_dropped:]])
        xk = jnp.asarray(x)[kept]
        yk = jnp.asarray(malignant, jnp.float32)[kept]
        xk = xk - xk.mean(axis=0, keepdims=True)
        perm = jax.random.permutation(key_split, kept.shape[0])
        n_train, _ = self.sizes()
        tr, te = perm[:n_train], perm[n_train:]
        return xk[tr], yk[tr], xk[te], yk[te]


def _train(key, m, split):
    del key, m  # the repetition's training set (a public split of fixed data)
    return GMMData(split[0])


@dataclasses.dataclass(frozen=True)
class Beta0:
    """The paper's start ``beta0 = (1/sqrt(d)) 1`` (data-independent)."""

    d: int

    def __call__(self, key, split):
        del key, split
        return jnp.full((self.d,), self.d ** -0.5, jnp.float32)


def _test_error(state, split):
    """Misclassification of "malignant iff <x, beta> > 0" on the test set, and the rate free
    of label switching, ``min(err, 1 - err)``."""
    err = jnp.mean(((split[2] @ state.beta) > 0) != (split[3] > 0.5))
    return {"error": err, "error_sym": jnp.minimum(err, 1.0 - err)}


def _methods(c, n_train):
    out = []
    for s in c["s_hat_grid"]:
        out.append(("alg3", s, c["num_iterations"], (*sorted(c["eps_grid"]), INF)))
        out.append(("wang2015", s, c["num_iterations"], (INF,)))
        if c["extra_logn_variant"]:
            out.append(("alg3-logn", s, dp_em.default_num_iterations(n_train),
                        (*sorted(c["eps_grid"]), INF)))
    return out


def settings(c):
    split = Split(c["num_dropped"], c["train_fraction"])
    n_train, n_test = split.sizes()
    model = GaussianMixture(c["sigma"])
    T = c["truncation_const"] * dp_em.default_truncation(n_train)
    delta = 1.0 / (2 * n_train)
    out = []
    for method, s_hat, N0, epss in _methods(c, n_train):
        if method == "wang2015":
            est = dp_em.truncated_em(model, s_hat, N0, sample_splitting=False)
        else:
            est = dp_em.hd_dp_em(model, s_hat, N0, "paper")
        levels = tuple({"epsilon": e, "delta": delta, "eta": c["eta"],
                        "truncation": T if method != "wang2015" else INF} for e in epss)
        out.append(sweep.Setting(
            key=f"{method},s_hat={s_hat},N0={N0}",
            columns={"method": method, "n": n_train, "n_test": n_test, "d": N_FEATURES,
                     "s": s_hat, "s_hat": s_hat, "N0": N0,
                     "n0": n_train // N0 if method != "wang2015" else n_train},
            estimator=est, simulate=_train, init=Beta0(N_FEATURES), record=_test_error,
            truth=sweep.PerRepetition(split.draw), plan=sweep.DataPlan(1, n_train),
            hparams_type=dp_em.DPEMHyperparams, levels=levels, n=n_train,
            data_group="splits"))  # every method sees the repetition's split
    return out


def plot(iter_rows, summary, c, path):
    # Final-iterate rows for the panels against s_hat, all iterations for the last panel.
    rows = ([r | {"kind": "final"} for r in final_rows(iter_rows)]
            + [r | {"kind": "iter"} for r in iter_rows])
    N0 = c["num_iterations"]

    def curves(method):
        cs = [Curve(f"Alg 3, eps={e:g}", {"kind": "final", "method": method, "epsilon": e},
                    COLORS[i % 6], "-", "o") for i, e in enumerate(sorted(c["eps_grid"]))]
        cs.append(Curve("Alg 3, eps=inf (split, truncated, no noise)",
                        {"kind": "final", "method": method, "epsilon": INF}, marker="s"))
        cs.append(Curve("Wang et al. 2015 (full data, non-private)",
                        {"kind": "final", "method": "wang2015"}, marker="^", role="reference"))
        return cs

    # the paper's Table 3 (its eps = inf row is the non-private baseline), in the colours of
    # the measured curves at the same eps
    colors = {e: COLORS[i % 6] for i, e in enumerate(sorted(c["eps_grid"]))} | {INF: "black"}
    claims = [Claim(eps_label(e), "Table 3", x=PAPER_S_HAT, y=ys, color=colors[e])
              for e, ys in PAPER_TABLE3.items() if e in colors]
    panels = [Panel(f"(a) paper's N0={N0} (batches of ~5)", curves("alg3"), x="s_hat",
                    xlabel="s_hat", claims=claims)]
    if c["extra_logn_variant"]:
        panels.append(Panel("(b) added: N0=ceil(log n) (batches of ~49)", curves("alg3-logn"),
                            x="s_hat", xlabel="s_hat"))
    s_mid = sorted(c["s_hat_grid"])[len(c["s_hat_grid"]) // 2]
    it = [Curve(eps_label(e), {"kind": "iter", "method": "alg3", "s_hat": s_mid, "epsilon": e},
                COLORS[i % 6] if math.isfinite(e) else "black")
          for i, e in enumerate((*sorted(c["eps_grid"]), INF))]
    it.append(Curve("Wang et al. 2015", {"kind": "iter", "method": "wang2015", "s_hat": s_mid},
                    role="reference"))
    panels.append(Panel(f"(c) s_hat={s_mid}, N0={N0}: by iteration", it))
    plot_panels(rows, panels, path, ylabel="misclassification rate", logy=False,
                suptitle="Breast Cancer Wisconsin, Alg 3 (spec 000 §5)")


EXPERIMENTS = [
    Experiment(
        name="em_table3",
        title="DP-EM paper, Table 3: Breast Cancer Wisconsin, misclassification of Alg 3",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        summary_extra=("error_sym",),
        quick_reps=5,
        description="569 -> 424 records (145 benign dropped), centred, 70/30 split per "
        "repetition; Alg 3 with 50 iterations (batches of 5), s_hat in {5, 10, 15}, "
        "eps in {0.2, 0.5, inf}; Wang et al. (2015) as the non-private baseline.",
    )
]
