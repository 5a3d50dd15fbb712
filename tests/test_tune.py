"""dpjax.tune: pathwise gradients of a Monte Carlo risk with common random numbers, checked
against finite differences and a grid search; exact zeros refused; the smoothed relaxation."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import tune
from dpjax.algorithms import dp_glm
from dpjax.examples import dp_mean
from dpjax.models import GLM

MU = jnp.asarray([3.0, 0.0])  # ||mu|| = 3: a clip below ~4 biases the mean, above it adds noise


def squared_error(state, truth):
    return jnp.sum((state.beta - truth) ** 2)


@pytest.fixture(scope="module")
def mean_risk():
    return tune.monte_carlo_risk(dp_mean.DP_MEAN, squared_error, simulate=dp_mean.simulate,
                                 truth=MU, n=200, params0=jnp.zeros(2), reps=64, seed=0)


@pytest.fixture(scope="module")
def mean_space():
    return tune.LogSpace(dp_mean.MeanHyperparams(0.5, 1e-5, 2.0), clip=("clip",))


def test_common_random_numbers(mean_risk, mean_space):
    hp = mean_space(mean_space.theta0)
    assert float(mean_risk(hp)) == float(mean_risk(hp))  # fixed draws: deterministic
    other = tune.monte_carlo_risk(dp_mean.DP_MEAN, squared_error, simulate=dp_mean.simulate,
                                  truth=MU, n=200, params0=jnp.zeros(2), reps=64, seed=1)
    assert float(other(hp)) != float(mean_risk(hp))  # another seed, other draws
    assert mean_risk.losses(hp).shape == (64,)
    assert mean_risk.standard_error(hp) > 0


def test_pathwise_gradient_matches_central_difference(mean_risk, mean_space):
    theta = {"clip": jnp.log(jnp.float32(2.0))}
    value, grad = tune.value_and_grad(mean_risk, mean_space, theta)
    h = 1e-2
    up = float(mean_risk(mean_space({"clip": theta["clip"] + h})))
    down = float(mean_risk(mean_space({"clip": theta["clip"] - h})))
    fd = (up - down) / (2 * h)
    assert value == pytest.approx(float(mean_risk(mean_space(theta))), rel=1e-5)
    assert float(grad["clip"]) == pytest.approx(fd, rel=2e-2)
    assert float(grad["clip"]) < 0  # clip 2 < ||mu|| = 3: the clipping bias dominates


def test_gradient_through_glm_step_size_matches_central_difference():
    model = GLM()
    beta = jnp.asarray([0.6, -0.8, 0.0])
    T = 5
    risk = tune.monte_carlo_risk(dp_glm.noisy_gd(model, T, "gaussian"), squared_error,
                                 simulate=model.simulate, truth=beta, n=400,
                                 params0=jnp.zeros(3), reps=8, seed=0)
    space = tune.LogSpace(dp_glm.default_hparams(400, 1.0, T, eta=0.5, calibration="gaussian"),
                          eta="eta")
    _, grad = tune.value_and_grad(risk, space)
    h = 1e-2
    t0 = space.theta0["eta"]
    fd = (float(risk(space({"eta": t0 + h}))) - float(risk(space({"eta": t0 - h})))) / (2 * h)
    assert float(grad["eta"]) == pytest.approx(fd, rel=5e-2, abs=1e-4)


def test_gradient_descent_agrees_with_grid_search(mean_risk, mean_space):
    result = tune.minimize(mean_risk, mean_space, steps=60, learning_rate=0.1)
    assert result.values.shape == (60,) and result.path["clip"].shape == (61,)
    assert result.values[-1] < result.values[0]
    grid = np.geomspace(0.5, 20, 25)
    means, _ = tune.grid_search(mean_risk, mean_space, {"clip": grid})
    best = grid[int(np.argmin(means))]
    tuned = float(result.hparams.clip)
    # the same optimum, within one grid spacing (factor 1.17) ...
    assert abs(math.log(tuned / best)) < 1.5 * math.log(grid[1] / grid[0])
    # ... and within Monte Carlo error of the grid's risk (paired on the same draws)
    diff = np.asarray(mean_risk.losses(result.hparams)) - np.asarray(
        mean_risk.losses(mean_space({"clip": math.log(best)})))
    assert diff.mean() < 2 * diff.std(ddof=1) / math.sqrt(diff.size) + 1e-6


def _support_problem():
    model = GLM()
    beta = np.zeros(12, np.float32)
    beta[:2] = [0.8, -0.6]

    def missed(state, truth):  # depends on eta only through peeling's selections
        return jnp.sum((truth != 0) & (state.beta == 0)).astype(jnp.float32)

    # the paper's (noisier) peeling by name: with the default's whole budget the support is
    # found in every repetition and the smoothed risk is flat at this size
    est = dp_glm.noisy_iht(model, 2, 3, dp_glm.PAPER_B_CONSTANT, calibration="paper")
    risk = tune.monte_carlo_risk(est, missed, simulate=model.simulate,
                                 truth=beta, n=300, params0=jnp.zeros(12), reps=16, seed=0)
    space = tune.LogSpace(dp_glm.default_hparams(300, 2.0, 3, eta=1.0), eta="eta")
    return risk, space


def test_a_selection_only_loss_raises_instead_of_a_zero_gradient():
    risk, space = _support_problem()
    # the plain jax.grad is exactly zero here: that is the silent zero dpjax.tune refuses
    raw = jax.grad(lambda th: risk(space(th)))(space.theta0)
    assert float(raw["eta"]) == 0.0
    with pytest.raises(tune.NonDifferentiableError, match="piecewise constant"):
        tune.value_and_grad(risk, space)
    with pytest.raises(tune.NonDifferentiableError):
        tune.minimize(risk, space, steps=2)
    # the documented relaxation: the gradient of the Gaussian-smoothed risk, non-zero
    value, grad = tune.value_and_grad(risk, space, method="smoothed", smoothing=0.7,
                                      num_directions=8, key=0)
    assert np.isfinite(value) and 0 <= value <= 2
    assert np.isfinite(float(grad["eta"])) and float(grad["eta"]) != 0.0


def test_a_flat_smoothed_risk_raises(mean_risk):
    # epsilon = inf and a clip far above every record: the risk does not depend on the clip
    space = tune.LogSpace(dp_mean.MeanHyperparams(math.inf, 1e-5, 1e6), clip="clip")
    with pytest.raises(tune.NonDifferentiableError, match="exactly 0"):
        tune.value_and_grad(mean_risk, space)
    with pytest.raises(tune.NonDifferentiableError, match="flat"):
        tune.value_and_grad(mean_risk, space, method="smoothed", smoothing=0.1)


def test_fixed_data_redraws_only_the_noise():
    x = dp_mean.simulate(jax.random.key(3), 100, MU)
    risk = tune.monte_carlo_risk(dp_mean.DP_MEAN, squared_error, data=x, truth=MU,
                                 params0=jnp.zeros(2), reps=4, seed=0)
    no_noise = np.asarray(risk.losses(dp_mean.MeanHyperparams(math.inf, 1e-5, 10.0)))
    assert np.all(no_noise == no_noise[0])  # eps = inf: every repetition is the same fit
    noisy = np.asarray(risk.losses(dp_mean.MeanHyperparams(0.5, 1e-5, 10.0)))
    assert len(set(noisy.tolist())) == 4


def test_invalid_arguments(mean_risk, mean_space):
    hp = dp_mean.MeanHyperparams(0.5, 1e-5, 2.0)
    with pytest.raises(ValueError, match="not fields"):
        tune.LogSpace(hp, c=("radius",))
    with pytest.raises(ValueError, match="one finite positive value"):
        tune.LogSpace(hp, both=("clip", "epsilon"))
    with pytest.raises(ValueError, match="at least one"):
        tune.LogSpace(hp)
    with pytest.raises(ValueError, match="reps"):
        tune.monte_carlo_risk(dp_mean.DP_MEAN, squared_error, simulate=dp_mean.simulate,
                              truth=MU, n=10, params0=jnp.zeros(2), reps=1)
    with pytest.raises(ValueError, match="either"):
        tune.monte_carlo_risk(dp_mean.DP_MEAN, squared_error, params0=jnp.zeros(2), reps=4)
    with pytest.raises(ValueError, match="method"):
        tune.value_and_grad(mean_risk, mean_space, method="finite")
    with pytest.raises(TypeError, match="MonteCarloRisk"):
        tune.value_and_grad(lambda h: 0.0, mean_space)
    with pytest.raises(ValueError, match="exactly one"):
        tune.grid_search(mean_risk, mean_space, {})
