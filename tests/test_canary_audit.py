"""Canary audits over the registry (issue 17, item 3).

For a private registered estimator, :func:`dpjax.audit.canary_case` finds an adversarial
neighbouring pair (a canary record at the clipping or truncation boundary, in the last batch under
sample splitting, against its replacement) and a projection statistic; :func:`audit_case` turns
releases on the pair into a Clopper-Pearson lower bound on epsilon at 95% confidence. Each audit
below checks both directions on the same case:

* the honest estimator's lower bound stays at or below the epsilon its ledger claims, and
* the same estimator with a planted under-noising (:func:`dpjax.audit.planted_bug`: every noise
  draw x 0.2, or every calibration from half the sensitivity; no file edited) is caught: its
  lower bound exceeds the claim.

So each test fails if the audit loses its power (the planted bug is not caught) and if it is
unsound or the estimator under-noises (the honest run is "caught"). The default run audits a few
estimators chosen for speed, one per kind of calibration; the full registry runs under
``@pytest.mark.slow`` (its numbers are the table of ``docs/audits.md``).
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import audit, mechanisms, registry
from dpjax._validate import DPJaxWarning
from dpjax.base import probe_events


class _OptimisedJit:
    """``jax`` as the audit engine's modules see it in this file, except that their ``jit``
    compiles at XLA's default backend level (2), as it does for users. The suite compiles at
    level 0 (tests/conftest.py: most tests are compile-bound), but an audit runs thousands of
    trials through one or two compiled functions, and there level 0 costs 3-7x in run time
    (ld-dp-em/rmc 4000 + 4000 trials: 14.8 s -> 2.6 s; the budget-unsplit Alg 1 at T = 200,
    1000 + 1000: 19.7 s -> 5.1 s)."""

    def __getattr__(self, name):
        return getattr(jax, name)

    @staticmethod
    def jit(fun=None, **kwargs):
        kwargs.setdefault("compiler_options", {"xla_backend_optimization_level": 2})
        if fun is None:
            return functools.partial(_OptimisedJit.jit, **kwargs)
        return jax.jit(fun, **kwargs)


@pytest.fixture(autouse=True, scope="module")
def _audit_kernels_optimised():
    from dpjax.audit import engine, trajectory

    with pytest.MonkeyPatch.context() as mp:
        for module in (engine, trajectory):
            mp.setattr(module, "jax", _OptimisedJit())
        yield


TRIALS = 2000  # per data set; half select the event, half evaluate it
NOISE = ("noise-x0.2",)
PLANTS_BOTH = audit.PLANTS


@functools.cache
def _case(name: str) -> audit.CanaryCase:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DPJaxWarning)  # classic Gaussian above epsilon = 1
        return audit.registry_cases([name])[0]


def _claim_only(name: str) -> audit.CanaryCase:
    """The case's claim and tight epsilon without the canary search (no audit follows)."""
    (entry,) = [e for e in registry.entries() if e.name == name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DPJaxWarning)
        return audit.canary_case(entry, audit.AUDIT_LEVELS.get(entry.family, 1.0),
                                 delta=audit.AUDIT_DELTA, num_candidates=2, search_rounds=0)


def _audit(case, key, plant=None, trials=TRIALS):
    return audit.audit_case(case, key, plant=plant, num_trials=trials)


# ------------------------------------------------------------------------------------------
# the planted bugs themselves
# ------------------------------------------------------------------------------------------


def test_planted_bugs_change_the_noise_and_are_undone_on_exit(key):
    stat = mechanisms.bounded_mean(jnp.zeros((10, 5000)), 1.0, "l2")
    k_honest, k_noise, k_sens, k_after = jax.random.split(key, 4)

    def release(k):
        value, event = jax.jit(lambda k: mechanisms.gaussian_mechanism(k, stat, 0.5, 1e-3))(k)
        return float(np.std(np.asarray(value))), float(event.scale)

    sd, scale = release(k_honest)
    assert sd == pytest.approx(scale, rel=0.05)
    with audit.planted_bug("noise-x0.2"):
        sd02, scale02 = release(k_noise)
    assert sd02 == pytest.approx(0.2 * scale, rel=0.05) and scale02 == pytest.approx(scale)
    with audit.planted_bug("sensitivity-x0.5"):
        sd05, scale05 = release(k_sens)
    assert sd05 == pytest.approx(0.5 * scale, rel=0.05)
    assert scale05 == pytest.approx(0.5 * scale)  # the event records the scale drawn
    assert release(k_after)[0] == pytest.approx(scale, rel=0.05)  # restored
    with pytest.raises(ValueError, match="kind must be one of"):
        with audit.planted_bug("noise-x2"):
            pass


