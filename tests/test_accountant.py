"""One budget across many fits: :class:`dpjax.Accountant` (issue 45, part 2)."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

import dpjax
from dpjax import PrivacyBudgetError
from dpjax.accountant import Accountant
from dpjax.algorithms.dp_glm import fit_dp_glm
from dpjax.models.glm import GLM


@pytest.fixture(scope="module")
def glm_problem():
    model = GLM("logistic")
    beta = np.array([0.5, -0.5, 0.25])
    data = model.simulate(jax.random.key(3), 400, jax.numpy.asarray(beta))
    return model, data


def _fit(problem, acct, seed=0):
    model, data = problem
    return fit_dp_glm(seed, data, model, epsilon=0.5, delta=2.5e-7, num_iterations=3,
                      accountant=acct)


def test_pld_admits_four_fits_and_refuses_the_fifth_with_nothing_released(glm_problem,
                                                                            monkeypatch):
    acct = Accountant(epsilon=1.0, delta=1e-6)
    for k in range(4):
        _fit(glm_problem, acct, seed=k)
        spent = acct.spent()
        assert spent.epsilon <= 1.0 and spent.delta <= 1e-6 * (1 + 1e-5)
    assert acct.spent().epsilon == pytest.approx(0.98, abs=0.01)
    # the fifth: refused before anything runs on the data (the kernel is never called)
    from dpjax import base

    def never(*a, **k):
        raise AssertionError("the refused fit ran")

    monkeypatch.setattr(base, "_fit_run", never)
    with pytest.raises(PrivacyBudgetError, match="remaining") as err:
        _fit(glm_problem, acct, seed=4)
    assert "1.10" in str(err.value) or "1.1)" in str(err.value) or "(1.1" in str(err.value)
    assert len(acct.fits) == 4


def test_filter_admits_two_fits(glm_problem):
    acct = Accountant(epsilon=1.0, delta=1e-6, composition="filter")
    _fit(glm_problem, acct)
    _fit(glm_problem, acct, seed=1)
    assert acct.spent().epsilon <= 1.0 * (1 + 1e-5)  # float32 noise scales (check_delivers)
    with pytest.raises(PrivacyBudgetError):
        _fit(glm_problem, acct, seed=2)
    rem = acct.remaining()
    assert rem.epsilon == max(0.0, 1.0 - acct.spent().epsilon) and rem.epsilon < 1e-6


def test_remaining_is_admitted_and_the_record_survives_a_restart(glm_problem):
    acct = Accountant(epsilon=1.0, delta=1e-6)
    _fit(glm_problem, acct)
    rem = acct.remaining()
    assert 0 < rem.epsilon < 1.0 and 0 < rem.delta <= 1e-6
    # a fit at what is left (a Gaussian fit: at least as tight as the generic bound) is admitted
    model, data = glm_problem
    fit_dp_glm(9, data, model, epsilon=rem.epsilon, delta=rem.delta, num_iterations=3,
               accountant=acct)
    assert acct.spent().epsilon <= 1.0
    text = str(acct)
    assert "fit 1: alg1" in text and "fit 2:" in text and "remaining" in text
    back = Accountant.from_dict(json.loads(json.dumps(acct.to_dict())))
    assert back.spent() == acct.spent() and back.remaining() == acct.remaining()
    assert str(back) == text


def test_calibrated_fit_and_dpjax_fit_take_an_accountant():
    from dpjax.examples.dp_mean import DP_MEAN, MeanHyperparams

    x = jax.random.normal(jax.random.key(0), (200, 3))
    hp = MeanHyperparams(*map(np.float32, (0.5, 1 / 400, 2.0)))
    acct = Accountant(epsilon=1.0, delta=1e-2)
    cal = dpjax.calibrate(DP_MEAN, hp, data=x, params0=np.zeros(3))
    dpjax.calibrated_fit(DP_MEAN, 0, x, np.zeros(3), cal, accountant=acct)
    dpjax.fit(DP_MEAN, 1, x, np.zeros(3), hp, accountant=acct)
    assert len(acct.fits) == 2
    with pytest.raises(PrivacyBudgetError):
        dpjax.fit(DP_MEAN, 2, x, np.zeros(3), hp._replace(epsilon=np.float32(2.0)),
                  accountant=acct)


@pytest.mark.parametrize("kw", [dict(epsilon=0.0, delta=1e-6), dict(epsilon=float("inf"),
                                delta=1e-6), dict(epsilon=1.0, delta=1.0),
                                dict(epsilon=1.0, delta=1e-6, composition="basic")])
def test_bad_totals_are_refused_in_one_line(kw):
    with pytest.raises(ValueError) as err:
        Accountant(**kw)
    assert "\n" not in str(err.value)


def test_the_docs_page_example_prints_what_the_page_shows(capsys):
    """docs/many_fits.md: its tested block, run, prints its text block."""
    import pathlib
    import re

    page = (pathlib.Path(__file__).parents[1] / "docs" / "many_fits.md").read_text()
    code, shown = re.search(r"<!-- tested: tests/test_accountant.py -->\n```python\n(.*?)```"
                            r"\n\n```text\n(.*?)```", page, re.S).groups()
    exec(compile(code, "docs/many_fits.md", "exec"), {})
    assert capsys.readouterr().out == shown
    assert "many_fits.md" in (pathlib.Path(__file__).parents[1] / "mkdocs.yml").read_text()


def test_calibrating_to_what_remains_spends_exactly_the_rest():
    """Under the filter, ``calibrate`` to ``remaining()`` then ``calibrated_fit`` with the
    accountant: admitted, and the total is spent (to calibrate's tolerance, never above)."""
    from dpjax.accounting import ApproxDP
    from dpjax.examples.dp_mean import DP_MEAN, MeanHyperparams

    x = jax.random.normal(jax.random.key(0), (200, 3))
    acct = Accountant(epsilon=1.0, delta=1e-2, composition="filter")
    hp = MeanHyperparams(*map(np.float32, (0.4, 5e-3, 2.0)))
    dpjax.fit(DP_MEAN, 0, x, np.zeros(3), hp, accountant=acct)
    rem = acct.remaining()
    assert rem.delta == pytest.approx(5e-3, rel=1e-5)
    hp2 = hp._replace(delta=np.float32(rem.delta))
    cal = dpjax.calibrate(DP_MEAN, hp2, ApproxDP(rem.epsilon, float(hp2.delta)), data=x,
                          params0=np.zeros(3))
    dpjax.calibrated_fit(DP_MEAN, 1, x, np.zeros(3), cal, accountant=acct)
    assert 0.99 <= acct.spent().epsilon <= 1.0 * (1 + 1e-5)
    assert acct.remaining().epsilon <= 0.01
