"""The EM models implement the typed protocol the DP-EM algorithms call (no duck typing)."""

import typing

import pytest

from dpjax.algorithms import dp_em
from dpjax.models import (
    EMModel,
    GaussianMixture,
    MixtureOfRegressions,
    RegressionMissingCovariates,
)

MODELS = [GaussianMixture(0.5), GaussianMixture(0.5, "paper"), MixtureOfRegressions(0.5),
          MixtureOfRegressions(0.5, gradient_form="paper"), RegressionMissingCovariates(1.0),
          RegressionMissingCovariates(1.0, sensitivity="paper")]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: f"{m.name}/{m.variant[:20]}")
def test_every_em_model_implements_the_protocol(model):
    assert isinstance(model, EMModel)
    assert isinstance(model.variant, str) and isinstance(model.ledger_notes, tuple)
    assert isinstance(model.sensitivity_formula, str)
    assert model.ex_post_notes(__import__("numpy").zeros((2, 3)), 1.0, 0.5, 1e-3) == [] or (
        model.name == "rmc")


def test_the_algorithms_are_typed_on_the_protocol():
    hints = typing.get_type_hints(dp_em.hd_dp_em)
    assert hints["model"] is EMModel


def test_an_object_missing_a_method_is_not_a_model():
    class Half:
        name = "half"
        sensitivity_formula = "?"

        def gradient(self, beta, data):
            return beta

    assert not isinstance(Half(), EMModel)


def test_the_gradient_em_ledger_notes_come_from_the_model():
    """dp_gem's ledgers print the model's gradient_notes (no probing of model attributes)."""
    from dpjax.algorithms import dp_gem
    from tests.test_dp_gem import BETA, N, T, _data

    def notes(model):
        res = dp_gem.fit_dp_gem(0, _data(model), model, epsilon=0.5, delta=1 / N,
                                num_iterations=T, beta0=BETA * 0.5, tau=2.0)
        return res.ledger.notes

    assert GaussianMixture(0.5, "paper").gradient_notes
    assert set(GaussianMixture(0.5, "paper").gradient_notes) <= set(
        notes(GaussianMixture(0.5, "paper")))
    assert not any("paper-literal" in n for n in notes(GaussianMixture(0.5)))
    exact_k = RegressionMissingCovariates(1.0, second_moment="exact_conditional")
    assert exact_k.gradient_notes and set(exact_k.gradient_notes) <= set(notes(exact_k))
    assert RegressionMissingCovariates(1.0).gradient_notes == ()
