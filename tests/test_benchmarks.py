"""The benchmark harness (benchmarks/run.py) at tiny size, and the honesty of its baselines:
each plain-NumPy baseline computes the same estimate as dpjax at epsilon = inf on the same data
set (the timings compare the same algorithm), and the harness runs end to end in quick mode."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import run  # noqa: E402


@pytest.mark.parametrize("family", sorted(run.FAMILIES))
def test_numpy_baseline_agrees_with_dpjax_at_eps_inf(family):
    a = run.agreement(family)
    # float32 (dpjax) against float64 (NumPy) on the same float32 data, over 8..20 iterations
    assert a["max_abs_diff"] <= 2e-5 * max(a["scale"], 1.0), a
    assert a["scale"] > 0.1  # a non-trivial estimate, not two zero vectors
    assert a["same_support"]


def test_agreement_detects_a_different_algorithm(monkeypatch):
    """The check has power: a baseline with another step size disagrees."""
    np_mod = run._numpy("numpy_glm_gd")
    orig = np_mod.estimate
    monkeypatch.setattr(np_mod, "estimate", lambda *a, **k: orig(*a, **k, eta=0.9))
    a = run.agreement("glm_gd")
    assert a["max_abs_diff"] > 1e-3


def test_harness_quick_inline(tmp_path):
    out = tmp_path / "q.json"
    assert run.main(["--quick", "--family", "em_ld", "--inline", "--no-e2e",
                     "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    k = res["families"]["em_ld"]["kernel"]
    assert k["reps"] == 4 and k["levels"] == 4  # 3 levels of Alg 4 + gradient EM
    assert k["dpjax_s"] > 0 and k["numpy_s"] > 0 and k["speedup"] > 0
    assert k["compile_s"] >= 0 and k["dpjax_peak_rss_mb"] > 0
    assert res["machine"]["cpu_count"] >= 1 and len(res["load_before"]) == 3
    f = k["floor"]  # the floor, measured in the same run
    assert f["floor_s"] == max(f["rng_s"], f["flops_s"], f["memory_s"]) > 0
    assert f["ratio"] == pytest.approx(k["dpjax_s"] / f["floor_s"])
    assert f["rates"]["matmul_flops_per_s"] > 0 and f["rates"]["normal_s"] > 0
    text = run.table(res)
    assert "em_ld" in text and "kernel / floor" in text
    assert f"* `em_ld`: {f['bound']}-bound floor" in text  # the one-line reason


def _fake_setting(method_cols, blocks, block, batching, steps, levels):
    from types import SimpleNamespace

    return SimpleNamespace(plan=SimpleNamespace(num_blocks=blocks, block_size=block),
                           estimator=SimpleNamespace(num_steps=steps, batching=batching),
                           levels=[{}] * levels, columns=method_cols)


def test_floor_work_of_tiny_studies_by_hand():
    # noisy GD: 100 records, d = 3, T = 2 full passes, 2 levels, 1 repetition
    s = _fake_setting({"method": "alg1", "d": 3}, 1, 100, "full", 2, 2)
    w = run.setting_work("glm_gd", s, 1)
    assert w == run.Work(normals=3 * 2 * 2,  # d noise normals per step and level
                         words=300 + 100,  # uniform design and Bernoulli responses
                         mm_flops=4 * 100 * 3 * 4,  # X beta and X^T r, 4 (step, level) pairs
                         vec_flops=3 * 100 * 3 * 4,  # per-record clipping
                         bytes=4 * 300 * (1 + 2))  # written once, read once per step
    assert run.setting_work("glm_gd", s, 5) == w * 5  # linear in repetitions
    # Alg 3: 3 disjoint batches of 10 records, d = 4, s_hat = 2 peeling rounds, 1 level
    s = _fake_setting({"method": "hd-dp-em", "d": 4, "s_hat": 2}, 3, 10, "disjoint", 3, 1)
    w = run.setting_work("em_hd", s, 1)
    assert w == run.Work(normals=30 * 4, words=30 + 3 * (2 * 4 + 2),
                         mm_flops=3 * 4 * 10 * 4, vec_flops=3 * (2 * 10 * 4 + 2 * 4),
                         bytes=4 * 4 * (30 + 3 * 10))
    # the study's real settings, every family, are counted (no missing column)
    for name, fam in run.FAMILIES.items():
        w = run.study_work(name, run._settings(fam, fam.quick), 2)
        assert min(w.normals + w.words, w.mm_flops, w.vec_flops, w.bytes) > 0, name


def test_floor_is_the_largest_part():
    rates = {"normal_s": 1e-9, "word_s": 5e-10, "matmul_flops_per_s": 1e11,
             "vector_flops_per_s": 1e10, "bytes_per_s": 1e10}
    w = run.Work(normals=1e9, words=2e9, mm_flops=1e11, vec_flops=1e10, bytes=5e10)
    f = run.floor(w, rates)
    assert (f["rng_s"], f["flops_s"], f["memory_s"]) == pytest.approx((2.0, 2.0, 5.0))
    assert f["floor_s"] == pytest.approx(5.0) and f["bound"] == "memory"
    f = run.floor(run.Work(normals=1e10, bytes=1.0), rates)
    assert f["bound"] == "rng" and f["floor_s"] == pytest.approx(10.0)


def test_readme_table_is_replaced_between_markers(tmp_path):
    res = {"machine": {"cpu_model": "x", "cpu_count": 2}, "command": "c", "tag": "t",
           "date": "d", "load_before": [1, 1, 1], "load_after": [2, 2, 2],
           "families": {"f": {"kernel": {"reps": 1, "levels": 2, "dpjax_s": 1.0,
                                         "compile_s": 0.5}, "agreement": {
               "max_abs_diff": 0.0, "scale": 1.0}}}}
    readme = tmp_path / "README.md"
    readme.write_text("# B\n\ntext\n")
    run.write_readme_table(res, readme)
    run.write_readme_table(res, readme)
    text = readme.read_text()
    assert text.count("harness-table:start") == 1 and text.startswith("# B\n\ntext\n")
    assert "| f | 1 x 2 | 1.00 s |" in text


def test_gem_agreement_has_power(monkeypatch):
    """The Algorithm-2 comparison sees psi: a baseline with another truncation scale
    disagrees."""
    np_mod = run._numpy("numpy_gem")
    orig = np_mod.estimate
    monkeypatch.setattr(np_mod, "estimate", lambda *a, **k: orig(*a, **{**k, "s": 1.2}))
    assert run.agreement("gem")["max_abs_diff"] > 1e-3


def test_gem_numpy_calibration_equals_dpjax_noise():
    """At finite epsilon the NumPy baseline draws its noise at dpjax's scale: the same s (the
    sigma-consistent rule) and the same per-coordinate sigma as Algorithm 2's step reports,
    at the benchmark's setting (n = 1e5, d = 10, T = 22, delta = 1/n)."""
    import jax
    import numpy as np

    from dpjax.algorithms import dp_gem
    from dpjax.models import GaussianMixture

    np_mod = run._numpy("numpy_gem")
    n, d, T, tau = 100000, 10, 22, 1.0 + 9.0 / 10
    model = GaussianMixture(1.0)
    est = dp_gem.dp_gem(model, T, calibration="paper")
    data = model.simulate(jax.random.key(0), n, np.full(d, 0.9, np.float32))
    for eps in (0.2, 0.5, 1.0):
        f = lambda v: np.asarray(v, np.float32)  # noqa: E731
        hp = dp_gem.DPGEMHyperparams(f(eps), f(1.0 / n), f(1.0), f(tau), f(0.05), f(np.nan))
        _, info = est.step(jax.random.key(1), est.init(np.zeros(d, np.float32)), data, hp)
        s, _, sd = np_mod.calibration(n, d, eps, 1.0 / n, tau, T)
        assert float(info.s) == pytest.approx(s, rel=1e-5)
        assert float(info.noise_scale) == pytest.approx(sd, rel=1e-5)


