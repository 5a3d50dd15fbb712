r"""Noise mechanisms, clipping, and calibration from (sensitivity, budget) to a noise scale.

Every privatised quantity in dpjax is a :class:`BoundedStatistic`: a value together with its
sensitivity, the norm the sensitivity is measured in, and the neighbouring relation. The
mechanisms below take a ``BoundedStatistic`` and calibrate their noise from *its* sensitivity
only, so a noise scale can never be computed from a constant retyped at a call site, and a
mechanism refuses a statistic whose sensitivity is in the wrong norm.

All functions here are pure, draw randomness only from an explicit key, and are safe under
``jit`` and ``vmap``: privacy levels (``epsilon``, ``delta``, ``rho``) are array arguments, so a
study can ``vmap`` over them. ``epsilon = inf`` (or ``rho = inf``) gives exactly zero noise, never
``inf * 0 = nan``.

Calibrations (all scale parametrisations; ``log`` is natural):

=====================  =====================================================  ============
mechanism               noise per coordinate                                  guarantee
=====================  =====================================================  ============
Laplace                 ``b = Delta_1 / epsilon``                             (eps, 0)
Gaussian (default)      the classic ``sigma`` below for ``epsilon <= 1``, the   (eps, delta),
                        analytic one above (``calibration="classic-or-        every eps
                        analytic"``)
analytic Gaussian       ``sigma = Delta_2 / mu``, ``mu`` solving the exact    (eps, delta),
                        curve ``delta(mu, eps) = delta`` (Balle & Wang 2018)  every eps
classic Gaussian        ``sigma = Delta_2 sqrt(2 log(c/delta)) / epsilon``,   (eps, delta),
                        ``c = 1.25`` (Dwork & Roth Thm A.1)                   proven eps <= 1
zCDP Gaussian           ``sigma = Delta_2 / sqrt(2 rho)``                     rho-zCDP
NoisyHT / peeling       ``b = Delta_inf * 2 sqrt(3 s log(1/delta)) / epsilon`` (eps, delta)
=====================  =====================================================  ============

Whatever the calibration, the ledger reads a Gaussian release's (epsilon, delta) off the exact
Gaussian privacy curve of the noise actually drawn (:func:`dpjax.accounting.gaussian_epsilon`),
so a calibration used outside its proof (the classic formula at a large epsilon) reports the
weaker guarantee it really delivers. That guarantee is the idealised mechanism's, with
continuous noise: the floating-point samplers drawn here have a bounded support (float32
normal ``[-5.4200, 5.2201]``, Laplace ``[-15.54, 16.64]``), and the ledger states the delta
floor this implies (:mod:`dpjax._float_sampler`); :func:`secure_noise` draws exact noise.
The noise is drawn in the statistic's dtype, and the event records that dtype, so the ledger
checks the scale where it is drawn (a scale subnormal there is flushed to zero: no noise).

The package is split by responsibility; every public name of its modules is importable from
``dpjax.mechanisms`` itself:

=====================================  ======================================================
module                                  holds
=====================================  ======================================================
:mod:`dpjax.mechanisms.statistics`      :class:`BoundedStatistic`, :class:`PrivacyEvent`,
                                        bounded sums and means
:mod:`dpjax.mechanisms.clipping`        :func:`sanitize`, :func:`clip_l2`, :func:`clip_linf`,
                                        :func:`l2_norm`, :func:`clipped_outer_mean`,
                                        :func:`clipped_outer_sum`,
                                        :func:`clipped_outer_mean_from_sum`, :func:`records_dot`,
                                        :func:`rows_dot`
:mod:`dpjax.mechanisms.calibration`     the multipliers and scales of the table above
:mod:`dpjax.mechanisms.secure`          :func:`secure_noise`: exact discrete noise
:mod:`dpjax.mechanisms.noise`           the Laplace and Gaussian mechanisms and their draws
:mod:`dpjax.mechanisms.peeling`         :func:`noisy_hard_threshold`, :func:`hard_threshold`
:mod:`dpjax.mechanisms.local`           :func:`local_mechanism`, the randomized-response coin
=====================================  ======================================================

Each module imports only the ones above it in this table (and :mod:`dpjax.discrete_noise`,
:mod:`dpjax._float_sampler`, :mod:`dpjax._gaussian_curve` below the package), at the top.
"""