def test_planted_bugs_reach_the_local_gaussian_randomizers(key):
    """The Gaussian reports of dpjax.local_randomizers calibrate and draw through
    dpjax.mechanisms, so both plants reach them (per-user path, aggregate shortcut and the
    symmetric matrix noise); the l2-ball randomizer has no sensitivity calibration for the halving
    to reach."""
    from dpjax import local_randomizers as lr

    d, n = 4000, 10
    mean = mechanisms.BoundedStatistic(jnp.zeros(d), 1.0, "l2", "local")
    keys = iter(jax.random.split(key, 6))

    def sd(k, symmetric=False):
        if symmetric:
            stat = mechanisms.BoundedStatistic(jnp.zeros((60, 60)), 1.0, "l2", "local")
            rel = jax.jit(lambda k: lr.local_gaussian_aggregate(k, stat, n, 0.5, 1e-3,
                                                                symmetric=True))(k)
            upper = np.asarray(rel.value)[np.triu_indices(60)]  # the released entries
            return float(np.std(upper)), float(rel.sigma_mean)
        rel = jax.jit(lambda k: lr.local_gaussian_aggregate(k, mean, n, 0.5, 1e-3))(k)
        return float(np.std(np.asarray(rel.value))), float(rel.sigma_mean)

    for symmetric in (False, True):
        honest, scale = sd(next(keys), symmetric)
        assert honest == pytest.approx(scale, rel=0.05)
        with audit.planted_bug("noise-x0.2"):
            low, scale02 = sd(next(keys), symmetric)
        assert low == pytest.approx(0.2 * scale, rel=0.05) and scale02 == pytest.approx(scale)
        with audit.planted_bug("sensitivity-x0.5"):
            half, scale05 = sd(next(keys), symmetric)
        assert half == pytest.approx(0.5 * scale, rel=0.05)
        assert scale05 == pytest.approx(0.5 * scale)
    assert audit.plants_reaching({"ldp-randomizer"}) == ("noise-x0.2",)
    assert audit.plants_reaching({"ldp-randomizer", "gaussian-zcdp"}) == audit.PLANTS


def test_the_noise_plant_reaches_the_randomized_response_coin(key):
    """The l2-ball randomizer keeps the true hemisphere with probability e^eps/(e^eps+1);
    inside noise x 0.2 with e^(5 eps)/(e^(5 eps)+1) (the coin at eps / 0.2), outside again
    with the honest one; the halved sensitivity leaves it alone (eps-LDP for every radius)."""
    from dpjax import local_randomizers as lr

    x, eps, m = jnp.array([1.0, 0.0, 0.0]), 0.5, 20000

    def kept(k):
        out = jax.jit(jax.vmap(lambda k: lr.l2_ball_randomizer(k, x, 1.0, eps).value))(
            jax.random.split(k, m))
        return float(np.mean(np.asarray(out)[:, 0] > 0))

    keys = jax.random.split(key, 4)
    sig = lambda e: 1 / (1 + math.exp(-e))  # noqa: E731
    se = 4 * math.sqrt(0.25 / m)
    assert abs(kept(keys[0]) - sig(eps)) < se
    with audit.planted_bug("noise-x0.2"):
        assert abs(kept(keys[1]) - sig(eps / 0.2)) < se
    with audit.planted_bug("sensitivity-x0.5"):
        assert abs(kept(keys[2]) - sig(eps)) < se
    assert abs(kept(keys[3]) - sig(eps)) < se


