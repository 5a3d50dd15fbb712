"""The estimator registry: every estimator registers once, with a small example problem.

The conformance suite (``tests/test_conformance.py``) runs over :func:`entries`, so a new
estimator is tested -- purity, determinism, vmap over keys and privacy levels, no recompile,
the non-private limit, and a ledger composed from its run's events that delivers the requested
budget -- by registering it. The worked example ``dpjax/examples/dp_mean.py`` ends with
(``tests/test_docs.py`` keeps this copy equal to the module)::

    def _example() -> registry.Example:
        n, d = 200, 3
        hparams = lambda eps: MeanHyperparams(*map(jnp.float32, (eps, 1 / (2 * n), 2.0)))
        return registry.Example(simulate(jax.random.key(0), n, jnp.ones(d)), jnp.zeros(d), hparams)


    registry.register(registry.Entry("dp-mean", "example", lambda: DP_MEAN, _example,
                                     requested=lambda eps: ("epsilon", eps)))

that is: the name, the family, ``build`` (the estimator), ``example`` (a small data set, a
data-independent start and ``hparams(level)``), and ``requested`` (the budget the estimator
must deliver at a level). The module's name is then listed once in ``_FAMILIES``.

Entries are registered when their module is imported (:mod:`dpjax.algorithms` imports every
family); :func:`entries` imports them first.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["Entry", "Example", "entries", "register"]


class Example(NamedTuple):
    """A small problem an estimator runs on in the conformance suite."""

    data: Any  # a data set (leaves with n rows)
    params0: Any  # a data-independent starting value
    hparams: Callable[[float], Any]  # privacy level (epsilon or rho; inf: none) -> hparams
    # which leaves of ``data`` are public (a pytree of bools with the data's structure, e.g.
    # ``(False, False, True)`` for a public sample that no neighbouring relation changes);
    # None: every leaf holds private records. The canary audit replaces private records only.
    public: Any = None


@dataclasses.dataclass(frozen=True)
class Entry:
    """A registered estimator.

    Attributes:
        name: unique, e.g. ``"hd-dp-em/gmm"``.
        family: the paper family (``"dp-em"``, ``"dp-glm"``, ``"dp-iv"``, ...).
        build: ``() -> Estimator`` at a small fixed configuration.
        example: ``() -> Example``.
        private: whether it draws noise (``False`` for the non-private baselines).
        requested: ``level -> (name, value)``: the guarantee its default variant delivers at
            that level (``("epsilon", 0.5)`` or ``("rho", 0.5)``); ``None`` to skip the check.
        ledger_private: the ledger's verdict when it differs from ``private`` (a paper variant
            that draws noise but is not DP as claimed).
    """

    name: str
    family: str
    build: Callable[[], Any]
    example: Callable[[], Example]
    private: bool = True
    requested: Callable[[float], tuple[str, float]] | None = None
    ledger_private: bool | None = None


_ENTRIES: dict[str, Entry] = {}
_FAMILIES = ("dpjax.algorithms.dp_em", "dpjax.algorithms.dp_gem", "dpjax.algorithms.dp_glm",
             "dpjax.algorithms.dp_iv", "dpjax.examples.dp_mean",
             "dpjax.algorithms.ldp_gem", "dpjax.algorithms.ldp_sparse",
             "dpjax.algorithms.baselines")


def register(entry: Entry) -> Entry:
    """Add ``entry``; a second registration under the same name must be the same entry."""
    old = _ENTRIES.get(entry.name)
    if old is not None and old != entry:
        raise ValueError(f"an estimator named {entry.name!r} is already registered")
    _ENTRIES[entry.name] = entry
    return entry


def entries(family: str | None = None) -> list[Entry]:
    """Every registered estimator (of ``family``), in registration order."""
    for module in _FAMILIES:
        importlib.import_module(module)
    return [e for e in _ENTRIES.values() if family is None or e.family == family]
