"""What a release really delivers: the floating-point sampler's floor stated in every ledger,
one dtype rule for noise scales and coins, refusals that never depend on the data, and a
refused study level that writes nothing.

The default noise path draws JAX's float32 normal (23 random bits: support exactly
[-5.4200, 5.2201] sigma) and Laplace ([-15.54, 16.64] b). For neighbours whose statistics
differ by Delta, the event "output > f(D') + z_max sigma" never happens under D' and happens
with probability P(Z > z_max - Delta / sigma) under D: a delta that no epsilon removes. The
ledger states it (``Release.delta_floor``, ``Ledger.assumption``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import dpjax
from dpjax import _float_sampler as fs
from dpjax import mechanisms
from dpjax.accounting import Release
from dpjax.examples import dp_mean as dpm
from dpjax.local_randomizers import l2_ball_randomizer

ROOT = Path(__file__).resolve().parents[1]


def _hp(eps, delta, clip, dtype=jnp.float32):
    return dpm.MeanHyperparams(*(jnp.asarray(v, dtype) for v in (eps, delta, clip)))


# --------------------------------------------------------------------------------------------
# The samplers' exact supports and floors
# --------------------------------------------------------------------------------------------


def test_the_float32_samplers_supports_are_their_transforms_at_the_extreme_bit_patterns():
    lo, hi = fs.support("normal", jnp.float32)
    assert round(lo, 4) == -5.4200 and round(hi, 4) == 5.2201
    lo, hi = fs.support("laplace", jnp.float32)
    assert round(lo, 2) == -15.54 and round(hi, 2) == 16.64
    # the transform is JAX's own, value for value: the draws of jax.random.normal / laplace
    # are the transform of their random bits, and lie inside the support
    key = jax.random.key(11)
    bits = np.asarray(jax.random.bits(jax.random.clone(key), (1 << 16,), jnp.uint32)) >> 9
    for sampler, draw in (("normal", jax.random.normal), ("laplace", jax.random.laplace)):
        x = np.asarray(draw(jax.random.clone(key), (1 << 16,))).astype(np.float64)
        np.testing.assert_array_equal(fs._values(sampler, jnp.float32, bits), x)
    # and the normal the Gaussian mechanisms draw (dpjax._cpu_prng.normal) has the same values
    g = np.asarray(mechanisms.gaussian_noise(key, (1 << 12, 10), 1.0))
    assert g.min() >= fs.support("normal")[0] and g.max() <= fs.support("normal")[1]


def test_the_transforms_are_monotone_over_every_float32_bit_pattern():
    """The bisection of ``tail_count`` (and so every floor) rests on this."""
    k = np.arange(2**23, dtype=np.uint32)
    assert np.all(np.diff(fs._values("normal", jnp.float32, k)) >= 0)
    assert np.all(np.diff(fs._values("laplace", jnp.float32, k)) <= 0)
    assert fs.tail_count("normal", "float32", 5.0, True) == int(
        np.sum(fs._values("normal", jnp.float32, k) > 5.0))


@pytest.mark.parametrize("eps, floor", [(3.0, 2.4e-6), (5.0, 1.3e-5), (8.0, 1.1e-4),
                                        (20.0, 0.024)])
def test_the_float32_gaussian_floor_at_delta_1e_6(eps, floor):
    """The default calibration at (eps, 1e-6): the implemented release's delta is at least
    P(Z > 5.2201 - Delta/sigma), 2.4x the claim at eps 3, 113x at eps 8."""
    mu = 1.0 / float(mechanisms.gaussian_multiplier(eps, 1e-6))
    got = fs.delta_floor("gaussian", mu, jnp.float32)
    assert got == pytest.approx(floor, rel=0.05)
    assert got * 2**23 == int(got * 2**23)  # a whole number of bit patterns


def test_every_float_release_has_a_floor_of_at_least_one_bit_pattern():
    """So pure-epsilon (Laplace, peeling) and zCDP claims are false for the implementation at
    every epsilon: delta >= 2^-23 = 1.19e-7."""
    for kind in ("laplace", "noisy-ht", "gaussian", "gaussian-zcdp"):
        assert fs.delta_floor(kind, 1e-6, jnp.float32) == 2.0**-23
    assert fs.delta_floor("discrete-gaussian", 1.0) == 0.0
    assert fs.delta_floor("ldp-randomizer", 1.0) == 0.0


def test_the_float64_gaussian_floor():
    with jax.enable_x64(True):
        lo, hi = fs.support("normal", jnp.float64)
        assert round(lo, 2) == -8.29 and round(hi, 2) == 8.16
        mu = 1.0 / float(mechanisms.gaussian_multiplier(20.0, 1e-9))
        assert fs.delta_floor("gaussian", mu, jnp.float64) == pytest.approx(3.7e-8, rel=0.05)


# --------------------------------------------------------------------------------------------
# The ledger says what it assumes
# --------------------------------------------------------------------------------------------


def _fit_mean(x, eps, delta=1e-6, clip=1.0, key=0, **kw):
    return dpjax.fit(dpm.DP_MEAN, key, x, jnp.zeros(x.shape[1], x.dtype),
                     _hp(eps, delta, clip, x.dtype), **kw)


def test_a_float_gaussian_ledger_states_the_idealised_mechanism_and_the_sampler_floor():
    x = dpm.simulate(jax.random.key(0), 200, jnp.zeros(1))
    led = _fit_mean(x, 8.0).ledger
    assert led.approx_dp.epsilon == pytest.approx(8.0, rel=1e-3)
    assert led.sampler_delta_floor >= 1e-4  # > 100x the claimed delta
    assert led.releases[0].delta_floor == led.sampler_delta_floor
    assert "[-5.4200, 5.2201]" in led.releases[0].sampler
    text = str(led)
    assert "idealised mechanism with continuous noise" in text
    assert "delta >= 0.000113" in text and "secure=True" in text
    d = json.loads(json.dumps(led.to_dict()))  # what config.json records
    assert "idealised" in d["assumes"] and d["sampler_delta_floor"] >= 1e-4
    assert d["releases"][0]["delta_floor"] >= 1e-4


def test_a_pure_laplace_ledger_says_its_claim_is_of_the_idealised_mechanism():
    stat = mechanisms.bounded_mean(jnp.ones((10, 3)), 2.0, "l1")
    _, ev = mechanisms.laplace_mechanism(jax.random.key(0), stat, 1.0)
    from dpjax.accounting import Ledger

    led = Ledger.build("laplace", [Release.from_event(ev, "mean")], "basic")
    assert led.approx_dp.delta == 0.0  # the idealised mechanism's pure claim ...
    assert led.sampler_delta_floor >= 2.0**-23  # ... and the implementation's floor
    assert "pure-epsilon and zCDP claims hold only for the idealised mechanism" in \
        led.assumption


def test_a_secure_ledger_says_exact_discrete_noise():
    x = dpm.simulate(jax.random.key(0), 200, jnp.zeros(1))
    led = _fit_mean(x, 1.0, delta=1e-5, secure=True).ledger
    assert led.assumption.startswith("exact discrete noise")
    assert led.sampler_delta_floor == 0.0
    assert "exact discrete noise" in str(led) and "idealised" not in str(led)


def test_the_threshold_event_through_dpjax_fit_matches_the_floor():
    """dp-mean on D (canary +C) and D' (canary -C), d = 1: the event "output > f(D') + z_max
    sigma" never happens under D', and under D at the rate the ledger's floor states (within
    its binomial interval). At epsilon 40 the floor is large, so few fits suffice."""
    n, clip, eps, delta = 20, 1.0, 40.0, 1e-6
    base = np.asarray(dpm.simulate(jax.random.key(1), n, jnp.zeros(1)))
    d_plus, d_minus = base.copy(), base.copy()
    d_plus[0], d_minus[0] = clip, -clip
    d_plus, d_minus = jnp.asarray(d_plus, jnp.float32), jnp.asarray(d_minus, jnp.float32)
    f_minus = float(_fit_mean(d_minus, math.inf, delta, clip).estimate[0])  # no noise
    led = _fit_mean(d_minus, eps, delta, clip).ledger
    sigma, floor = led.releases[0].scale, led.sampler_delta_floor
    assert 0.05 < floor < 0.95
    # a few float32 ulps above the support's edge: rounding of z sigma never crosses it
    threshold = f_minus + fs.support("normal")[1] * sigma + 8 * np.spacing(np.float32(
        abs(f_minus) + 6 * sigma))
    trials = 300
    hits = {name: sum(float(_fit_mean(d, eps, delta, clip, key=k).estimate[0]) > threshold
                      for k in range(trials)) for name, d in (("D", d_plus), ("D'", d_minus))}
    assert hits["D'"] == 0
    lo, hi = stats.binom.interval(0.999, trials, floor)
    assert lo <= hits["D"] <= hi, (hits, floor * trials)


# --------------------------------------------------------------------------------------------
# One dtype rule
# --------------------------------------------------------------------------------------------


def test_a_scale_normal_in_float64_but_subnormal_in_the_float32_draw_is_no_noise():
    """float64 mode, float32 data: the scale is checked in the dtype the noise is drawn in."""
    with jax.enable_x64(True):
        stat = mechanisms.bounded_mean(jnp.ones((2, 1), jnp.float32), 1e-37, "l2")
        _, ev = mechanisms.gaussian_mechanism(jax.random.key(0), stat, 1000.0, 0.4)
        assert ev.dtype == "float32" and float(ev.scale) < np.finfo(np.float32).tiny
        rel = Release.from_event(ev, "mean")
        assert rel.epsilons == (math.inf,)  # no noise was drawn: no guarantee


def test_float64_mode_with_float32_data_refuses_a_flushed_scale():
    """dp-mean with C = 5e-38 at (1000, 0.4): refused, never released with a (999.8, 0.4)
    ledger and the same estimate on every key."""
    with jax.enable_x64(True):
        x = dpm.simulate(jax.random.key(0), 200, jnp.zeros(1)).astype(jnp.float32)
        hp = dpm.MeanHyperparams(*(jnp.asarray(v, jnp.float64) for v in (1000.0, 0.4, 5e-38)))
        for est in (dpm.DP_MEAN, dpm.DP_MEAN._replace(check=None)):
            with pytest.raises(ValueError, match="subnormal"):
                dpjax.fit(est, 0, x, jnp.zeros(1, jnp.float32), hp)


@pytest.mark.parametrize("dtype, eps", [(jnp.bfloat16, 5.02), (jnp.bfloat16, 30.1),
                                        (jnp.float16, 5.0025)])
def test_the_l2_ball_coin_uses_the_requested_epsilon_whatever_the_input_dtype(
        monkeypatch, dtype, eps):
    """bfloat16 input at eps 5.02 ran the coin at 5.03125 (the epsilon cast to the input's
    dtype); the coin's probability now comes from the requested epsilon in float32."""
    seen = []
    coin = mechanisms.randomized_response_bit

    def spy(key, epsilon):
        seen.append(epsilon)
        return coin(key, epsilon)

    monkeypatch.setattr(mechanisms, "randomized_response_bit", spy)
    out = l2_ball_randomizer(jax.random.key(0), jnp.ones(3, dtype), 2.0, eps)
    assert out.value.dtype == dtype
    (got,) = seen
    assert got.dtype == jnp.float32 and float(got) == float(np.float32(eps))


