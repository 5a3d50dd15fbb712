"""Statistical models: simulators, E-steps and gradients, and truncated statistics with the bound
that makes them bounded."""

from dpjax.models.gmm import GaussianMixture, GMMData, sparse_unit_beta

__all__ = ["GMMData", "GaussianMixture", "sparse_unit_beta"]
