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
"""

from importlib import metadata as _metadata

from dpjax import _checkout, accounting, algorithms, base, mechanisms, models
from dpjax.accounting import ZCDP, ApproxDP, Ledger
from dpjax.base import Estimator, run
from dpjax.mechanisms import BoundedStatistic

_checkout.install(__path__[0])  # dpjax.experiments of a source checkout (see dpjax._checkout)

try:  # one place for the version: pyproject.toml
    __version__ = _metadata.version("dpjax")
except _metadata.PackageNotFoundError:  # pragma: no cover - a source tree, not installed
    __version__ = "unknown"

__all__ = [
    "ApproxDP",
    "BoundedStatistic",
    "Estimator",
    "Ledger",
    "ZCDP",
    "accounting",
    "algorithms",
    "base",
    "mechanisms",
    "models",
    "run",
]