def test_ldp_agreement_has_power(monkeypatch):
    """The Algorithm-2 comparison sees the projection onto the unit ball: a baseline that
    projects onto a larger ball disagrees."""
    np_mod = run._numpy("numpy_ldp")
    orig = np_mod.estimate
    monkeypatch.setattr(np_mod, "estimate", lambda *a, **k: orig(*a, **{**k, "theta_norm": 1.5}))
    assert run.agreement("ldp")["max_abs_diff"] > 1e-3


def test_ldp_numpy_study_is_the_dpjax_setting():
    """The ldp family's `dpjax run` overrides give one setting (Alg 2, n panel, eps 0.5, 1,
    inf) whose users, k', T, tau, radius and step are the NumPy study's; the NumPy randomizer's
    reports have dpjax's output norm B and are unbiased (the identity at eps = inf)."""
    import math

    import numpy as np

    from dpjax import local_randomizers as LR

    np_mod = run._numpy("numpy_ldp")
    fam = run.FAMILIES["ldp"]
    for size in (fam.full, fam.quick):
        (s,) = run._settings(fam, size)
        kw = size.numpy_kwargs
        n_used = (kw["n"] // kw["T"]) * kw["T"]
        kp = min(2 * kw["k"], kw["d"])
        tau = 0.5 * math.sqrt(math.log(n_used))
        assert s.columns["method"] == "alg2" and s.columns["panel"] == "n"
        assert (s.n, s.columns["d"], s.columns["k_prime"], s.columns["T"]) == (
            n_used, kw["d"], kp, kw["T"])
        assert [lv["epsilon"] for lv in s.levels] == list(np_mod.EPS)
        for lv in s.levels:
            assert lv["tau1"] == lv["tau2"] == pytest.approx(tau, rel=1e-12)
            assert lv["r"] == pytest.approx(np_mod.radius(kw["d"], kp, tau, tau), rel=1e-12)
            assert lv["eta"] == 1.0
    rng = np.random.default_rng(0)
    d, r, eps, m = 10, 2.0, 1.0, 200_000
    g = np.zeros(d)
    g[:3] = [0.9, -0.6, 0.3]
    reports = np_mod.randomize(rng, np.tile(g, (m, 1)), r, eps)
    b = float(LR.randomizer_scale(r, eps, d))
    assert np_mod.randomizer_scale(r, eps, d) == pytest.approx(b, rel=1e-12)
    np.testing.assert_allclose(np.linalg.norm(reports, axis=1), b, rtol=1e-12)
    se = b / math.sqrt(d * m)  # per-coordinate standard error of the mean report
    assert np.max(np.abs(reports.mean(axis=0) - g)) < 5 * se
    np.testing.assert_array_equal(np_mod.randomize(rng, g[None], r, math.inf), g[None])


def test_shared_vs_own_times_every_shared_program_of_a_study():
    """benchmarks/shared_vs_own.py on a tiny iv_fig9: one row per shared program, its smallest
    setting timed three ways, the padding read off the plan."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "benchmarks" / "shared_vs_own.py"
    spec = importlib.util.spec_from_file_location("shared_vs_own", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.measure("iv_fig9", {"n_grid": (100, 150), "T_grid": (3, 5), "dim": 2},
                       reps=2, rounds=1)
    assert rows and {r["experiment"] for r in rows} == {"iv_fig9"}
    for r in rows:
        assert r["settings_in_program"] >= 2
        assert r["own_rows"] == 100 and r["program_rows"] == 150  # the smallest, padded
        assert r["padding_ratio"] == 1.5 and r["program_steps"] == 5
        assert min(r["own_s"], r["shared_own_sizes_s"], r["shared_s"]) > 0
        assert r["shared_ratio"] == r["shared_s"] / r["own_s"]


def test_row_blocks_times_a_form_with_and_without_its_blocks():
    """benchmarks/row_blocks.py on a tiny iv_fig3 (blocks of 256, n = 300 in a program of
    768 rows: 600 in whole blocks): one row, both forms timed, the ratio theirs; and a tiny
    em_fig2 case."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "benchmarks" / "row_blocks.py"
    spec = importlib.util.spec_from_file_location("row_blocks", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert set(mod.CASES) and set(mod.GLM_CASES)
    row = mod.measure("iv", ("iv_fig3", {"dims": (2,), "n_grid": (300, 600), "T": 3,
                                         "clip_consts": (1.0,)}, "dp,d=2,n=300", 2), rounds=1)
    assert row["own_rows"] == 300 and row["program_rows"] == 768 and row["row_block"] == 256
    assert min(row["blocked_s"], row["unblocked_s"]) > 0
    assert row["ratio"] == row["blocked_s"] / row["unblocked_s"]
    row = mod.measure("em", ("em_fig2", {"n_grid": (5000, 25000), "d_grid": (3,),
                                         "d_base": 3, "n_base": 5000},
                             "gradient-em,n=5000,d=3", 2), rounds=1)
    assert row["row_block"] == 4096 and row["program_rows"] > row["own_rows"]