from __future__ import annotations

from dpjax.mechanisms.calibration import (
    GAUSSIAN_CALIBRATIONS,
    PEELING_CALIBRATIONS,
    check_gaussian_mean,
    epsilon_constant,
    gaussian_multiplier,
    gaussian_multiplier_analytic,
    gaussian_multiplier_classic,
    gaussian_multiplier_zcdp,
    gaussian_sigma,
    gaussian_sigma_classic,
    gaussian_sigma_zcdp,
    laplace_multiplier,
    laplace_scale,
    noise_scale,
    peeling_coordinate_epsilon,
    peeling_multiplier,
    peeling_scale,
)
from dpjax.mechanisms.calibration import (
    _analytic_mu_jnp as _analytic_mu_jnp,  # used by the layers above
)
from dpjax.mechanisms.clipping import (
    _scaled_l2 as _scaled_l2,  # used by the layers above
)
from dpjax.mechanisms.clipping import (
    clip_l2,
    clip_linf,
    clipped_outer_mean,
    clipped_outer_mean_from_sum,
    clipped_outer_sum,
    l2_norm,
    records_dot,
    rows_dot,
    sanitize,
)
from dpjax.mechanisms.local import (
    RESPONSE_BITS,
    implemented_flip_probability,
    local_mechanism,
    randomized_response_bit,
    response_flip_threshold,
    response_probability,
)
from dpjax.mechanisms.noise import (
    gaussian_mechanism,
    gaussian_mechanism_zcdp,
    gaussian_noise,
    laplace_mechanism,
    laplace_noise,
)
from dpjax.mechanisms.peeling import Peeled, hard_threshold, noisy_hard_threshold
from dpjax.mechanisms.secure import (
    NOISE_FACTOR_KINDS,
    SECURE_KINDS,
    PlannedEvent,
    secure_active,
    secure_event,
    secure_noise,
)
from dpjax.mechanisms.secure import (
    _secure_plan as _secure_plan,  # used by the layers above
)
from dpjax.mechanisms.statistics import (
    KINDS,
    NORMS,
    RELATIONS,
    ZCDP_KINDS,
    BoundedStatistic,
    MechanismKind,
    Norm,
    PrivacyEvent,
    bounded_mean,
    bounded_mean_from_sum,
    bounded_sum,
    no_privacy_event,
    with_sensitivity_margin,
)
from dpjax.mechanisms.statistics import (
    _event as _event,  # used by the layers above
)

__all__ = [
    "KINDS",
    "NORMS",
    "RELATIONS",
    "ZCDP_KINDS",
    "BoundedStatistic",
    "MechanismKind",
    "Norm",
    "PrivacyEvent",
    "bounded_mean",
    "bounded_mean_from_sum",
    "bounded_sum",
    "no_privacy_event",
    "with_sensitivity_margin",
    "clip_l2",
    "clip_linf",
    "clipped_outer_mean",
    "clipped_outer_mean_from_sum",
    "clipped_outer_sum",
    "records_dot",
    "rows_dot",
    "l2_norm",
    "sanitize",
    "GAUSSIAN_CALIBRATIONS",
    "PEELING_CALIBRATIONS",
    "check_gaussian_mean",
    "epsilon_constant",
    "gaussian_multiplier",
    "gaussian_multiplier_analytic",
    "gaussian_multiplier_classic",
    "gaussian_multiplier_zcdp",
    "gaussian_sigma",
    "gaussian_sigma_classic",
    "gaussian_sigma_zcdp",
    "laplace_multiplier",
    "laplace_scale",
    "noise_scale",
    "peeling_coordinate_epsilon",
    "peeling_multiplier",
    "peeling_scale",
    "NOISE_FACTOR_KINDS",
    "SECURE_KINDS",
    "PlannedEvent",
    "secure_active",
    "secure_event",
    "secure_noise",
    "gaussian_mechanism",
    "gaussian_mechanism_zcdp",
    "gaussian_noise",
    "laplace_mechanism",
    "laplace_noise",
    "Peeled",
    "hard_threshold",
    "noisy_hard_threshold",
    "RESPONSE_BITS",
    "implemented_flip_probability",
    "local_mechanism",
    "randomized_response_bit",
    "response_flip_threshold",
    "response_probability",
]
