"""One fit contract across families (issue 29), checked on every public ``fit_*``.

The fits are discovered by walking the modules of :mod:`dpjax.algorithms`, so a new family (or a
new fit) is checked as soon as it exists; it must also get a tiny problem in ``PROBLEMS`` below
(a test fails until it does). The contract, read off the signatures:

* positional parameters only ``key`` (private fits, first), ``data`` and ``model``;
* budgets keyword-only and named ``epsilon``/``delta`` or ``rho``/``rho1``/``rho2`` with
  ``delta`` for the conversion; ``delta`` defaults to ``None``, meaning ``1/(2n)`` (the one
  delta policy, :func:`dpjax._validate.resolve_delta`);
* ``on_invalid``, ``secure`` and ``accountant`` (:class:`dpjax.Accountant`) on every private
  fit; no ``**options``; a ``FitResult`` back,
  with a ledger (non-private fits included: theirs says not private);
* a clear error naming the traceable entry points under ``jax.jit`` / ``jax.vmap``.
"""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dpjax
from dpjax import _validate, algorithms, registry
from dpjax.accounting import Ledger
from dpjax.base import FitResult

BUDGETS = {"epsilon", "delta", "rho", "rho1", "rho2"}
POSITIONAL = ("key", "data", "model")


def discover() -> dict[str, typing.Callable]:
    """Every public ``fit_*`` defined in a module of :mod:`dpjax.algorithms`."""
    fits = {}
    for info in pkgutil.iter_modules(algorithms.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"dpjax.algorithms.{info.name}")
        for name, obj in vars(module).items():
            if name.startswith("fit_") and inspect.isfunction(obj) and \
                    obj.__module__ == module.__name__:
                fits[f"{info.name}.{name}"] = obj
    return fits


FITS = discover()


def is_private(fn) -> bool:
    return "key" in inspect.signature(fn).parameters


# ---------------------------------------------------------------------------------------------
# Tiny problems, one per fit: (positional args, keyword args, n)
# ---------------------------------------------------------------------------------------------


def _gmm():
    from dpjax.models import GaussianMixture

    model = GaussianMixture(0.5)
    data = model.simulate(jax.random.key(0), 200, jnp.full(4, 0.5))
    return data, model, np.array([0.5, 0.5, 0.0, 0.0], np.float32)


def _glm():
    from dpjax.models.glm import GLM

    model = GLM("logistic")
    return model.simulate(jax.random.key(1), 200, jnp.array([1.0, -1.0, 0.0, 0.0])), model


def _iv():
    from dpjax.models import iv

    model = iv.LinearIV(p=2, q=3, r=2)
    return model.simulate(jax.random.key(2), 300, model.pack(model.draw_parameters(
        jax.random.key(3))))


def _xy():
    from dpjax.algorithms.ldp_sparse import _example_data

    return _example_data(400, 4, 2)


KEY = 7
IV_STEPS = dict(eta=0.5, alpha=0.03, num_iterations=2)
# epsilon 50 and a small radius keep the noisy covariance of n = 400 users definite
NLDP = dict(epsilon=50.0, r=1.0, tau1=2.0, tau2=2.0, lam=0.05)


def _baselines():
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, (200, 3)).astype(np.float32)
    y = np.clip(x @ np.ones(3) + rng.normal(size=200), -3, 3).astype(np.float32)
    return x, y, (y > 0).astype(np.float32)