def test_the_canary_of_ldp_public_keeps_its_public_sample_fixed():
    """ldp-public's data hold the public sample x_pub (Example.public marks it): the canary
    pair differs in one private record (x, y) only, so it is a neighbouring pair of the
    guarantee and the estimator is audited like every other."""
    entry = _entry("ldp-public")
    case = audit.canary_case(entry, 1.0, delta=audit.AUDIT_DELTA, attack="trajectory",
                             claim="curve", num_candidates=8, search_rounds=0,
                             pilot_trials=8, chunk=8)
    x_pub = np.asarray(entry.example().data[2])
    np.testing.assert_array_equal(np.asarray(case.data_in[2]), x_pub)
    np.testing.assert_array_equal(np.asarray(case.data_out[2]), x_pub)
    changed = [np.nonzero((np.asarray(a) != np.asarray(b)).reshape(len(a), -1).any(1))[0]
               for a, b in zip(case.data_in[:2], case.data_out[:2])]
    assert set(np.concatenate(changed)) == {case.index} and case.separation > 0


def test_the_final_attack_projects_on_the_noise_free_releases():
    """attack="final": the candidates are judged, and the statistic centred, by the releases
    with every noise draw x 0, so the noise-free release on data_out has statistic 0 and the
    one on data_in the separation (a search traced outside the plant would add key 0's
    noise to both)."""
    entry = _entry("dp-mean")
    case = audit.canary_case(entry, 1.0, num_candidates=4, search_rounds=1)
    with audit.planted_bug("noise-x0"):
        mech = jax.jit(audit.estimator_mechanism(case.estimator, case.hparams, case.params0))
        out_in, out_out = (mech(jax.random.key(5), d) for d in (case.data_in, case.data_out))
    assert float(case.statistic(out_out)) == pytest.approx(0.0, abs=1e-5 * case.separation)
    assert float(case.statistic(out_in)) == pytest.approx(case.separation, rel=1e-5)


