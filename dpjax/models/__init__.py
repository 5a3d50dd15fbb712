"""Statistical models: simulators, E-steps and gradients, and truncated statistics with the bound
that makes them bounded."""

from dpjax.models.gmm import GaussianMixture, GMMData, sparse_unit_beta
from dpjax.models.mor import MixtureOfRegressions, MoRData
from dpjax.models.rmc import RegressionMissingCovariates, RMCData

__all__ = [
    "GMMData",
    "GaussianMixture",
    "MixtureOfRegressions",
    "MoRData",
    "RMCData",
    "RegressionMissingCovariates",
    "sparse_unit_beta",
]
