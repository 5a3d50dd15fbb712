"""Estimators, one module per paper family (init / step / run, plus a ``fit`` convenience API)."""

from dpjax.algorithms import dp_em, dp_gem, dp_glm, dp_iv, ldp_sparse

__all__ = ["dp_em", "dp_gem", "dp_glm", "dp_iv", "ldp_sparse"]