def test_the_canary_pair_is_a_replace_one_neighbour_in_the_last_batch():
    case = _case("ld-dp-em/gmm")
    n = case.data_in.y.shape[0]
    assert case.index == (case.estimator.num_steps - 1) * (n // case.estimator.num_steps)
    rows = np.nonzero((np.asarray(case.data_in.y) != np.asarray(case.data_out.y)).any(1))[0]
    np.testing.assert_array_equal(rows, [case.index])
    assert case.separation > 0 and 0 < case.claim_epsilon < np.inf


# ------------------------------------------------------------------------------------------
# honest below the claim, planted under-noising caught (default: fast cases)
# ------------------------------------------------------------------------------------------

# Default run: the core mechanisms (one release each; both plants are violations their audit
# reaches) and three estimators, one per calibration: classic Gaussian (dp-mean, and DP-EM under
# sample splitting), zCDP Gaussian over several steps (clipped DP gradient EM).
MECHANISMS = {c.name: c for c in audit.mechanism_cases()}
# the one-step peeling cases on crafted data (built on first use: each runs the estimator)
CRAFTED = list(audit.crafted_names())
CRAFTED_PEELING = [n for n in CRAFTED if n.startswith(("hd-dp-em/", "alg5-"))]


def _crafted(name):
    return audit.crafted_case(name)
NOISE_CASES = ["mechanism/laplace", "mechanism/gaussian-zcdp", "mechanism/gaussian-classic",
               "dp-mean", "ld-dp-em/gmm", "clipped-gem/mor"]
# halved sensitivity: the core mechanisms, and a classic-Gaussian estimator audited on the GDP
# curve of its events (the classic calibration's violation at its own delta = 1e-3 is beyond a
# few thousand trials; on the curve at delta = 0.05 it is not)
SENSITIVITY_CASES = ["mechanism/laplace", "mechanism/gaussian-zcdp",
                     "mechanism/gaussian-classic", "dp-mean"]


def _any_case(name):
    if name in CRAFTED:
        return _crafted(name)
    return MECHANISMS[name] if name in MECHANISMS else _case(name)


@pytest.mark.parametrize("name", NOISE_CASES)
def test_honest_is_below_the_claim_and_noise_x02_is_caught(name, key):
    case = _any_case(name)
    k = jax.random.fold_in(key, 1)
    honest = _audit(case, jax.random.fold_in(k, 0))
    planted = _audit(case, jax.random.fold_in(k, 1), "noise-x0.2")
    assert not honest.violates(case.claim_epsilon), str(honest)
    assert planted.violates(case.claim_epsilon), str(planted)


@pytest.mark.parametrize("name", SENSITIVITY_CASES)
def test_halved_sensitivity_is_caught(name, key):
    case = _any_case(name)
    k = jax.random.fold_in(key, 2)
    honest = _audit(case, jax.random.fold_in(k, 0))
    planted = _audit(case, jax.random.fold_in(k, 1), "sensitivity-x0.5")
    assert not honest.violates(case.claim_epsilon), str(honest)
    assert planted.violates(case.claim_epsilon), str(planted)


@pytest.mark.parametrize("name", CRAFTED_PEELING)
def test_the_crafted_peeling_cases_claim_what_their_ledger_says(name):
    """The one-step peeling cases, requested at (1, 1e-3): since issue 28 the ledger claims what
    the composition of the peeling rounds proves, which for s = 1 is the pure-DP bound of the
    release, 3 s Delta / b (about 0.33), not the requested 1; so both plants are violations of
    the claim now, the sensitivity halved (0.66) as well as noise x 0.2 (1.65); and the canary
    is a replace-one neighbour of row 0 only."""
    case = _crafted(name)
    assert case.delta == pytest.approx(1e-3)
    assert case.epsilon_bound(1.0) == pytest.approx(0.5 * math.sqrt(3 / math.log(1e3)),
                                                    rel=1e-4)
    assert case.claim_epsilon == pytest.approx(case.epsilon_bound(1.0), rel=1e-5)
    assert case.claim_epsilon < case.epsilon_bound(0.5) < case.epsilon_bound(0.2)
    rows = [np.flatnonzero(np.any(np.asarray(a) != np.asarray(b), axis=tuple(range(1, a.ndim))))
            for a, b in zip(jax.tree_util.tree_leaves(case.data_in),
                            jax.tree_util.tree_leaves(case.data_out))]
    assert {int(r) for rr in rows for r in rr} == {0}


# the Gaussian crafted cases: (reach of the pair, trials per data set)
CRAFTED_GAUSSIAN = {
    # 19 of 20 coordinates at (5 T^2 - 0.01) / (6 T^2 + 0.01) of the declared sensitivity
    "ld-dp-em/rmc/one-step": (math.sqrt(19 / 20) * (5 - 0.01) / (6 + 0.01), 16000),
    # 19 of 20 coordinates at the true sensitivity
    "alg1-noisy-gd/logistic/one-step": (math.sqrt(19 / 20), 4000),
    # one user: the smoothed score saturates at about 0.87 of psi_bound(s) (at least 0.8
    # asserted), in 9 of 10 coordinates (gmm, mor: coordinate 0 steers) or all 10 (rmc)
    **dict.fromkeys(["ldp-gem/gmm/one-user", "ldp-gem/mor/one-user", "ldp-gem/rmc/one-user"],
                    (None, 16000)),
    # one user, x against -x: the cross report moves by its whole range, the covariance
    # report (the same mu) not at all
    "ldp-nldp/one-user": (math.sqrt(0.5), 16000),
    "ldp-nldp/per-user/one-user": (math.sqrt(0.5), 16000),
    "ldp-public/one-user": (1.0, 4000),
}


@pytest.mark.parametrize("name", list(CRAFTED_GAUSSIAN))
def test_the_crafted_gaussian_cases_catch_a_halved_sensitivity(name, key):
    """The Gaussian one-step cases on crafted records reach 0.81 (ld-dp-em/rmc), 0.97
    (Algorithm 1), 0.83-0.87 (local-DP gradient EM, one user), 0.71 (LDP sparse regression
    with its two reports, one user) and 1 (with the public covariance) of the sensitivity the
    events record: above 1/2, so the halved sensitivity is a violation on the pair, and the audit
    catches it; the honest audit stays below the claim (the GDP curve of the release at delta
    = 0.05)."""
    case = _crafted(name)
    expected, trials = CRAFTED_GAUSSIAN[name]
    # the pair differs in the last release of the step only (ldp-nldp: the cross report)
    ev = probe_events(case.estimator, case.data_in, case.params0, case.hparams)[-1]
    reach = case.separation / float(ev.scale[0]) / case.gdp_mu
    if expected is None:
        assert 0.8 <= reach <= 1.0
    else:
        assert reach == pytest.approx(expected, rel=1e-3)
    k = jax.random.fold_in(key, 3)
    honest = _audit(case, jax.random.fold_in(k, 0), trials=trials)
    planted = _audit(case, jax.random.fold_in(k, 1), "sensitivity-x0.5", trials=trials)
    assert not honest.violates(case.claim_epsilon), str(honest)
    assert honest.epsilon_lower <= case.epsilon_bound(1.0)
    assert planted.violates(case.claim_epsilon), str(planted)


def test_a_plant_within_the_calibrations_slack_is_not_a_violation():
    """Why not every plant can be caught: Algorithm 1's paper calibration (B = 4 declares twice
    the sensitivity, classic Gaussian, basic composition over T steps) leaves more than a factor
    2 of slack, so with the sensitivity halved its exact epsilon (mu-GDP of its events) is still
    below the claim, and no sound audit can exceed it. The table in docs/audits.md lists the
    exact bound next to every audited one."""
    import dataclasses
    import functools

    from dpjax.algorithms import dp_glm
    from dpjax.models.glm import GLM

    # the paper's calibration by name (the registry's default now spends the whole request)
    entry = dataclasses.replace(
        _entry("alg1-noisy-gd/logistic"),
        build=functools.partial(dp_glm.noisy_gd, GLM("logistic"), 5, "paper",
                                dp_glm.PAPER_B_CONSTANT), requested=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DPJaxWarning)
        case = audit.canary_case(entry, audit.AUDIT_LEVELS.get("dp-glm", 1.0),
                                 delta=audit.AUDIT_DELTA, num_candidates=2, search_rounds=0)
    assert case.epsilon_bound(0.5) < case.claim_epsilon < case.epsilon_bound(0.2)
    # the default (b_constant = 2, the exact composition) leaves no such slack
    default = _claim_only("alg1-noisy-gd/logistic")
    assert default.epsilon_bound(0.5) > default.claim_epsilon
    # a single Gaussian release: since issue 28 its ledger claims the exact curve of the noise
    # drawn, so no slack is left and the halved sensitivity is a violation of the claim
    dp_mean = _claim_only("dp-mean")
    assert dp_mean.claim_epsilon == pytest.approx(dp_mean.epsilon_bound(1.0), rel=1e-6)
    assert dp_mean.epsilon_bound(0.5) > dp_mean.claim_epsilon


def _entry(name):
    (entry,) = [e for e in registry.entries() if e.name == name]
    return entry


def _beta_only_dp_iv(key):
    """The "beta only" DP-IV variant (no noise on the first stage) against the claim the paper
    makes for it, that of the full DP-2S-GD at the same budget (its own ledger says "not DP")."""
    (entry,) = [e for e in registry.entries("dp-iv") if e.name.startswith("dp-2s-gd-beta")]
    paper = _claim_only("dp-2s-gd/paper")
    case = audit.canary_case(entry, audit.AUDIT_LEVELS["dp-iv"], delta=audit.AUDIT_DELTA,
                             num_candidates=16, search_rounds=0)
    assert case.claim_epsilon == np.inf
    return _audit(case, key, trials=1000), paper.claim_epsilon, None


def _unsplit_glm(key):
    """Algorithm 1 with the budget not split over its T = 200 steps (the curve of the paper's
    Figure 1, each step at the full (eps, delta)) against the paper's claim (1, 1/(2n)), which
    implies (1, 0.05); the trajectory attack. Its own ledger's composed guarantee (the GDP
    curve of its events) is not exceeded."""
    from dpjax.algorithms import dp_glm

    case = audit.canary_case(_entry(dp_glm.UNSPLIT_ENTRY), 1.0, delta=audit.AUDIT_DELTA,
                             attack="trajectory", claim="curve", num_candidates=16,
                             search_rounds=1, pilot_trials=128)
    res = _audit(case, key, trials=4000)
    assert not res.violates(case.claim_epsilon), str(res)  # what its ledger says it delivers
    return res, 1.0, None


def _wang_xu_radius(key):
    """A Gaussian local release of one user's LDP-IHT gradient calibrated for (1, 1e-5) from
    the declared range 2 r: at Wang & Xu's published radius caught, at the rectified one not
    (:func:`dpjax.audit.wang_xu_radius_cases`)."""
    rectified, published = audit.wang_xu_radius_cases()
    k1, k2 = jax.random.split(key)
    kw = dict(num_trials=100_000, batch_size=50_000)
    return (audit.audit_case(published, k1, **kw), published.claim_epsilon,
            (audit.audit_case(rectified, k2, **kw), rectified.claim_epsilon))


@pytest.mark.parametrize("variant", [
    _beta_only_dp_iv, _wang_xu_radius,
    pytest.param(_unsplit_glm, marks=pytest.mark.slow),  # T = 200 steps: about 30 s of CPU
], ids=lambda f: f.__name__.strip("_"))
def test_paper_literal_variants_that_are_not_private_are_caught(variant, key):
    """Each paper-literal variant that is not private, audited against the claim the paper
    makes for it: caught (the lower bound exceeds the claim at 95% confidence); where the
    corrected twin is audited the same way, it is not."""
    res, paper_claim, corrected = variant(jax.random.fold_in(key, 3))
    assert res.violates(paper_claim), str(res)
    if corrected is not None:
        assert not corrected[0].violates(corrected[1]), str(corrected[0])


PRIVATE = [e.name for e in registry.entries() if e.private and e.ledger_private is not False]

# ------------------------------------------------------------------------------------------
# every estimator, in the default run (CI): a small audit, honest below, noise x 0.2 caught
# ------------------------------------------------------------------------------------------

# The small audit: 16 candidate canaries, one greedy round, 32 pilot runs, 1000 trials per
# data set (500 evaluate the event); one compile per estimator
# (dpjax.audit.trajectory._Trajectories).
FAST = dict(num_candidates=16, search_rounds=1, pilot_trials=32, chunk=32)
FAST_TRIALS = 1000
# Other trial counts: fewer for the full-batch DP-GEM runs on the largest examples (their
# trials, not their compiles, dominate the cost; noise x 0.2 is caught well there), more for
# ld-dp-em/rmc (its canary reaches about half the claimed mu: 1000 trials catch the plant only
# about half the time); the rows checked honest-only need fewer.
FAST_TRIALS_FOR = {"dp-gem/gmm": 500, "dp-gem/mor": 500, "dp-gem/rmc": 500,
                   "dp-gem/rmc-exact-k": 500, "dp-em-exact/gmm": 500, "ld-dp-em/rmc": 4000,
                   # one cheap release a trial; its best event lies in a tail (P_D about 1%)
                   "mechanism/noisy-ht": 16000, **dict.fromkeys(CRAFTED, 16000),
                   # its pair attains 0.83 of the declared sensitivity (1.04-1.14 at 64000)
                   "hd-dp-em/rmc/one-step": 64000, "ldp-iht/one-user": 4000,
                   # two Laplace releases seen through a solve: noise x 0.2 audits at 0.70 at
                   # 1000 trials
                   "baselines/ssp-laplace": 4000,
                   # most of epsilon on the noise: noise x 0.2 audits at 1.34 at 4000 trials
                   "baselines/objective-perturbation/tight": 4000}

# Where a planted noise x 0.2 is not caught by the small audit, and why (docs/audits.md has
# the numbers); for these the test checks the honest run only. Every other estimator must
# catch it.
FAST_NOISE_NOT_CAUGHT = {
    **{name: "peeling on the registry's simulated data, whose signal fixes the selection: "
       "the released values alone leave noise x 0.2 below the ledger's claim; caught on "
       "crafted data by its one-step case (CRAFTED, audit.crafted_cases: the canary moves "
       "every score)" for name in ("hd-dp-em/gmm", "hd-dp-em/rmc", "alg5-noisy-iht/logistic")},
    "hd-dp-em/mor": "peeling as above, and the declared 4 T^2 / n0 is twice the true "
    "sensitivity of the corrected term (tests/test_dp_em_mor.py::test_per_record_term_range_"
    "over_an_exhaustive_grid): with noise x 0.2 the release is at most 0.82-DP at s = 1 "
    "(pure-DP bound 3 s Delta / b), below the claim 1, so no one-step case can catch it",
    **{name: "local DP through the central release: the iterate moves by a mean of m users' "
       "reports, about sqrt(m) times more private than one report (the audited separation is "
       "a few percent of the claimed mu); one user in one round (CRAFTED: ldp-gem/*/one-user) "
       "catches both plants" for name in ("ldp-gem/gmm", "ldp-gem/rmc")},
    **{name: "local DP through the central release: the estimate is a solve of the mean of m "
       "users' reports, about sqrt(m) times more private than one report (the audited "
       "separation is a few percent of the claimed mu); one user's reports (CRAFTED: "
       "ldp-nldp/*one-user, ldp-public/one-user) catch both plants"
       for name in ("ldp-nldp", "ldp-nldp/chunked-per-user", "ldp-public")},
    **{name: "local DP through the central release: the iterate moves by a mean of about 100 "
       "users' l2-ball reports (the coin at 5 eps moves one report, not the mean); one user's "
       "report (CRAFTED: ldp-iht/one-user) catches it"
       for name in ("ldp-iht", "ldp-iht/general-cov", "ldp-iht/wang-xu-literal")},
    **{name: "objective perturbation: the canary moves the minimiser through one record's "
       "loss gradient, |l'| well below 1 at the example's margins (the ledger's sensitivity "
       "2 x_bound assumes |l'| = 1), and the claim adds the Jacobian term, which no output "
       "statistic of this attack sees: noise x 0.2 audits at 0.60 and 0.19 against the claim 1 "
       "at 4000 trials (docs/audits.md); no crafted case yet"
       for name in ("baselines/objective-perturbation/pure",
                    "baselines/objective-perturbation/gaussian")},
}


@functools.cache
def _fast_case(name: str) -> audit.CanaryCase:
    if name in MECHANISMS:
        return MECHANISMS[name]
    if name in CRAFTED:
        return _crafted(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DPJaxWarning)
        return audit.registry_cases([name], **FAST)[0]


@pytest.mark.parametrize("name", list(MECHANISMS) + CRAFTED + PRIVATE)
def test_small_audit_of_every_estimator(name, key):
    """Every private registered estimator and core mechanism, audited in the default run: the
    honest lower bound stays at or below the claim (and the run's tight epsilon where known),
    and with every noise draw x 0.2 it exceeds the claim, except where FAST_NOISE_NOT_CAUGHT
    says why it cannot (and where the crafted case that catches it is). A new estimator is
    audited by registering it."""
    case = _fast_case(name)
    k = jax.random.fold_in(key, 7)
    check_plant = "noise-x0.2" in case.plants and name not in FAST_NOISE_NOT_CAUGHT
    trials = FAST_TRIALS_FOR.get(name, FAST_TRIALS if check_plant else 500)
    honest = audit.audit_case(case, jax.random.fold_in(k, 0), num_trials=trials)
    # (a claim of 0 is possible: Algorithm 1's GDP curve at delta = 0.05 at the paper
    # calibration, see the slack test above)
    assert 0 <= case.claim_epsilon < np.inf and case.separation > 0
    assert not honest.violates(case.claim_epsilon), str(honest)
    tight = case.epsilon_bound(1.0)
    assert tight is None or honest.epsilon_lower <= tight, (str(honest), tight)
    if not check_plant:
        return
    planted = audit.audit_case(case, jax.random.fold_in(k, 1), plant="noise-x0.2",
                               num_trials=trials)
    assert planted.violates(case.claim_epsilon), str(planted)


# ------------------------------------------------------------------------------------------
# the whole registry (slow): the table of docs/audits.md
# ------------------------------------------------------------------------------------------

# The planted bugs the table of docs/audits.md catches (python -m dpjax.audit --table --trials
# 4000: key(0), the same keys as below; trajectory attack, claims on the events' GDP curve).
# Rows not listed are either within the calibration's slack, beyond this attack's power, or
# were not re-run with the trajectory attack; docs/audits.md says which.
CAUGHT = {
    "mechanism/laplace": PLANTS_BOTH, "mechanism/gaussian-zcdp": PLANTS_BOTH,
    "mechanism/gaussian-classic": PLANTS_BOTH, **dict.fromkeys(CRAFTED_PEELING, PLANTS_BOTH),
    "ld-dp-em/rmc/one-step": PLANTS_BOTH, "alg1-noisy-gd/logistic/one-step": PLANTS_BOTH,
    "ldp-gem/gmm/one-user": PLANTS_BOTH, "ldp-gem/mor/one-user": PLANTS_BOTH,
    "ldp-gem/rmc/one-user": PLANTS_BOTH, "ldp-nldp/one-user": PLANTS_BOTH,
    "ldp-nldp/per-user/one-user": PLANTS_BOTH, "ldp-public/one-user": PLANTS_BOTH,
    "ldp-iht/one-user": NOISE,
    "baselines/adassp": NOISE, "baselines/bounded-mean/laplace": NOISE,
    "baselines/ssp-laplace": NOISE, "baselines/objective-perturbation/tight": NOISE,
    "baselines/bounded-mean/gaussian": PLANTS_BOTH,
    "ld-dp-em/gmm": PLANTS_BOTH, "ld-dp-em/mor": NOISE,
    # dp-gem/gmm: the halved sensitivity is not caught at 4000 trials at today's default (0.22
    # against 0.401, reach 0.71); 64000 trials catch it (0.54), too long for this test
    "ld-dp-em/rmc": NOISE, "dp-gem/gmm": NOISE, "clipped-gem/gmm": PLANTS_BOTH,
    "dp-gem/mor": PLANTS_BOTH, "clipped-gem/mor": PLANTS_BOTH, "dp-2s-gd/paper": PLANTS_BOTH,
    "dp-2s-gd/tight": PLANTS_BOTH, "dp-mean": PLANTS_BOTH, "dp-gem/rmc": PLANTS_BOTH,
    "alg1-noisy-gd/logistic": PLANTS_BOTH,
    "clipped-gem/rmc": PLANTS_BOTH, "dp-gem-split/gmm": NOISE,
    "alg1-noisy-gd-unsplit/logistic (not DP as claimed)": PLANTS_BOTH, "ldp-gem/mor": NOISE,
    "dp-gem-split/rmc": PLANTS_BOTH, "dp-em-exact/gmm": NOISE, "mechanism/noisy-ht": NOISE,
}


# the table's rows at other trial counts than 4000 (docs/audits.md)
TABLE_TRIALS = {"ld-dp-em/gmm": 16000, "hd-dp-em/gmm/one-step": 16000,
                "alg5-noisy-iht/logistic/one-step": 16000,
                "hd-dp-em/rmc/one-step": 64000, "ld-dp-em/rmc/one-step": 16000,
                "ldp-gem/gmm/one-user": 16000, "ldp-gem/mor/one-user": 16000,
                "ldp-gem/rmc/one-user": 16000, "ldp-nldp/one-user": 16000,
                "ldp-nldp/per-user/one-user": 16000, "ldp-public/one-user": 16000}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MECHANISMS) + CRAFTED + PRIVATE)
def test_the_audit_table_row(name):
    """Every case of the table: the honest run at or below its claim (and below its tight
    epsilon where known), and the plants the table catches caught."""
    case = _any_case(name)
    (row,) = audit.canary_table([case], jax.random.key(0), TABLE_TRIALS.get(name, 4000))
    assert not row.honest.violates(case.claim_epsilon), str(row.honest)
    for res, bound in zip((row.honest, row.noise_x02, row.sensitivity_x05), row.bounds):
        assert res is None or bound is None or res.epsilon_lower <= bound, (str(res), bound)
    results = {"noise-x0.2": row.noise_x02, "sensitivity-x0.5": row.sensitivity_x05}
    for plant in CAUGHT.get(name, ()):
        assert results[plant].violates(case.claim_epsilon), (plant, str(results[plant]))
