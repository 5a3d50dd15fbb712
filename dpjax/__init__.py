"""dpjax: differentially private statistical estimation in JAX.

Faithful implementations of published DP estimators (DP-EM, DP GLMs, DP IV regression, ...),
each with an honest privacy ledger, and an engine that runs whole Monte Carlo studies
(repetitions x privacy levels) as one compiled kernel per shape.

Modules:
    mechanisms  -- noise, clipping, NoisyHT/peeling, calibration from a statistic's sensitivity
    accounting  -- (eps, delta) and zCDP budgets, composition, conversion, the privacy ledger
    base        -- the estimator protocol (init / step) and the lax.scan driver
    models      -- statistical models: simulators, E-steps / gradients, truncated statistics
    algorithms  -- the estimators of the papers
    calibrate   -- the noise at which an estimator's ledger spends its whole budget
"""

from importlib import metadata as _metadata

from dpjax import accounting, algorithms, base, mechanisms, models
from dpjax import discrete_noise as discrete_noise  # floating-point-safe noise
from dpjax.accountant import Accountant
from dpjax.accounting import ZCDP, ApproxDP, Ledger, PrivacyBudgetError
from dpjax.base import Estimator, FitResult, fit, run
from dpjax.calibrate import calibrate, calibrated_fit
from dpjax.mechanisms import BoundedStatistic

try:  # one place for the version: pyproject.toml
    __version__ = _metadata.version("dpjax")
except _metadata.PackageNotFoundError:  # pragma: no cover - a source tree, not installed
    __version__ = "unknown"

__all__ = [
    "Accountant",
    "ApproxDP",
    "BoundedStatistic",
    "Estimator",
    "FitResult",
    "Ledger",
    "PrivacyBudgetError",
    "ZCDP",
    "accounting",
    "algorithms",
    "base",
    "calibrate",
    "calibrated_fit",
    "fit",
    "mechanisms",
    "models",
    "run",
]
