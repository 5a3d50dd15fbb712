"""The worked example of ``docs/adding_an_estimator.md`` as an experiment: the DP mean of
:mod:`dpjax.examples.dp_mean`, its error against epsilon beside its non-private limit.

Not a paper's figure: the page's last step, from a registered estimator to a typed,
reproducible study (``dpjax run dp_mean --out DIR``, ``--quick``, ``--set eps_grid=...``).
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from dpjax import sweep
from dpjax.config import Config, param
from dpjax.examples import dp_mean
from dpjax.plotting import Curve, Mark, Panel, curve_stats, final_rows, plot_panels
from dpjax.study import Experiment


@dataclasses.dataclass(frozen=True)
class DPMeanConfig(Config):
    n: int = param(1000, ge=2, doc="number of records")
    d: int = param(3, ge=1, doc="dimension of each record")
    clip: float = param(4.0, gt=0, doc="clipping radius C")
    eps_grid: tuple[float, ...] = param((0.25, 0.5, 1.0), gt=0,
                                        doc="the epsilons (the non-private run is always added)")


DEFAULTS = DPMeanConfig()
QUICK = dataclasses.replace(DEFAULTS, n=200)


def init(key, truth):  # data-independent starting value
    del key
    return jnp.zeros_like(truth)


def record(state, truth):  # what the figure needs, per step
    return {"error": jnp.linalg.norm(state.beta - truth)}


def settings(c: DPMeanConfig) -> list[sweep.Setting]:
    levels = tuple({"epsilon": e, "delta": 1 / (2 * c.n), "clip": c.clip}
                   for e in (*c.eps_grid, math.inf))
    return [sweep.Setting(
        key=f"dp-mean,n={c.n},d={c.d}", columns={"method": "dp-mean", "n": c.n, "d": c.d},
        estimator=dp_mean.DP_MEAN, simulate=dp_mean.simulate, init=init, record=record,
        truth=np.ones(c.d), plan=sweep.DataPlan(num_blocks=1, block_size=c.n),
        hparams_type=dp_mean.MeanHyperparams, levels=levels, n=c.n)]


def plot(iter_rows, summary, c: DPMeanConfig, path) -> None:
    rows = final_rows(iter_rows)  # one row per level and repetition: the released mean
    _, nonprivate, _ = curve_stats(rows, {"epsilon": math.inf}, "n")
    panel = Panel(f"n = {c.n}, d = {c.d}, C = {c.clip:g}",
                  [Curve("DP mean", {"method": "dp-mean"}, marker="o")],
                  x="epsilon", xlabel="epsilon",
                  marks=[Mark(float(nonprivate[0]), "clipped mean, no noise", axis="y",
                              role="nonprivate")])
    plot_panels(rows, [panel], path, ylabel="mean ||mu_hat - mu||_2",
                suptitle="DP mean (docs/adding_an_estimator.md): error against epsilon")


EXPERIMENTS = [
    Experiment(
        name="dp_mean",
        title="Worked example (docs/adding_an_estimator.md): DP mean, error against epsilon",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot, reps=20, quick_reps=5,
        description="Not a paper's figure: the estimator of dpjax/examples/dp_mean.py run as "
        "a study, with its non-private limit.",
    )
]