def _problems():
    gmm_data, gmm, beta0 = _gmm()
    glm_data, glm = _glm()
    iv_data, xy = _iv(), _xy()
    em = dict(beta0=beta0, num_iterations=2)
    bx, by, blabels = _baselines()
    return {
        "baselines.fit_adassp": ((KEY, (bx, by)), dict(epsilon=1.0, x_bound=2.0, y_bound=3.0),
                                 200),
        "baselines.fit_ssp_laplace": ((KEY, (bx, by)), dict(epsilon=1.0, x_bound=2.0,
                                                            y_bound=3.0), 200),
        "baselines.fit_objective_perturbation": ((KEY, (bx, blabels)),
                                                 dict(epsilon=1.0, x_bound=2.0), 200),
        "baselines.fit_bounded_mean": ((KEY, bx), dict(epsilon=1.0, bounds=(-1.0, 1.0),
                                                       mechanism="gaussian"), 200),
        "dp_em.fit_hd_dp_em": ((KEY, gmm_data, gmm), dict(epsilon=1.0, s_hat=2, **em), 200),
        "dp_em.fit_ld_dp_em": ((KEY, gmm_data, gmm), dict(epsilon=1.0, **em), 200),
        "dp_em.fit_truncated_em": ((gmm_data, gmm), dict(s_hat=2, **em), 200),
        "dp_em.fit_gradient_em": ((gmm_data, gmm), em, 200),
        "dp_gem.fit_dp_gem": ((KEY, gmm_data, gmm), dict(epsilon=1.0, tau=2.0, **em), 200),
        "dp_gem.fit_dp_exact_em": ((KEY, gmm_data, gmm), dict(epsilon=1.0, tau=2.0, **em), 200),
        "dp_gem.fit_clipped_gem": ((KEY, gmm_data, gmm), dict(epsilon=1.0, **em), 200),
        "ldp_gem.fit_ldp_gem": ((KEY, gmm_data, gmm), dict(epsilon=1.0, tau=2.0, **em), 200),
        "dp_glm.fit_dp_glm": ((KEY, glm_data, glm), dict(epsilon=1.0, num_iterations=2), 200),
        "dp_glm.fit_sparse_dp_glm": ((KEY, glm_data, glm),
                                     dict(epsilon=1.0, s=2, num_iterations=2), 200),
        "dp_iv.fit_dp_2s_gd": ((KEY, iv_data), dict(rho1=1.0, rho2=1.0, **IV_STEPS), 300),
        "dp_iv.fit_dp_2s_gd_beta_only": ((KEY, iv_data), dict(rho2=1.0, **IV_STEPS), 300),
        "dp_iv.fit_two_stage_gd": ((iv_data,), IV_STEPS, 300),
        "dp_iv.fit_2sls": ((iv_data,), {}, 300),
        "ldp_sparse.fit_nldp": ((KEY, xy), NLDP, 400),
    }


PROBLEMS = _problems()
# the private fits whose releases have no floating-point-safe path yet: secure=True raises
NO_SECURE_PATH: set[str] = {"baselines.fit_objective_perturbation"}
# private fits whose default is pure epsilon-DP, so their delta defaults to 0, not None
# (1/(2n)): objective perturbation (Chaudhuri et al.'s algorithm; delta > 0 is its Gaussian
# variant)
PURE_BY_DEFAULT = {"baselines.fit_objective_perturbation", "baselines.fit_ssp_laplace"}
# pure-epsilon fits with no (epsilon, delta) variant: an explicit delta > 0 is refused
PURE_ONLY = {"baselines.fit_ssp_laplace"}
# fits whose ledger is not private although they take a budget: the paper-literal Algorithm 3
NOT_DP_AS_CLAIMED = {"dp_iv.fit_dp_2s_gd_beta_only"}


def test_discovery_finds_every_family_and_every_fit_has_a_tiny_problem():
    assert {name.split(".")[0] for name in FITS} == {"dp_em", "dp_gem", "dp_glm", "dp_iv",
                                                      "ldp_gem", "ldp_sparse", "baselines"}
    assert set(FITS) == set(PROBLEMS), "give every public fit_* a tiny problem in PROBLEMS"
    assert "dpjax.algorithms._boundary" not in {f.__module__ for f in FITS.values()}


# ---------------------------------------------------------------------------------------------
# The contract, from the signatures
# ---------------------------------------------------------------------------------------------


