r"""A differentially private mean: the worked example of ``docs/adding_an_estimator.md``.

Records ``x_1, ..., x_n`` in ``R^d`` are clipped to the l2 ball of radius ``C``, and their mean
is released once with the Gaussian mechanism:

    mu_hat = (1/n) sum_i clip_C(x_i) + N(0, sigma^2 I_d),   clip_C(x) = x min(1, C / ||x||_2),
    sigma = (2 C / n) m(epsilon, delta),   m: the analytic calibration, the exact Gaussian
    curve solved for sigma (Balle & Wang 2018; the classic sqrt(2 log(1.25 / delta)) / epsilon
    over-noises for epsilon <= 1 and is unproven above).

Privacy: neighbouring data sets have the same size ``n`` and differ in one record (replace-one).
Two clipped records are at most ``2 C`` apart in l2, so the clipped mean moves by at most
``2 C / n`` and the release is (epsilon, delta)-DP at every epsilon, spending the request:
the guarantee of the idealised mechanism, with continuous noise (the ledger states the float
sampler's own floor; exact discrete noise with ``secure=True``). ``epsilon = inf`` adds
exactly zero noise.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from dpjax import registry
from dpjax.accounting import ApproxDP, Ledger, Release
from dpjax.base import Estimator
from dpjax.mechanisms import (
    PrivacyEvent,
    bounded_mean,
    check_gaussian_mean,
    clip_l2,
    gaussian_mechanism,
)


class MeanHyperparams(NamedTuple):
    epsilon: jax.Array  # () budget of the one release; inf: no noise
    delta: jax.Array  # () in (0, 1)
    clip: jax.Array  # () clipping radius C > 0
    POSITIVE = ("clip",)  # checked by dpjax.fit, with the budgets epsilon and delta


class MeanState(NamedTuple):
    beta: jax.Array  # (d,) the released mean; init is MeanState(params0)


class MeanInfo(NamedTuple):
    events: tuple[PrivacyEvent]  # the step's one release


def clipped_mean(x: jax.Array, clip: jax.Array):
    """The BoundedStatistic ``(1/n) sum_i clip_C(x_i)`` of ``x`` ``(n, d)``: l2, ``2 C / n``."""
    return bounded_mean(clip_l2(x, clip), 2.0 * clip, "l2")


def step(key: jax.Array, state: MeanState, x: jax.Array, hp: MeanHyperparams):
    """Release the clipped mean plus Gaussian noise: (epsilon, delta)-DP, replace-one."""
    del state  # a single release: the starting value plays no role
    beta, event = gaussian_mechanism(key, clipped_mean(x, hp.clip), hp.epsilon, hp.delta,
                                     calibration="analytic")
    return MeanState(beta), MeanInfo((event,))


def ledger(n: int, hp: MeanHyperparams, events: tuple[PrivacyEvent]) -> Ledger:
    """Compose the run's events (one release); record the budget that was asked for."""
    eps, delta = float(hp.epsilon), float(hp.delta)
    release = Release.from_event(events[0], "clipped mean (l2 radius C)", f"all {n} records")
    return Ledger.build("dp-mean", [release], "basic", requested=ApproxDP(eps, delta))


def check(n: int, hp: MeanHyperparams, dtype) -> None:
    """Refuse a level on public values only, before anything runs: ``2 C / n`` and sigma
    normal in ``dtype``, the sum ``n C`` plus the largest draw finite (never on the data)."""
    check_gaussian_mean("clip", hp.clip, n, hp.epsilon, hp.delta, dtype, "analytic")


DP_MEAN = Estimator("dp-mean", MeanState, step, num_steps=1, batching="full", ledger=ledger,
                    check=check)


def simulate(key: jax.Array, n: int, truth: jax.Array) -> jax.Array:
    """``n`` records ``N(truth, I_d)``, shape ``(n, d)``."""
    return truth[None, :] + jax.random.normal(key, (n, truth.shape[0]))


def _example() -> registry.Example:
    n, d = 200, 3
    hparams = lambda eps: MeanHyperparams(*map(jnp.float32, (eps, 1 / (2 * n), 2.0)))
    return registry.Example(simulate(jax.random.key(0), n, jnp.ones(d)), jnp.zeros(d), hparams)


registry.register(registry.Entry("dp-mean", "example", lambda: DP_MEAN, _example,
                                 requested=lambda eps: ("epsilon", eps)))