# --------------------------------------------------------------------------------------------
# Refusals never depend on the data; a refused study level writes nothing
# --------------------------------------------------------------------------------------------


def test_dp_mean_refuses_an_overflowing_clip_on_public_values_for_every_data_set():
    """C = 2e38, n = 2: D = (C, C) overflowed (FloatingPointError) while D' = (C, -C) was
    released. Both are refused now, with the same message naming clip, before anything runs."""
    c = 2e38
    messages = []
    for rows in ([[c], [c]], [[c], [-c]]):
        with pytest.raises(ValueError, match="lower clip") as err:
            _fit_mean(jnp.asarray(rows, jnp.float32), 1.0, 0.1, c)
        messages.append(str(err.value))
    assert messages[0] == messages[1]


def test_clipped_gem_and_dp_iv_refuse_an_overflowing_clip_before_anything_runs(monkeypatch):
    """The same rule in the fit wrappers: n times the clipping level against the dtype's
    maximum, on public values, naming the hyperparameter (the step never runs)."""
    from dpjax import base
    from dpjax.algorithms import dp_gem, dp_iv
    from dpjax.models import GaussianMixture, LinearIV

    def never(*a, **k):
        raise AssertionError("the fit ran")

    monkeypatch.setattr(base, "run", never)
    model = GaussianMixture(0.5)
    data = model.simulate(jax.random.key(0), 50, jnp.ones(2))
    with pytest.raises(ValueError, match="lower clip"):
        dp_gem.fit_clipped_gem(0, data, model, epsilon=1.0, delta=1e-3, num_iterations=2,
                               beta0=jnp.ones(2), clip=1e37)
    iv_model = LinearIV(p=2, q=3, r=2)
    prm = iv_model.draw_parameters(jax.random.key(1))
    iv_data = iv_model.simulate(jax.random.key(0), 50, iv_model.pack(prm))
    with pytest.raises(ValueError, match="lower gamma2"):
        dp_iv.fit_dp_2s_gd(0, iv_data, rho1=1.0, rho2=1.0, eta=0.5, alpha=0.05,
                           num_iterations=2, gamma1=1.0, gamma2=1e37)