def contract_violations(fn, pure_by_default: bool = False) -> list[str]:
    """What ``fn``'s signature breaks of the contract (empty if nothing); ``pure_by_default``:
    its delta defaults to 0 (pure epsilon-DP) instead of None."""
    sig = inspect.signature(fn)
    params = sig.parameters
    bad = []
    for p in params.values():
        if p.kind is p.VAR_KEYWORD or p.kind is p.VAR_POSITIONAL:
            bad.append(f"hides arguments behind {p}")
    positional = [p.name for p in params.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if positional != [n for n in POSITIONAL if n in positional]:
        bad.append(f"positional parameters {positional}: only key, data, model, in that order")
    if "data" not in positional:
        bad.append("no data parameter")
    hints = typing.get_type_hints(inspect.unwrap(fn))
    if hints.get("return") is not FitResult:
        bad.append(f"returns {hints.get('return')}, not FitResult")
    budgets = BUDGETS & set(params)
    for name in budgets:
        if params[name].kind is not params[name].KEYWORD_ONLY:
            bad.append(f"budget {name} is not keyword-only")
    budget_like = {n for n in params if n.startswith(("eps", "rho", "delta", "budget"))}
    if budget_like - BUDGETS:
        bad.append(f"budget names {sorted(budget_like - BUDGETS)}: use epsilon/delta or rho")
    if not is_private(fn):
        if budgets or "secure" in params or "on_invalid" in params:
            bad.append("a non-private fit (no key) takes a budget, secure or on_invalid")
        return bad
    if positional[:1] != ["key"]:
        bad.append("a private fit takes the key first")
    if ("epsilon" in params) == bool({"rho", "rho1", "rho2"} & budgets):
        bad.append("a private fit takes epsilon or rho (one kind)")
    if "delta" not in params or params["delta"].default != (0.0 if pure_by_default else None):
        bad.append("delta must be a keyword defaulting to None (1/(2n), the one policy)")
    for name, default in (("on_invalid", "raise"), ("secure", False), ("accountant", None)):
        p = params.get(name)
        if p is None or p.kind is not p.KEYWORD_ONLY or p.default != default:
            bad.append(f"{name} must be keyword-only with default {default!r}")
    return bad


@pytest.mark.parametrize("name", sorted(FITS))
def test_signature_follows_the_contract(name):
    assert contract_violations(FITS[name], name in PURE_BY_DEFAULT) == []


def test_the_contract_check_has_teeth():
    def fit_old_nldp(key, x, y, hp, *, num_chunks=1) -> FitResult: ...

    def fit_options(key, data, model, *, epsilon, **options) -> FitResult: ...

    def fit_tuple(data) -> tuple: ...

    def fit_positional_budget(key, data, epsilon, delta=None, *, on_invalid="raise",
                              secure=False) -> FitResult: ...

    def fit_required_delta(key, data, *, epsilon, delta, on_invalid="raise",
                           secure=False) -> FitResult: ...

    def fit_no_secure(key, data, *, epsilon, delta=None, on_invalid="raise") -> FitResult: ...

    def fit_eps(key, data, *, eps, delta=None, on_invalid="raise",
                secure=False) -> FitResult: ...

    def fit_no_accountant(key, data, *, epsilon, delta=None, on_invalid="raise",
                          secure=False) -> FitResult: ...

    def fit_ok(key, data, *, epsilon, delta=None, on_invalid="raise",
               secure=False, accountant=None) -> FitResult: ...

    for fn in (fit_old_nldp, fit_options, fit_tuple, fit_positional_budget, fit_required_delta,
               fit_no_secure, fit_eps, fit_no_accountant):
        assert contract_violations(fn), fn.__name__
    assert contract_violations(fit_ok) == []


# ---------------------------------------------------------------------------------------------
# Every fit, called on its tiny problem
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(FITS))
def test_every_fit_returns_a_fit_result_with_a_ledger(name):
    args, kwargs, n = PROBLEMS[name]
    res = FITS[name](*args, **kwargs)
    assert isinstance(res, FitResult)
    assert isinstance(res.ledger, Ledger)
    assert np.isfinite(np.asarray(res.estimate)).all()
    private = is_private(FITS[name]) and name not in NOT_DP_AS_CLAIMED
    assert res.ledger.is_private == private, res.ledger
    if is_private(FITS[name]) and name in PURE_BY_DEFAULT:
        assert res.ledger.approx_dp.delta == 0 and not hasattr(res.hparams, "delta")
    elif is_private(FITS[name]):
        # the one delta policy: omitted, delta is 1/(2n) (n records, or users)
        assert math.isclose(float(np.asarray(res.hparams.delta)), 1 / (2 * n), rel_tol=1e-6)


@pytest.mark.parametrize("name", sorted(n for n in FITS if is_private(FITS[n])))
def test_an_explicit_delta_reaches_the_ledger(name):
    args, kwargs, n = PROBLEMS[name]
    if name in PURE_ONLY:  # refused in one line, naming delta
        with pytest.raises(ValueError, match="delta must be 0"):
            FITS[name](*args, **kwargs, delta=1 / (4 * n))
        assert FITS[name](*args, **kwargs, delta=0.0).ledger.approx_dp.delta == 0
        return
    res = FITS[name](*args, **kwargs, delta=1 / (4 * n))
    assert math.isclose(float(np.asarray(res.hparams.delta)), 1 / (4 * n), rel_tol=1e-6)
    with pytest.raises(ValueError, match="delta must lie in the open interval"):
        FITS[name](*args, **kwargs, delta=1.0)


def _with_a_nan(data):
    leaves, tree = jax.tree_util.tree_flatten(data)
    x = np.array(leaves[0], dtype=np.float64 if np.asarray(leaves[0]).dtype == np.float64
                 else np.float32)
    x.flat[0] = np.nan
    return jax.tree_util.tree_unflatten(tree, [x] + leaves[1:])


