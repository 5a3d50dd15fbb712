r"""Differentially private EM (Zhang & Zhang; spec 000), one generic step for every model.

The generic iteration (spec 000 Alg 2 / Alg 4) on batch ``B_t`` of ``n0 = floor(n / N0)``
records, disjoint across iterations:

.. math::

    \beta^{t+0.5} = \beta^t + \eta\, f_T(\nabla Q_{n_0}(\beta^t; \beta^t)), \qquad
    \beta^{t+1} = \mathcal{P}(\beta^{t+0.5}),

where the model supplies the truncated statistic ``f_T`` *with* its l-infinity replace-one
sensitivity ``lambda_t`` (a :class:`~dpjax.mechanisms.BoundedStatistic`), and the privatiser
``P`` is

* ``"noisy-ht"`` -- NoisyHT / peeling with ``s_hat`` coordinates and Laplace scale
  ``lambda_t 2 sqrt(3 s_hat log(1/delta)) / epsilon`` (high-dimensional Algs 2, 3, 5, 6);
* ``"gaussian"`` -- the classic Gaussian mechanism with ``Delta_2 = sqrt(d) lambda_t``
  (low-dimensional Algs 4, 7, 8);
* ``"top-s"`` / ``"none"`` -- the non-private twins (truncated EM of Wang et al. 2015 and
  gradient EM of Balakrishnan et al. 2017) on the *unclipped* gradient, with or without sample
  splitting.

Models (``dpjax.models``) and the paper's algorithms they give:

=======================================  ==========================  =======================
model                                    ``hd_dp_em`` (NoisyHT)      ``ld_dp_em`` (Gaussian)
=======================================  ==========================  =======================
``GaussianMixture``, ``2T/n0``           Alg 3                       Alg 4
``MixtureOfRegressions``, ``4T^2/n0``    Alg 5                       Alg 7
``RegressionMissingCovariates``,         Alg 6                       Alg 8
``(6T^2 + ||beta^t||_inf)/n0`` (A4)
=======================================  ==========================  =======================

A model supplies ``simulate``, ``gradient``, ``truncated_gradient`` (a ``BoundedStatistic``),
``dummy_batch``, ``validate_data``, ``dim``, ``num_records``, ``name``, and optionally
``variant``, ``sensitivity_formula``, ``ledger_notes`` and
``ex_post_notes`` (facts read off the public iterates after a fit).

Privacy (replace-one): each iteration is (epsilon, delta)-DP with respect to its own batch given
the previous (public) iterate, and the batches are disjoint, so the whole run is
(epsilon, delta)-DP by adaptive parallel composition (spec 000 Lemma 3.3). The budget is not
divided by ``N0``. ``beta0`` must not depend on the data.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _pld, _validate, registry
from dpjax.accounting import ApproxDP, Ledger, Release, parallel_pld
from dpjax.algorithms._boundary import check_model, checked_inputs, host_solved
from dpjax.base import ROW_BLOCK as BASE_ROW_BLOCK
from dpjax.base import Estimator, FitResult, Padded, batch_size, fit, fold_affine
from dpjax.mechanisms import (
    PrivacyEvent,
    gaussian_mechanism,
    hard_threshold,
    no_privacy_event,
    noisy_hard_threshold,
    peeling_coordinate_epsilon,
)
from dpjax.models.protocol import EMModel, algorithm_view

__all__ = [
    "CALIBRATIONS",
    "DPEMHyperparams",
    "DPEMInfo",
    "DPEMState",
    "FitResult",
    "default_hparams",
    "default_num_iterations",
    "default_truncation",
    "fit_gradient_em",
    "fit_hd_dp_em",
    "fit_ld_dp_em",
    "fit_truncated_em",
    "gradient_em",
    "hd_dp_em",
    "ld_dp_em",
    "peeling_epsilon_coord",
    "truncated_em",
]

Privatiser = Literal["noisy-ht", "gaussian", "top-s", "none"]
Calibration = Literal["pld", "tight", "paper"]
#: noise calibrations of the private estimators: ``"pld"`` (the peeling's default: each
#: iteration's NoisyHT release spends the whole budget by privacy loss distributions, solved on
#: the host into ``hparams.epsilon_coord``; for the Gaussian privatiser the same as ``"tight"``),
#: ``"tight"`` (the Gaussian's default: the least noise the per-release bound proves) and
#: ``"paper"`` (the papers' printed formula)
CALIBRATIONS: tuple[str, ...] = ("pld", "tight", "paper")


class DPEMHyperparams(NamedTuple):
    """Swept hyperparameters (arrays; a study may ``vmap`` over any of them)."""

    epsilon: jax.Array  # () budget of the whole run (each iteration spends it on its own batch)
    delta: jax.Array  # ()
    eta: jax.Array  # () step size
    truncation: jax.Array  # () truncation level T (inf: none; only with epsilon = inf)
    # () hd-dp-em under calibration "pld" only: the per-coordinate epsilon Delta_inf / b of each
    # iteration's peeling noise, solved on the host (default_hparams(..., s_hat=s)) so that the
    # release composes by PLD to (epsilon, delta); inf at epsilon = inf. NaN: not solved (hd-dp-em
    # under "pld" then draws the per-release bound's "tight" noise, and its ledger says so).
    epsilon_coord: jax.Array = np.float32(np.nan)

    POSITIVE = ("eta", "truncation")  # in (0, inf], checked with the budgets by dpjax.fit
    # computed on the host from epsilon, delta (and the static s_hat): a study level may leave it
    # out (NaN: not solved), and it is not part of a level's id (the fields it derives from are)
    DERIVED = ("epsilon_coord",)


class DPEMState(NamedTuple):
    beta: jax.Array  # (d,) current iterate


class DPEMInfo(NamedTuple):
    noise_scale: jax.Array  # () Laplace scale (noisy-ht) or Gaussian sigma (gaussian); 0 if none
    # (s_hat,) int32 selected coordinates; (0,) for the low-dim privatisers; the padded form's:
    # (s_max,), entries from s_hat on d (no coordinate, see dpjax.mechanisms.Peeled)
    support: jax.Array
    events: tuple[PrivacyEvent]  # the step's one release (kind "none" for the baselines)


def default_num_iterations(n: int) -> int:
    """``N0 = ceil(log n)`` (spec 000 §7 A5)."""
    return max(1, math.ceil(math.log(n)))


def default_truncation(n: int) -> float:
    """``T = sqrt(log n)`` (spec 000 §7 A5, ``c_T = 1``)."""
    return math.sqrt(math.log(n))


def default_hparams(
    n: int,
    epsilon: Any,
    delta: Any = None,
    eta: Any = 0.5,
    truncation: Any = None,
    s_hat: int | None = None,
) -> DPEMHyperparams:
    """Hyperparameters with the spec-000 defaults: ``delta = 1/(2n)``, ``T = sqrt(log n)``.

    ``s_hat``: given, ``epsilon_coord`` is solved on the host for hd-dp-em's default peeling
    calibration ``"pld"`` (:func:`peeling_epsilon_coord`); else it is NaN.
    Values are NumPy arrays (they broadcast, so a grid of privacy levels is fine).
    """
    delta = 1.0 / (2.0 * n) if delta is None else delta
    truncation = default_truncation(n) if truncation is None else truncation
    b = np.broadcast_arrays(
        *(np.asarray(v, dtype=np.float64) for v in (epsilon, delta, eta, truncation))
    )
    coord = np.full(b[0].shape, np.nan) if s_hat is None else np.vectorize(
        lambda e, d_: peeling_epsilon_coord(e, d_, s_hat), otypes=[np.float64])(b[0], b[1])
    return DPEMHyperparams(*(x.astype(np.float32) for x in (*b, coord)))


def peeling_epsilon_coord(epsilon: float, delta: float, s_hat: int) -> float:
    """hd-dp-em's ``epsilon_coord`` under calibration ``"pld"``: the largest per-coordinate
    epsilon ``Delta_inf / b`` whose NoisyHT release of ``s_hat`` coordinates (``s_hat`` rounds
    of ``2 epsilon_coord``-DP, ``s_hat`` Laplace coordinates) composes by PLD to at most
    ``(epsilon, delta)`` (:func:`dpjax._pld.peeling_ratio`, 0.999 of it), rounded down to
    float32; ``inf`` at epsilon = inf. Each iteration spends it on its own batch (parallel
    composition). Without dp_accounting (the ``[pld]`` extra): NaN, i.e. not solved -- the
    release then draws the ``"tight"`` per-release noise and its ledger says so."""
    _validate.check_int_in_range(s_hat, "s_hat", 1)
    if not math.isfinite(float(epsilon)):
        return math.inf
    if not _pld.available():
        # a plain install (no [pld] extra): unsolved, so the release falls back to the tight
        # per-step bound's noise exactly, which the ledger's fallback composition proves
        return math.nan
    r = np.float32(_pld.peeling_ratio(int(s_hat), 1, float(epsilon), float(delta)))
    return float(np.nextafter(r, np.float32(0)))  # float32, never above the solved ratio


# --------------------------------------------------------------------------------------------
# The generic step
# --------------------------------------------------------------------------------------------


#: rows per block of a padded step's statistic over records (:func:`dpjax.base.fold_affine`):
#: settings of every batch size from 2048 rows up share a program. Smaller blocks cost more
#: than they save at small d: gradient EM on 25000 rows of d = 10 ran 1.74x its unblocked
#: time in blocks of 512 (a loop iteration's overhead against 5120 numbers of work)
ROW_BLOCK = BASE_ROW_BLOCK


def _make_step(model: EMModel, privatiser: Privatiser, s_hat: int | None,
               calibration: Calibration = "paper", row_block: int | None = None):
    """The step; ``s_hat = None`` for a sparse privatiser: the padded form's, with ``s_hat`` at
    runtime from ``sizes.slots`` (the peeling and top-``s`` with ``s_max``), and its statistic
    over records added up in blocks of ``row_block`` rows up to the count
    (:func:`dpjax.base.fold_affine`)."""
    runtime_s = s_hat is None and privatiser in ("noisy-ht", "top-s")

    def step(key, state: DPEMState, batch, hp: DPEMHyperparams, sizes=None):
        s, s_max = sizes.sparsity(_NAMES[privatiser]) if runtime_s else (s_hat, None)
        beta = state.beta
        zero = jnp.zeros((), beta.dtype)
        no_support = jnp.zeros((0,), jnp.int32)
        if privatiser in ("noisy-ht", "gaussian"):
            if sizes is None:
                stat = model.truncated_gradient(beta, batch, hp.truncation)
            else:  # a padded batch: its mask's rows, n0 = sizes.count (see _padded)
                count = sizes.count.astype(beta.dtype)
                stat = fold_affine(lambda rows, m: model.truncated_gradient(
                    beta, rows, hp.truncation, mask=m, count=count), batch, sizes.mask,
                    row_block)
            stat = stat.scale(hp.eta).shift(beta)  # beta^{t+0.5}, lambda_t = eta * sens(f_T)
            if privatiser == "noisy-ht":
                # unsolved (NaN): the per-release bound's scale; inf at epsilon = inf
                coord = peeling_coordinate_epsilon(hp.epsilon_coord, s, hp.epsilon,
                                                   hp.delta)
                peeled = (noisy_hard_threshold(key, stat, s, coord, hp.delta,
                                               "per-coordinate", s_max=s_max)
                          if calibration == "pld" else
                          noisy_hard_threshold(key, stat, s, hp.epsilon, hp.delta,
                                               calibration, s_max=s_max))
                ev = peeled.event
                return DPEMState(peeled.value), DPEMInfo(ev.scale.astype(beta.dtype),
                                                         peeled.support, (ev,))
            # Delta_2 = sqrt(d) * Delta_inf, as the paper prints; "paper": the classic formula
            # (epsilon <= 1), "tight": the analytic calibration (exact curve) at every epsilon
            new, ev = gaussian_mechanism(
                key, stat.in_norm("l2"), hp.epsilon, hp.delta,
                calibration="analytic" if calibration == "tight" else "classic-or-analytic")
            return DPEMState(new), DPEMInfo(ev.scale.astype(beta.dtype), no_support, (ev,))
        del key  # non-private: no randomness
        if sizes is None:
            half = beta + hp.eta * model.gradient(beta, batch)
        else:
            count = sizes.count.astype(beta.dtype)
            half = beta + hp.eta * fold_affine(
                lambda rows, m: model.gradient(beta, rows, mask=m, count=count), batch,
                sizes.mask, row_block)
        events = (no_privacy_event("linf"),)
        if privatiser == "top-s":
            peeled = hard_threshold(half, s, s_max=s_max)
            return DPEMState(peeled.value), DPEMInfo(zero, peeled.support, events)
        return DPEMState(half), DPEMInfo(zero, no_support, events)

    return step


def _init(beta0: Any) -> DPEMState:
    return DPEMState(jnp.asarray(beta0, dtype=jnp.result_type(float)))


_NAMES = {
    "noisy-ht": "hd-dp-em",
    "gaussian": "ld-dp-em",
    "top-s": "truncated-em",
    "none": "gradient-em",
}


@functools.lru_cache(maxsize=512)
def _build(
    model: EMModel,
    privatiser: Privatiser,
    num_iterations: int,
    s_hat: int | None,
    batching: Literal["disjoint", "full"],
    calibration: Calibration = "paper",
) -> Estimator:
    _validate.check_int_in_range(num_iterations, "num_iterations", 1)
    if privatiser in ("noisy-ht", "top-s"):
        _validate.check_int_in_range(s_hat, "s_hat", 1)
    if privatiser in ("noisy-ht", "gaussian") and batching != "disjoint":
        raise ValueError("the private DP-EM algorithms need sample splitting (disjoint batches)")
    name = f"{_NAMES[privatiser]}/{model.name}"
    ledger_fn = functools.partial(
        _ledger, name, model, privatiser, num_iterations, s_hat, batching, calibration
    )
    check = functools.partial(_check, model, num_iterations) \
        if privatiser in ("noisy-ht", "gaussian") else None
    return Estimator(
        name, _init, _make_step(model, privatiser, s_hat, calibration), num_iterations,
        batching, ledger_fn, check,
        _padded(algorithm_view(model), privatiser, s_hat, calibration, batching)
    )


@functools.lru_cache(maxsize=512)
def _padded(model: EMModel, privatiser: Privatiser, s_hat: int | None,
            calibration: Calibration, batching: str = "disjoint") -> Padded | None:
    """The padded form (one program for every ``n``, ``N0`` and ``s_hat``): the step reads
    nothing of ``n`` or ``N0`` but its data's count (``n0``, or ``n`` for the twins on all
    data), so it is the same step with the model's masked statistic; the sparse privatisers
    (hd-dp-em, truncated-em) take ``s_hat`` at runtime too (:attr:`Padded.sparsity`: the
    peeling's and top-``s``'s ``s_max`` is the program's), in one form shared by every
    ``s_hat`` but for that field; ``None`` where the model's statistics take no mask."""
    if not getattr(model, "supports_mask", False):
        return None
    # a model whose masked statistics add up over blocks of records (``blockwise``): the
    # step's work follows the count, and settings of every n share one program
    block = ROW_BLOCK if getattr(model, "blockwise", False) else None
    if privatiser in ("noisy-ht", "top-s"):
        return _padded_sparse(model, privatiser, calibration, batching, block)._replace(
            sparsity=s_hat)
    return Padded(f"{_NAMES[privatiser]}/{model.name}[s={s_hat},{calibration},{batching}]",
                  _init, _make_step(model, privatiser, s_hat, calibration, block), batching,
                  row_block=block)


@functools.lru_cache(maxsize=512)
def _padded_sparse(model: EMModel, privatiser: Privatiser, calibration: Calibration,
                   batching: str, row_block: int | None = None) -> Padded:
    """The sparse privatisers' padded form, with ``s_hat`` at runtime (one object for every
    ``s_hat``: the sweep's cache key)."""
    return Padded(f"{_NAMES[privatiser]}/{model.name}[{calibration},{batching}]",
                  _init_padded, _make_step(model, privatiser, None, calibration, row_block),
                  batching, row_block=row_block)


def _init_padded(beta0: Any, sizes: Any) -> DPEMState:
    """The sparse padded form's init (``init(params0, sizes)``): the start, as :func:`_init`."""
    del sizes  # the start is not thresholded (hd_dp_em's fits check its support)
    return _init(beta0)


def _check(model: EMModel, num_iterations: int, n: int, hp: DPEMHyperparams, dtype) -> None:
    """Refuse a truncation level on public values only, before anything runs (a refusal never
    depends on the data). The model's truncated statistic on one all-zero record at
    ``beta = 0``, in ``dtype``, gives the width ``w`` of a record's term at level ``T`` (its
    sensitivity at ``n0 = 1``: ``2T`` for the GMM, ``4T^2`` for MoR, ``6T^2`` for RMC); the
    update's sensitivity ``eta w / n0`` must be a normal number of ``dtype`` and the batch sum
    of ``n0`` terms (at most ``n0 w / 2`` each way) must not overflow it."""
    eps = float(np.asarray(hp.epsilon))
    if not math.isfinite(eps):
        return
    t_level = float(np.asarray(hp.truncation))
    n0 = batch_size(n, num_iterations)
    with jax.ensure_compile_time_eval():
        one = model.truncated_gradient(jnp.zeros((1,), dtype), model.dummy_batch(1, 1),
                                       jnp.asarray(t_level, dtype))
        width = float(np.asarray(one.sensitivity, np.float64))
    with np.errstate(over="ignore", invalid="ignore"):
        _validate.check_noise_inputs("truncation", t_level,
                                     float(np.asarray(hp.eta)) * width / max(n0, 1),
                                     max(n0, 1) * width / 2.0, dtype)


def hd_dp_em(model: EMModel, s_hat: int, num_iterations: int,
             calibration: Calibration = "pld") -> Estimator:
    """High-dimensional DP-EM with NoisyHT (spec 000 Alg 2; Alg 3/5/6 by ``model``).

    Args:
        model: a model with ``truncated_gradient`` (e.g.
            :class:`~dpjax.models.gmm.GaussianMixture`); hashable, bound statically.
        s_hat: the number of coordinates kept each iteration (static).
        num_iterations: ``N0``, also the number of disjoint batches (static).
        calibration: the peeling Laplace scale: ``"pld"`` (default; the smallest scale
            whose release -- ``s_hat`` report-noisy-max rounds and ``s_hat`` Laplace
            coordinates -- composes by privacy loss distributions to (epsilon, delta), from
            ``hparams.epsilon_coord``, which :func:`default_hparams` solves with
            ``s_hat=s_hat``; the ledger composes by PLD within a batch, in parallel across),
            ``"tight"`` (the smallest scale the per-release bound proves,
            :func:`dpjax.accounting.peeling_epsilon`: the ledger's basic/advanced composition
            reads back the whole (epsilon, delta)) or ``"paper"`` (the printed
            ``lambda 2 sqrt(3 s log(1/delta)) / epsilon``, which the ledger reads back as
            about half of epsilon at the papers' budgets). See
            :func:`dpjax.mechanisms.peeling_multiplier`.
    """
    _validate.check_choice(calibration, "calibration", CALIBRATIONS)
    return _build(model, "noisy-ht", num_iterations, s_hat, "disjoint", calibration)


def ld_dp_em(model: EMModel, num_iterations: int,
             calibration: Calibration = "tight") -> Estimator:
    """Low-dimensional DP-EM with the Gaussian mechanism (spec 000 Alg 4/7/8).

    ``calibration``: ``"tight"`` (default; the analytic Gaussian calibration, which the exact
    curve -- the PLD of one Gaussian release -- reads back as the whole (epsilon, delta); ``"pld"``
    is the same) or ``"paper"`` (the classic ``sqrt(2 log(1.25/delta)) / epsilon`` for
    epsilon <= 1, the analytic one above: 0.59 of epsilon = 1 at delta = 1/400).
    """
    _validate.check_choice(calibration, "calibration", CALIBRATIONS)
    calibration = "tight" if calibration == "pld" else calibration
    return _build(model, "gaussian", num_iterations, None, "disjoint", calibration)


def truncated_em(
    model: EMModel, s_hat: int, num_iterations: int, sample_splitting: bool = True
) -> Estimator:
    """Non-private truncated (top-``s_hat``) gradient EM of Wang et al. (2015), no clipping."""
    return _build(model, "top-s", num_iterations, s_hat, "disjoint" if sample_splitting else "full")


def gradient_em(model: EMModel, num_iterations: int, sample_splitting: bool = True) -> Estimator:
    """Non-private gradient EM of Balakrishnan et al. (2017), no clipping."""
    return _build(model, "none", num_iterations, None, "disjoint" if sample_splitting else "full")


# --------------------------------------------------------------------------------------------
# Ledger
# --------------------------------------------------------------------------------------------


def _ledger(
    name: str,
    model: EMModel,
    privatiser: Privatiser,
    N0: int,
    s_hat: int | None,
    batching: str,
    calibration: str,
    n: int,
    hparams: DPEMHyperparams,
    events: tuple[PrivacyEvent],
) -> Ledger:
    """The privacy ledger of one run (one privacy level) on ``n`` records, composed from the
    run's privacy events (one per iteration)."""
    eps = float(np.asarray(hparams.epsilon))
    delta = float(np.asarray(hparams.delta))
    eta = float(np.asarray(hparams.eta))
    t_level = float(np.asarray(hparams.truncation))
    n0 = batch_size(n, N0) if batching == "disjoint" else n
    notes = [
        f"n = {n}, N0 = {N0}, n0 = {n0}" + (
            f" (= floor(n/N0)); {n - n0 * N0} records unused" if batching == "disjoint" else ""
        ),
        f"eta = {eta:g}, T = {t_level:g}",
    ]
    data = (f"disjoint batch of n0 = {n0} records" if batching == "disjoint"
            else f"all {n} records every iteration")
    if privatiser in ("top-s", "none"):
        release = Release.from_event(
            events[0], "beta^t + eta*grad Q(beta^t; beta^t) (no clipping, no noise)", data)
        notes.append("non-private baseline")
        return Ledger.build(name, [release], "parallel", variant="non-private", notes=notes)

    formula = f"eta*({model.sensitivity_formula})"
    if privatiser == "gaussian":
        formula = f"sqrt(d)*{formula}"
    release = Release.from_event(
        events[0], f"beta^t + eta*f_T(grad Q_n0(beta^t; beta^t)) on batch t; sensitivity "
        f"{formula}", data)
    if release.sensitivity_ratio != 1.0:
        notes.append(f"true/declared sensitivity = {release.sensitivity_ratio:g}: the delivered "
                     "guarantee uses the true one")
    notes.extend(model.ledger_notes)
    if calibration == "tight":
        notes.append("tight calibration: the noise is the least the ledger's bound proves for "
                     "the requested budget" + (" (analytic Gaussian)" if privatiser == "gaussian"
                                               else " (peeling)"))
    if calibration == "pld":
        notes.append(f"PLD calibration: each iteration's peeling scale is the least whose "
                     f"{s_hat} report-noisy-max rounds and {s_hat} Laplace coordinates compose "
                     "by PLD to the request (the papers' per-release bound is calibration="
                     "'paper' or 'tight')")
        if math.isfinite(eps) and np.isnan(np.asarray(hparams.epsilon_coord)).any():
            notes.append("epsilon_coord not solved (NaN in the hyperparameters): each "
                         "release's peeling at the per-release bound's ('tight') scale "
                         "instead, which the PLD composition reads as less than the request "
                         "(solve it with default_hparams(..., s_hat=s_hat))")
        return parallel_pld(name, release, requested=ApproxDP(eps, delta), delta=delta,
                            variant=model.variant, notes=notes,
                            what=f"{N0} disjoint batches")
    return Ledger.build(
        name, [release], "parallel", variant=model.variant, requested=ApproxDP(eps, delta),
        notes=notes,
    )


# --------------------------------------------------------------------------------------------
# The convenience API
# --------------------------------------------------------------------------------------------


_EM_MODEL = ("dpjax.models.EMModel (e.g. GaussianMixture, MixtureOfRegressions, "
             "RegressionMissingCovariates)")


def _fit(
    privatiser: Privatiser,
    key: Any,
    data: Any,
    model: EMModel,
    *,
    beta0: Any,
    epsilon: Any,
    s_hat: int | None = None,
    delta: Any = None,
    eta: Any = 0.5,
    truncation: Any = None,
    num_iterations: int | None = None,
    sample_splitting: bool = True,
    on_invalid: str = "raise",
    secure: bool = False, accountant: Any = None,
    calibration: Calibration | None = None,
) -> FitResult:
    check_model(model, EMModel, _EM_MODEL)
    if calibration is None:
        calibration = "pld" if privatiser == "noisy-ht" else "tight"
    _validate.check_choice(calibration, "calibration", CALIBRATIONS)
    if calibration == "pld" and not _pld.available():
        calibration = "tight"  # no dp_accounting (the [pld] extra): the per-release bound's
    a = checked_inputs(key, data, model.validate_data, model.num_records, on_invalid=on_invalid,
                   num_iterations=num_iterations, default_iterations=default_num_iterations,
                   at_most_n=sample_splitting, iterations_name="num_iterations (N0)",
                   epsilon=epsilon, delta=delta, eta=eta)
    data, n, N0, eps, delta = a.data, a.n, a.num_iterations, a.epsilon, a.delta
    d = model.dim(data)
    truncation = default_truncation(n) if truncation is None else truncation
    _validate.check_truncation(truncation, eps)
    if privatiser in ("noisy-ht", "top-s"):
        s_hat = _validate.check_int_in_range(s_hat, "s_hat", 1, d)
    beta0 = _validate.check_start(beta0, d, s_hat if privatiser == "noisy-ht" else None, "s_hat")
    if privatiser == "noisy-ht":
        estimator = hd_dp_em(model, s_hat, N0, calibration)
    elif privatiser == "gaussian":
        estimator = ld_dp_em(model, N0, calibration)
    elif privatiser == "top-s":
        estimator = truncated_em(model, s_hat, N0, sample_splitting)
    else:
        estimator = gradient_em(model, N0, sample_splitting)
    hp = default_hparams(n, eps, delta, eta, truncation,
                         s_hat=s_hat if privatiser == "noisy-ht" and calibration == "pld"
                         else None)
    res = fit(estimator, a.key, data, beta0, hp, n=n, secure=secure, accountant=accountant)
    if privatiser in ("noisy-ht", "gaussian"):
        # Facts computed from the public iterates beta^0 .. beta^{N0-1} (post-processing).
        used = np.concatenate([np.asarray(beta0, np.float64)[None], res.trace[:-1]], axis=0)
        extra = model.ex_post_notes(used, float(truncation), float(eps), float(delta))
        res = res._replace(ledger=dataclasses.replace(res.ledger,
                                                      notes=res.ledger.notes + tuple(extra)))
    return res


@_validate.host_only
def fit_hd_dp_em(
    key: Any,
    data: Any,
    model: EMModel,
    *,
    epsilon: Any,
    delta: Any = None,
    s_hat: int,
    beta0: Any,
    eta: Any = 0.5,
    truncation: Any = None,
    num_iterations: int | None = None,
    on_invalid: str = "raise",
    secure: bool = False, accountant: Any = None,
    calibration: Calibration | None = None,
) -> FitResult:
    """Fit high-dimensional DP-EM (spec 000 Alg 2; Alg 3/5/6 by ``model``) to one data set.

    Default calibration ``"tight"``: the peeling noise is the least the ledger proves, so the
    fit delivers the requested (epsilon, delta) (to 1e-5). ``calibration="paper"`` is the
    printed formula, which delivers about half of epsilon (0.50 at epsilon = 1, s_hat = 2,
    delta = 1/(2n) with n = 200).

    Args:
        key: PRNG key (or int seed) for the noise.
        data: the model's data (e.g. :class:`~dpjax.models.gmm.GMMData` or an ``(n, d)`` array;
            :class:`~dpjax.models.mor.MoRData`; :class:`~dpjax.models.rmc.RMCData`).
        model: the statistical model, e.g. ``GaussianMixture(sigma=0.5)``,
            ``MixtureOfRegressions(0.5)``, ``RegressionMissingCovariates(1.0)``.
        s_hat: coordinates kept per iteration, ``1 <= s_hat <= d``.
        beta0: data-independent initial value with at most ``s_hat`` non-zeros.
        epsilon: in (0, inf]; inf gives the non-private limit with exactly zero noise.
        delta: in (0, 1); default ``1/(2n)`` (the paper's experiments; the one delta policy of
            every ``fit_*``, the privacy page's "One fit contract, one delta policy").
        eta: step size > 0 (default 0.5, the paper's experiments).
        truncation: ``T`` in (0, inf]; default ``sqrt(log n)``; inf only with epsilon = inf.
        num_iterations: ``N0`` in [1, n]; default ``ceil(log n)``.
        on_invalid: ``"raise"`` (default; right for simulations) or ``"clip"`` (real data; see
            the privacy page's "Bad records on real data").
        secure: the floating-point-safe noise path for a real release (see
            :func:`dpjax.fit`): each peeling step rounds its statistic to a public grid,
            selects by exact permute-and-flip and releases with exact discrete Laplace noise,
            at the same composition of its rounds (see
            :func:`dpjax.mechanisms.noisy_hard_threshold`); the ledger's releases are
            ``"discrete-noisy-ht"``.
        calibration: ``"tight"`` (the default, ``None``) or ``"paper"`` (:func:`hd_dp_em`).
        accountant: a :class:`dpjax.Accountant` this fit spends from (see :func:`dpjax.fit`):
            refused before anything runs if it would exceed the total.

    Returns:
        :class:`FitResult` with the estimate, the iterates, and the privacy ledger:
        (epsilon, delta)-DP under replace-one adjacency for the corrected models (a
        paper-literal variant's ledger states what it really delivers).
    """
    return _fit("noisy-ht", key, data, model, beta0=beta0, epsilon=epsilon, delta=delta,
                eta=eta, truncation=truncation, num_iterations=num_iterations, s_hat=s_hat,
                on_invalid=on_invalid, secure=secure, calibration=calibration,
                accountant=accountant)


@_validate.host_only
def fit_ld_dp_em(
    key: Any, data: Any, model: EMModel, *, epsilon: Any, delta: Any = None, beta0: Any,
    eta: Any = 0.5, truncation: Any = None, num_iterations: int | None = None,
    on_invalid: str = "raise", secure: bool = False, accountant: Any = None,
    calibration: Calibration | None = None,
) -> FitResult:
    """Fit low-dimensional DP-EM (spec 000 Alg 4/7/8 by ``model``) to one data set: the
    Gaussian mechanism on the whole truncated update. Arguments as :func:`fit_hd_dp_em` without
    ``s_hat`` (``beta0`` any data-independent start); ``secure=True`` is available.

    Default calibration ``"tight"``: the analytic Gaussian calibration, which delivers the
    requested (epsilon, delta) (to 1e-4). ``calibration="paper"`` is the classic formula
    (epsilon <= 1), which delivers 0.59 of epsilon = 1 at delta = 1/(2n) with n = 200; it is
    the same with ``secure=True``, whose noise factor (:func:`dpjax.fit`) makes the discrete
    noise deliver the request under its zCDP accounting."""
    return _fit("gaussian", key, data, model, beta0=beta0, epsilon=epsilon, delta=delta,
                eta=eta, truncation=truncation, num_iterations=num_iterations,
                on_invalid=on_invalid, secure=secure, calibration=calibration,
                accountant=accountant)


@_validate.host_only
def fit_truncated_em(
    data: Any,
    model: EMModel,
    *,
    s_hat: int,
    beta0: Any,
    num_iterations: int,
    eta: Any = 0.5,
    sample_splitting: bool = False,
) -> FitResult:
    """Non-private truncated gradient EM of Wang et al. (2015): ``beta <- top_s(beta + eta grad
    Q_n(beta; beta))``, no clipping, no noise; every iteration on all data
    (``sample_splitting=False``, default) or on its own disjoint batch. Deterministic; its
    ledger says "not DP"."""
    return _baseline("top-s", data, model, s_hat=s_hat, beta0=beta0,
                     num_iterations=num_iterations, eta=eta, sample_splitting=sample_splitting)


@_validate.host_only
def fit_gradient_em(
    data: Any, model: EMModel, *, beta0: Any, num_iterations: int, eta: Any = 0.5,
    sample_splitting: bool = False,
) -> FitResult:
    """Non-private gradient EM of Balakrishnan et al. (2017): ``beta <- beta + eta grad
    Q_n(beta; beta)``, on all data (default) or one disjoint batch per iteration; arguments as
    :func:`fit_truncated_em` without ``s_hat``. Deterministic; its ledger says "not DP"."""
    return _baseline("none", data, model, beta0=beta0, num_iterations=num_iterations, eta=eta,
                     sample_splitting=sample_splitting)


def _baseline(privatiser: Privatiser, data: Any, model: EMModel, *, beta0: Any,
              num_iterations: int, eta: Any, sample_splitting: bool,
              s_hat: int | None = None) -> FitResult:
    return _fit(privatiser, jax.random.key(0), data, model, beta0=beta0, epsilon=math.inf,
                truncation=math.inf, num_iterations=num_iterations, eta=eta, s_hat=s_hat,
                sample_splitting=sample_splitting)


# --------------------------------------------------------------------------------------------
# Registry: every estimator with a small example problem (the conformance suite runs over it)
# --------------------------------------------------------------------------------------------


def _example(model: EMModel, d: int, seed: int) -> registry.Example:
    from dpjax.models import sparse_unit_beta

    n, s = 400, 2
    beta = sparse_unit_beta(d, s)
    data = model.simulate(jax.random.key(seed), n, jnp.asarray(beta))

    def hp(eps):
        # epsilon_coord: hd-dp-em's default ("pld") peeling calibration, solved per level
        coord = host_solved(lambda e: peeling_epsilon_coord(e, 1 / (2 * n), s), eps)
        return DPEMHyperparams(*map(jnp.float32, (eps, 1 / (2 * n), 0.5, 2.0)), coord)

    return registry.Example(data, beta * 0.9, hp)


def _register() -> None:
    from dpjax.models import GaussianMixture, MixtureOfRegressions, RegressionMissingCovariates

    def req(eps):
        return ("epsilon", eps)

    gmm = GaussianMixture(0.5)
    models = [(gmm, 12, 0), (MixtureOfRegressions(0.5), 10, 1),
              (RegressionMissingCovariates(1.0, 0.2), 10, 1)]
    for model, d, seed in models:
        example = functools.partial(_example, model, d, seed)
        registry.register(registry.Entry(
            f"hd-dp-em/{model.name}", "dp-em", functools.partial(hd_dp_em, model, 2, 4),
            example, requested=req))
        registry.register(registry.Entry(
            f"ld-dp-em/{model.name}", "dp-em", functools.partial(ld_dp_em, model, 4), example,
            requested=req))
    example = functools.partial(_example, gmm, 12, 0)
    registry.register(registry.Entry("truncated-em/gmm", "dp-em",
                                     functools.partial(truncated_em, gmm, 2, 4), example,
                                     private=False))
    registry.register(registry.Entry("gradient-em/gmm", "dp-em",
                                     functools.partial(gradient_em, gmm, 4, False), example,
                                     private=False))


_register()