def test_a_refused_study_level_leaves_no_chunk_on_disk(tmp_path, capsys, monkeypatch):
    from dpjax import cli, study

    out = tmp_path / "run"
    argv = ["run", "dp_mean", "--out", str(out), "--quick", "--reps", "2", "--set", "n=40",
            "--set", "eps_grid=1", "--set", "clip=1e-39", "--no-progress"]
    # the level is refused before anything runs, by the estimator's own check (as a fit is)
    assert cli.main(argv) == 2
    assert "level 1 of 2 (epsilon=1, delta=0.0125, clip=1e-39): clip = 1e-39 gives a " \
        "sensitivity" in capsys.readouterr().err
    assert not out.exists()
    # without that check, the ledger refuses it after the run, and its chunks go too
    monkeypatch.setattr(study, "_check_levels", lambda *a, **k: None)
    assert cli.main(argv) == 2
    assert "nothing is returned" in capsys.readouterr().err
    assert list(out.rglob("*.npz")) == []
    assert not (out / "results.csv").exists()


# --------------------------------------------------------------------------------------------
# The docs say what the default path assumes
# --------------------------------------------------------------------------------------------


def test_the_audits_page_states_what_the_default_noise_path_assumes():
    text = (ROOT / "docs" / "audits.md").read_text()
    assert "## What the default noise path assumes" in text
    section = text.split("## What the default noise path assumes", 1)[1].split("\n## ", 1)[0]
    for number in ("[-5.4200, 5.2201]", "[-15.54, 16.64]", "[-8.29, 8.16]", "2.4e-6",
                   "1.3e-5", "1.1e-4", "0.024", "3.7e-8", "1.19e-7", "secure=True"):
        assert number in section, number
    # the note that the table's claims predate the ledgers' current reading is gone
    assert "have not been rerun" not in text and "Claims since" not in text
    for page in sorted((ROOT / "docs" / "families").glob("*.md")):
        assert "audits.md#what-the-default-noise-path-assumes" in page.read_text(), page.name


def test_the_readme_states_the_default_paths_floor_with_the_computed_numbers():
    """The README's numbers are the floors dpjax computes (not typed-in claims)."""
    import re

    text = " ".join((ROOT / "README.md").read_text().split())
    lo, hi = fs.support("normal", jnp.float32)
    assert f"[{lo:.2f}, {hi:.2f}] sigma" in text
    m = re.search(r"at delta = 1e-6 the true delta is at least (\S+) at epsilon 3, (\S+) at "
                  r"epsilon 8", text)
    assert m, "the README's floor sentence moved"
    for stated, eps in zip(m.groups(), (3.0, 8.0)):
        mu = 1.0 / float(mechanisms.gaussian_multiplier(eps, 1e-6))
        assert float(stated.rstrip(",.")) == pytest.approx(fs.delta_floor("gaussian", mu), rel=0.05)
    assert "secure=True" in text
