"""Estimators, one module per family (init / step / run, plus a ``fit`` convenience API): a
paper's algorithms share a module (``dp_em``, ``dp_gem``, ``dp_glm``, ``dp_iv``,
``ldp_sparse``), and an estimator of ours that goes beyond its paper has its own (``ldp_gem``,
the local-DP gradient EM, whose names ``dp_gem`` re-exports); ``baselines`` holds the standard
baselines (AdaSSP, objective perturbation, the bounded mean). Modules named ``_*`` hold what
several of them share (the fits' argument checks, the gradient EM's common pieces)."""

from dpjax.algorithms import baselines, dp_em, dp_gem, dp_glm, dp_iv, ldp_gem, ldp_sparse

__all__ = ["baselines", "dp_em", "dp_gem", "dp_glm", "dp_iv", "ldp_gem", "ldp_sparse"]
