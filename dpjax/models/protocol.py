"""What the DP-EM algorithms call on a model: a typed protocol (no duck typing by ``hasattr``).

Every model of the EM family (:class:`~dpjax.models.GaussianMixture`,
:class:`~dpjax.models.MixtureOfRegressions`, :class:`~dpjax.models.RegressionMissingCovariates`)
implements it; ``tests/test_models_protocol.py`` checks them against it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

import jax
import numpy as np

from dpjax.mechanisms import BoundedStatistic

__all__ = ["EMModel", "algorithm_view", "prefix_stable"]


def prefix_stable(simulate: Any) -> Any:
    """Mark a simulator ``simulate(key, n, truth)`` (a function, a method, or a class's
    ``__call__``) as prefix-stable: for every key, truth and ``n <= m``, its draw of ``n``
    records is the first ``n`` records of its draw of ``m``, each record a function of the key,
    its index and the truth. ``jax.random``'s draws are, in their leading axis (JAX's default
    threefry generator); a simulator that standardises over its records, permutes them or
    draws one value for all of them is not. A study then draws the data of the settings that
    share a compiled program in one data program, at the program's rows, the rows past a
    setting's own zeroed (:func:`dpjax.sweep.shares_data_program`), instead of compiling one
    per setting. Returns ``simulate``."""
    simulate.prefix_stable = True
    return simulate


@runtime_checkable
class EMModel(Protocol):
    """A latent-variable model for (DP) gradient EM (spec 000).

    Attributes:
        name: short name for estimator names and results.
        sensitivity_formula: the declared sensitivity of :meth:`truncated_gradient` as a
            formula (ledger text; the number comes from the statistic itself).
        variant: ``"corrected"`` or a ``"paper-literal: ..."`` label.
        ledger_notes: caveats the ledger of DP-EM (spec 000) prints.
        gradient_notes: what the ledger of DP gradient EM (spec 002) says of
            :meth:`per_sample_gradients` (a variant of them); ``()`` if nothing.
    """

    name: str
    sensitivity_formula: str

    @property
    def variant(self) -> str: ...

    @property
    def ledger_notes(self) -> tuple[str, ...]: ...

    @property
    def gradient_notes(self) -> tuple[str, ...]: ...

    def simulate(self, key: jax.Array, n: int, beta: jax.Array) -> Any:
        """``n`` records from the model at ``beta``."""

    def gradient(self, beta: jax.Array, data: Any) -> jax.Array:
        """Non-private ``grad Q_n(beta; beta)`` (no truncation)."""

    def per_sample_gradients(self, beta: jax.Array, data: Any) -> jax.Array:
        """``(n, d)``: each record's ``grad q_i(beta; beta)`` (spec 002 §2.7; DP gradient EM)."""

    def truncated_gradient(self, beta: jax.Array, data: Any, truncation: Any
                           ) -> BoundedStatistic:
        """The truncated statistic with its l-infinity replace-one sensitivity, finite and
        inside its bound for every record."""

    # Optional, for padded programs (``dpjax.algorithms.dp_em``): ``supports_mask = True``
    # where ``gradient`` and ``truncated_gradient`` take ``mask=`` and ``count=`` (only the
    # masked rows are records, ``count`` their public number); and ``blockwise = True`` where,
    # besides, each is the sum of the masked records' terms divided by ``count`` plus a part
    # that reads no record, and is defined on zero rows: a padded step then adds it up over
    # blocks of records, so settings of every ``n`` share one program.

    def dummy_batch(self, n: int, d: int) -> Any:
        """An all-zero batch of the right structure."""

    def validate_data(self, data: Any) -> Any:
        """Check a data set at the public boundary."""

    def num_records(self, data: Any) -> int: ...

    def dim(self, data: Any) -> int: ...

    def ex_post_notes(self, iterates: np.ndarray, truncation: float, epsilon: float,
                      delta: float) -> list[str]:
        """Facts read off the released iterates after a fit (post-processing); ``[]`` if none."""


def algorithm_view(model: Any) -> Any:
    """The model as the algorithms see it: the fields it names in ``simulation_fields`` (read
    by :meth:`EMModel.simulate` only, e.g. RMC's ``missing_prob``) set to their defaults.

    A padded estimator's compiled program is cached by the model's value, so settings whose
    models differ only in how their data are simulated share one program (the algorithm never
    reads those fields; each setting's data program keeps its own model). A model without
    ``simulation_fields`` is returned as it is."""
    fields = getattr(model, "simulation_fields", ())
    if not fields or not dataclasses.is_dataclass(model):
        return model
    defaults = {f.name: f.default for f in dataclasses.fields(model) if f.name in fields}
    return dataclasses.replace(model, **defaults)
