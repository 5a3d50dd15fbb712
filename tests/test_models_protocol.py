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