@pytest.mark.parametrize("name", sorted(n for n in FITS if is_private(FITS[n])))
def test_on_invalid_is_honoured(name):
    (key, data, *rest), kwargs, _ = PROBLEMS[name]
    bad = (key, _with_a_nan(data), *rest)
    with pytest.raises(ValueError, match="finite"):
        FITS[name](*bad, **kwargs)
    with pytest.raises(ValueError, match="on_invalid must be one of"):
        FITS[name](*bad, **kwargs, on_invalid="ignore")
    if name in NOT_DP_AS_CLAIMED:  # its first stage is neither clipped nor noised: a bad
        with pytest.raises(FloatingPointError):  # record still reaches the iterates
            FITS[name](*bad, **kwargs, on_invalid="clip")
        return
    res = FITS[name](*bad, **kwargs, on_invalid="clip")
    assert np.isfinite(np.asarray(res.estimate)).all() and res.ledger is not None


@pytest.mark.parametrize("name", sorted(n for n in FITS if is_private(FITS[n])))
def test_secure_is_honoured_or_refused(name):
    args, kwargs, _ = PROBLEMS[name]
    if name in NO_SECURE_PATH:
        with pytest.raises(ValueError, match="floating-point-safe path"):
            FITS[name](*args, **kwargs, secure=True)
        return
    res = FITS[name](*args, **kwargs, secure=True)
    assert any("floating-point-safe path" in note for note in res.ledger.notes), name
    noised = {r.mechanism for r in res.ledger.releases} - {"none"}  # beta-only's 1st stage
    assert noised and noised <= {"discrete-laplace", "discrete-gaussian", "discrete-noisy-ht"}, \
        noised


# ---------------------------------------------------------------------------------------------
# Traced calls: a clear error that names the traceable entry points
# ---------------------------------------------------------------------------------------------

TRACED = r"cannot be traced; the traceable entry points are dpjax\.base\.run.*sweep"


def _data_position(name):
    return 1 if is_private(FITS[name]) else 0


@pytest.mark.parametrize("name", sorted(FITS))
def test_jit_over_a_fit_names_the_traceable_entry_points(name):
    args, kwargs, _ = PROBLEMS[name]
    i = _data_position(name)

    def f(data):
        return FITS[name](*args[:i], data, *args[i + 1:], **kwargs).estimate

    with pytest.raises(_validate.TracedFitError, match=TRACED) as err:
        jax.jit(f)(args[i])
    assert name.split(".")[1] in str(err.value)  # names the fit that was traced


@pytest.mark.parametrize("name", sorted(FITS))
def test_vmap_over_a_fit_names_the_traceable_entry_points(name):
    args, kwargs, _ = PROBLEMS[name]
    if is_private(FITS[name]):  # vmap over keys, the natural thing to try
        keys = jax.random.split(jax.random.key(0), 2)
        with pytest.raises(_validate.TracedFitError, match=TRACED):
            jax.vmap(lambda k: FITS[name](k, *args[1:], **kwargs).estimate)(keys)
    else:  # over a batch of data sets
        stacked = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), args[0])
        with pytest.raises(_validate.TracedFitError, match=TRACED):
            jax.vmap(lambda d: FITS[name](d, *args[1:], **kwargs).estimate)(stacked)


def test_dpjax_fit_under_jit_and_vmap_names_the_traceable_entry_points():
    entry = next(e for e in registry.entries() if e.name == "ld-dp-em/gmm")
    est, ex = entry.build(), entry.example()
    hp = ex.hparams(1.0)
    assert isinstance(dpjax.fit(est, 0, ex.data, ex.params0, hp), FitResult)  # concrete: fine
    with pytest.raises(_validate.TracedFitError, match="dpjax.fit was called on traced"):
        jax.jit(lambda d: dpjax.fit(est, 0, d, ex.params0, hp).estimate)(ex.data)
    with pytest.raises(_validate.TracedFitError, match=TRACED):
        jax.vmap(lambda k: dpjax.fit(est, k, ex.data, ex.params0, hp).estimate)(
            jax.random.split(jax.random.key(0), 2))
    # and the entry points it names are traceable: base.run under jit and vmap
    state0 = est.init(ex.params0)
    final, _ = jax.jit(jax.vmap(lambda k: dpjax.run(est, k, ex.data, state0, hp)))(
        jax.random.split(jax.random.key(0), 2))
    assert np.isfinite(np.asarray(final.beta)).all()
