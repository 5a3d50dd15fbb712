"""Canary cases of the registered estimators: :func:`canary_case` searches for the neighbouring
pair whose noise-free releases lie farthest apart (:func:`_candidate_records`, then a greedy
search over single entries), fixes the attack statistic and reads the claim off the honest
ledger; :func:`registry_cases` builds one for every private registered estimator."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate, mechanisms
from dpjax.audit.canary import AUDIT_DELTA, CanaryCase, _beta_output, _gdp_mu
from dpjax.audit.engine import estimator_mechanism, flat_statistic
from dpjax.audit.plants import planted_bug, plants_reaching
from dpjax.audit.trajectory import _pilot, _Trajectories, _weights, trajectory_statistic
from dpjax.base import Estimator, probe_events

__all__ = ["AUDIT_LEVELS", "canary_case", "registry_cases"]

PyTree = Any


#: The privacy level of each family's registry example in its canary audit (default 1).
AUDIT_LEVELS = {"dp-iv": 0.25}


def registry_cases(names: list[str] | None = None, **kwargs: Any) -> list[CanaryCase]:
    """The canary cases of every private registered estimator (or of ``names``): the
    trajectory attack, audited against the GDP curve of the run's Gaussian events where there
    is one (else the ledger's rho-zCDP curve, else its (epsilon, delta)), at
    :data:`AUDIT_DELTA`. ``kwargs`` go to :func:`canary_case` (e.g. a smaller search)."""
    from dpjax import registry

    return [canary_case(e, AUDIT_LEVELS.get(e.family, 1.0), delta=AUDIT_DELTA,
                        attack="trajectory", claim="curve", **kwargs)
            for e in registry.entries()
            if e.private and (names is None or e.name in names)]


def canary_case(
    entry: Any,
    level: float = 1.0,
    *,
    hparams: PyTree = None,
    delta: float | None = None,
    num_candidates: int = 64,
    magnitude: float = 1e3,
    search_rounds: int = 4,
    seed: int = 0,
    attack: str = "final",
    claim: str = "ledger",
    pilot_trials: int = 256,
    chunk: int = 256,
) -> CanaryCase:
    """Build the canary audit of a registry entry at privacy ``level``.

    The adversarial neighbouring pair is found by search: ``num_candidates`` candidate records
    (:func:`_candidate_records`, each with its negation) are put in row ``index`` of the
    example data's private leaves (the leaves ``example.public`` marks, e.g. a public sample,
    stay fixed: the pair is a neighbouring pair of private data), the estimator is run with
    its noise multiplied by 0 (the same hyperparameters, so the same clipping and truncation)
    on each, and the two candidates whose
    noise-free outputs lie farthest apart become the canary (``data_in``) and its replacement
    (``data_out``).

    ``attack="final"``: the output is the final ``state.beta`` and the statistic projects a
    release on the direction between the two noise-free releases. ``attack="trajectory"``: the
    output of a candidate is its noise-free one-step change at every state of a reference
    noise-free path, weighted by the inverse noise variances of a pilot run
    (``pilot_trials`` honest runs on the example data; the pilot is independent of the audit's
    trials), and the statistic is :func:`trajectory_statistic` over every recorded iterate.

    The claim is the honest ledger's, read off the run's events on ``data_in`` at ``hparams``
    (default: ``example.hparams(level)``): its ``approx_dp``, or, when ``delta`` is given and
    the ledger's guarantee is rho-zCDP, the (epsilon, delta) that rho implies at that ``delta``
    (rho-zCDP implies a whole curve; a larger delta is where an audit with a few thousand
    trials can test it). ``claim="curve"`` (with ``delta``): where every release of the run is
    Gaussian with the same recorded scales in every pilot run, the claim is the mu-GDP curve
    those releases deliver at ``delta``, ``gaussian_epsilon(mu, delta)`` with
    ``mu = sqrt(sum_i (Delta_i / sigma_i)^2)`` from the recorded (true) sensitivities and
    scales (the maximum over steps under sample splitting). It is exact for the releases as
    recorded and sound for every delta, so it tests the calibration itself (a halved
    sensitivity doubles the true mu) where the ledger's single (epsilon, delta) point would
    need events of probability ``delta`` to be seen.

    A trajectory case carries its compiled audit (:class:`_Trajectories`; ``chunk`` runs per
    call), which :func:`audit_case` reuses for the honest and the planted trials.

    The pieces, in order: :func:`_setup` (the estimator, the level, the canary's row),
    :func:`_candidates`, :func:`_trajectory_search` or :func:`_final_search` (the noise-free
    outputs a candidate is judged by), :func:`_farthest_pair` and :func:`_local_search` (the
    pair), :func:`_honest_events` and :func:`_claim` (what the honest ledger claims).
    """
    _validate.check_choice(attack, "attack", ("final", "trajectory"))
    _validate.check_choice(claim, "claim", ("ledger", "curve"))
    s = _setup(entry, level, hparams)
    cands = _candidates(s.private, num_candidates, magnitude, seed)
    engine = weights = None
    if attack == "trajectory":
        engine, weights, pilot_events, noise_free_many = _trajectory_search(
            s, seed, pilot_trials, chunk)
    else:
        pilot_events, noise_free_many = _final_search(s, claim, seed, pilot_trials)
    pair = _local_search(_farthest_pair(cands, noise_free_many(cands)), noise_free_many,
                         magnitude, search_rounds)
    data_in = s.with_record(s.index, pair.rec_in)
    data_out = s.with_record(s.index, pair.rec_out)
    if attack == "trajectory":
        statistic = trajectory_statistic(s.estimator, s.hp, s.params0, data_in, data_out,
                                         weights)
    else:
        statistic = flat_statistic(pair.out_in - pair.out_out, pair.out_out)
    events = _honest_events(s, engine, pair.rec_in, data_in, seed)
    claim_eps, claim_delta, claim_kind, mu = _claim(s, events, delta, claim, pilot_events)
    return CanaryCase(entry.name, s.estimator, s.hp, s.params0, data_in, data_out, s.index,
                      statistic, claim_eps, claim_delta,
                      float(np.linalg.norm(pair.out_in - pair.out_out)), mu, None, attack,
                      claim_kind, engine, (pair.rec_in, pair.rec_out), weights,
                      plants_reaching(_release_kinds(events)))


class _Setup(NamedTuple):
    """What a canary search runs on: the registry entry's estimator and example."""

    estimator: Estimator
    hp: PyTree  # one privacy level's hyperparameters, as arrays
    params0: PyTree
    data: PyTree  # the example data
    private: list  # its private leaves (_private_records)
    with_record: Callable[[int, list], PyTree]  # data with a private row replaced
    n: int  # the number of private records
    index: int  # the canary's row: in the last batch under disjoint batching


def _setup(entry: Any, level: float, hparams: PyTree) -> _Setup:
    """The estimator and example of ``entry`` at ``level`` (or ``hparams``), and the canary's
    row (in the last batch under disjoint batching, so no later step washes it out)."""
    estimator = entry.build()
    example = entry.example()
    hp = example.hparams(level) if hparams is None else hparams
    hp = jax.tree_util.tree_map(jnp.asarray, hp)
    private, with_record = _private_records(example.data, example.public)
    n = private[0].shape[0]
    index = 0
    if estimator.batching == "disjoint":
        index = (estimator.num_steps - 1) * (n // estimator.num_steps)
    return _Setup(estimator, hp, example.params0, example.data, private, with_record, n, index)


def _candidates(private: list, num_candidates: int, magnitude: float, seed: int) -> PyTree:
    """``num_candidates`` records: half from :func:`_candidate_records`, and their negations."""
    half = _candidate_records(private, num_candidates // 2, magnitude, seed)
    return jax.tree_util.tree_map(lambda c: jnp.concatenate([c, -c]), half)


NoiseFree = Callable[[PyTree], np.ndarray]  # records (leading axis m) -> (m, output size)


def _trajectory_search(s: _Setup, seed: int, pilot_trials: int, chunk: int
                       ) -> tuple[_Trajectories, np.ndarray, PyTree, NoiseFree]:
    """The trajectory attack's compiled audit, its weights (inverse noise variances of a pilot
    of ``pilot_trials`` honest runs on the example data), the pilot's events, and the outputs
    a candidate is judged by: its noise-free one-step change at every iterate of the
    noise-free reference path on the example data, weighted by the square-root weights."""
    engine = _Trajectories(s.estimator, s.hp, s.params0, s.with_record, s.index, chunk)
    base = [leaf[s.index] for leaf in s.private]
    tile = engine.tile
    resid, pilot_events = [], []
    for x, a, _, ev in engine.runs(jax.random.key(seed + 0x9177), *[tile(base, pilot_trials)]
                                   * 3, pilot_trials):
        resid.append(x - a)
        pilot_events.append(ev)
    var = np.var(np.concatenate(resid)[:pilot_trials], axis=0)
    pilot_events = jax.tree_util.tree_map(
        lambda *v: np.concatenate(v)[:pilot_trials], *pilot_events)
    weights = _weights(var)
    sqrt_w = np.sqrt(weights)

    def noise_free_many(records):
        # the noise-free step from every iterate of the noise-free reference path on the
        # example data, on the data set with each record, minus the step on the example data
        m = jax.tree_util.tree_leaves(records)[0].shape[0]
        out = np.concatenate([a - b for _, a, b, _ in engine.runs(
            jax.random.key(0), tile(base, m), records, tile(base, m), m, noise=0.0)])[:m]
        return (sqrt_w * out).reshape(m, -1)

    return engine, weights, pilot_events, noise_free_many


def _final_search(s: _Setup, claim: str, seed: int, pilot_trials: int
                  ) -> tuple[PyTree, NoiseFree]:
    """The final attack's pilot events (``claim="curve"`` only, else None) and the outputs a
    candidate is judged by: the final ``state.beta`` of a run with its noise multiplied by 0."""
    pilot_events = None
    if claim == "curve":
        _, pilot_events = _pilot(s.estimator, s.hp, s.params0, s.data, pilot_trials, seed)
    mech0 = estimator_mechanism(s.estimator, s.hp, s.params0, _beta_output)

    def noise_free(record):
        return jnp.concatenate([jnp.ravel(x) for x in jax.tree_util.tree_leaves(
            mech0(jax.random.key(0), s.with_record(s.index, record)))])

    def noise_free_many(records):
        # traced here, inside the plant (the plant acts at trace time): every noise draw x 0
        with planted_bug("noise-x0"):
            return np.asarray(jax.lax.map(noise_free, records), np.float64)

    return pilot_events, noise_free_many


class _Pair(NamedTuple):
    """The canary and its replacement, and their noise-free outputs."""

    rec_in: PyTree
    rec_out: PyTree
    out_in: np.ndarray
    out_out: np.ndarray


def _farthest_pair(cands: PyTree, outs: np.ndarray) -> _Pair:
    """The two candidates whose noise-free outputs (``outs``, one row each; non-finite
    entries count as 0) lie farthest apart."""
    outs = np.where(np.isfinite(outs), outs, 0.0)
    dist = np.linalg.norm(outs[:, None, :] - outs[None, :, :], axis=-1)
    i, j = np.unravel_index(int(np.argmax(dist)), dist.shape)
    pick = lambda k: jax.tree_util.tree_map(lambda c: c[k], cands)  # noqa: E731
    return _Pair(pick(i), pick(j), outs[i], outs[j])


def _local_search(pair: _Pair, noise_free_many: NoiseFree, magnitude: float,
                  rounds: int) -> _Pair:
    """Greedy local search: change one entry of one record at a time (negate it, set it to
    +-magnitude or 0) while the noise-free outputs move apart (at most ``rounds`` rounds)."""
    rec_in, rec_out, out_in, out_out = pair
    for _ in range(rounds):
        moved = False
        for side in (0, 1):
            rec, other = (rec_out, out_in) if side == 0 else (rec_in, out_out)
            variants = _single_entry_variants(rec, magnitude)
            vo = noise_free_many(variants)
            vo = np.where(np.isfinite(vo), vo, 0.0)
            gain = np.linalg.norm(vo - other, axis=-1)
            best = int(np.argmax(gain))
            if gain[best] > np.linalg.norm(out_in - out_out) * (1 + 1e-6):
                moved = True
                new = jax.tree_util.tree_map(lambda c, b=best: c[b], variants)
                if side == 0:
                    rec_out, out_out = new, vo[best]
                else:
                    rec_in, out_in = new, vo[best]
        if not moved:
            break
    return _Pair(rec_in, rec_out, out_in, out_out)


def _honest_events(s: _Setup, engine: _Trajectories | None, rec_in: PyTree, data_in: PyTree,
                   seed: int) -> PyTree:
    """The privacy events of an honest run on ``data_in`` (through the compiled trajectory
    audit where there is one: no extra compile)."""
    if engine is None:
        return probe_events(s.estimator, data_in, s.params0, s.hp)
    one = engine.tile(rec_in, 1)
    ((_, _, _, events),) = list(engine.runs(jax.random.key(seed), one, one, one, 1))
    return jax.tree_util.tree_map(lambda x: x[0], events)


def _release_kinds(events: PyTree) -> set[str]:
    """The kinds of the privacy events of a run."""
    is_event = lambda x: isinstance(x, mechanisms.PrivacyEvent)  # noqa: E731
    return {e.kind for e in jax.tree_util.tree_leaves(events, is_leaf=is_event)
            if is_event(e)}


def _claim(s: _Setup, events: PyTree, delta: float | None, claim: str,
           pilot_events: PyTree) -> tuple[float, float, str, float | None]:
    """``(epsilon, delta, claim_kind, gdp_mu)`` of the honest ledger of ``events`` (see
    :func:`canary_case`)."""
    ledger = s.estimator.ledger(s.n, s.hp, events)
    approx = ledger.approx_dp
    claim_kind = "ledger"
    if delta is not None and hasattr(ledger.guarantee, "to_approx_dp"):
        approx = ledger.guarantee.to_approx_dp(delta)
        claim_kind = "zcdp-curve"
    disjoint = s.estimator.batching == "disjoint"
    mu = _gdp_mu(events, disjoint)
    claim_eps, claim_delta = float(approx.epsilon), float(approx.delta)
    if claim == "curve" and delta is not None and mu is not None and _same_mu(
            pilot_events, mu, disjoint):
        from dpjax.accounting import gaussian_epsilon

        claim_eps, claim_delta, claim_kind = float(gaussian_epsilon(mu, delta)), delta, \
            "gdp-curve"
    return claim_eps, claim_delta, claim_kind, mu


def _same_mu(pilot_events: PyTree, mu: float, disjoint: bool) -> bool:
    """Whether every pilot run's events give the probed ``mu`` (scales that do not depend on
    the noisy iterates), so that the GDP curve is the run's, whatever the noise drawn."""
    if pilot_events is None:
        return False
    num = jax.tree_util.tree_leaves(pilot_events)[0].shape[0]
    for r in range(num):
        m = _gdp_mu(jax.tree_util.tree_map(lambda x, r=r: x[r], pilot_events), disjoint)
        if m is None or not math.isclose(m, mu, rel_tol=1e-4):
            return False
    return True


def _candidate_records(data: PyTree, num: int, magnitude: float, seed: int) -> PyTree:
    """``num`` candidate canary records (leaves ``(num, ...)``): extreme and unit sign
    patterns, single extreme coordinates, zeros and the data's own first record, mixed at
    random across the leaves. The clipping maps extreme values onto the boundary."""
    rng = np.random.default_rng(seed)
    out = []
    for leaf in jax.tree_util.tree_leaves(data):
        arr = np.asarray(leaf)
        shape = arr.shape[1:]
        size = int(np.prod(shape, dtype=int))
        rows = []
        for _ in range(num):
            kind = rng.integers(5)
            if kind == 0:
                row = magnitude * rng.choice([-1.0, 1.0], size)
            elif kind == 1:
                row = rng.choice([-1.0, 1.0], size)
            elif kind == 2:
                row = np.zeros(size)
                row[rng.integers(size)] = magnitude * rng.choice([-1.0, 1.0])
            elif kind == 3:
                row = np.zeros(size)
            else:
                row = arr[rng.integers(arr.shape[0])].ravel().astype(float)
            rows.append(row.reshape(shape))
        out.append(jnp.asarray(np.stack(rows), arr.dtype))
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(data), out)


def _private_records(data: PyTree, public: PyTree) -> tuple[list, Callable[[int, list], PyTree]]:
    """The private leaves of ``data`` (a list; ``public``: a pytree of bools marking the public
    leaves, or None) and ``with_record(index, record)``: ``data`` with row ``index`` of every
    private leaf replaced by ``record``'s (a list in the same order). Public leaves (e.g. a
    public sample, of any length) are never changed: the neighbouring relation of a guarantee
    replaces one *private* record, so a canary pair that changed a public row would be outside
    it."""
    leaves, treedef = jax.tree_util.tree_flatten(data)
    flags = [False] * len(leaves) if public is None else [
        bool(p) for p in jax.tree_util.tree_leaves(public)]
    if len(flags) != len(leaves):
        raise ValueError(f"public must mark each of the data's {len(leaves)} leaves; got "
                         f"{len(flags)} flags")
    if all(flags):
        raise ValueError("every leaf of the data is marked public: no private record to audit")
    private = [leaf for leaf, p in zip(leaves, flags) if not p]

    def with_record(index: int, record: list) -> PyTree:
        rows = iter(record)
        return jax.tree_util.tree_unflatten(treedef, [
            leaf if p else jnp.asarray(leaf).at[index].set(
                jnp.asarray(next(rows), jnp.asarray(leaf).dtype))
            for leaf, p in zip(leaves, flags)])

    return private, with_record


def _single_entry_variants(record: PyTree, magnitude: float) -> PyTree:
    """Every record that differs from ``record`` in one entry, set to ``-x``, ``+-magnitude``
    or 0 (leaves ``(4 * size, ...)``)."""
    leaves, treedef = jax.tree_util.tree_flatten(record)
    flat = [np.asarray(x, np.float64).ravel() for x in leaves]
    variants = []
    for li, v in enumerate(flat):
        for e in range(v.size):
            for value in (-v[e], magnitude, -magnitude, 0.0):
                new = [x.copy() for x in flat]
                new[li][e] = value
                variants.append(new)
    return jax.tree_util.tree_unflatten(treedef, [
        jnp.asarray(np.stack([var[li] for var in variants]).reshape(
            (len(variants),) + np.shape(leaves[li])), jnp.asarray(leaves[li]).dtype)
        for li in range(len(leaves))])
