"""Statistical models: simulators, E-steps and gradients, and truncated statistics with the bound
that makes them bounded."""

from dpjax.models.glm import GLM, GLMData, sparse_sphere_beta, sphere_beta
from dpjax.models.gmm import GaussianMixture, GMMData, sparse_unit_beta
from dpjax.models.iv import IVData, IVParameters, LinearIV
from dpjax.models.mor import MixtureOfRegressions, MoRData
from dpjax.models.protocol import EMModel, prefix_stable
from dpjax.models.rmc import RegressionMissingCovariates, RMCData

__all__ = [
    "EMModel",
    "GLM",
    "GLMData",
    "GMMData",
    "GaussianMixture",
    "IVData",
    "IVParameters",
    "LinearIV",
    "MixtureOfRegressions",
    "MoRData",
    "RMCData",
    "RegressionMissingCovariates",
    "prefix_stable",
    "sparse_sphere_beta",
    "sparse_unit_beta",
    "sphere_beta",
]
