"""benchmarks/ldp_scale.py at tiny n: each timed run (in process) streams its users in chunks
and reports the delivered guarantee, and the slopes, table and figure of the parent."""

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import ldp_scale  # noqa: E402


@pytest.mark.parametrize("alg", ["alg2", "alg1"])
def test_child_streams_users_and_reports_the_ledger(alg):
    r = ldp_scale.child(alg, 3000, d=4, k=1, eps=1.0, rounds=2, chunk=500, chunk1=1000, seed=0)
    assert r["alg"] == alg and r["d"] == 4
    if alg == "alg2":  # 2 rounds of 1500 users, 3 chunks of 500 each
        assert (r["n"], r["chunks_per_round"], r["users_per_step"]) == (3000, 3, 500)
        assert r["guarantee"] == pytest.approx(1.0) and r["guarantee_delta"] == 0.0
    else:
        assert (r["n"], r["chunks"], r["users_per_step"]) == (3000, 3, 1000)
        # Gaussian releases read off the exact curve: at most the requested (1, 1e-5)
        assert 0 < r["guarantee"] <= 1.0 and r["guarantee_delta"] == pytest.approx(1e-5)
    assert r["run_s"] > 0 and r["peak_rss_mb"] > 0 and math.isfinite(r["error"])


def test_slopes_table_and_figure(tmp_path):
    runs = [{"alg": "alg2", "n": n, "run_s": 2e-6 * n, "peak_rss_mb": rss, "users_per_s": 5e5,
             "compile_s": 1.0, "load": [1.0, 1.0, 1.0], "error": 0.1, "users_per_step": m}
            for n, rss, m in ((1e5, 200.0, 10**5), (1e6, 300.0, 250_000), (1e7, 300.0, 250_000))]
    sl = ldp_scale.slopes(runs)
    assert sl["alg2"]["time"] == pytest.approx(1.0) and sl["alg2"]["peak_rss"] > 0.05
    # memory is flat over the points that share the full chunk (below it the chunk is n)
    assert sl["alg2"]["peak_rss_fixed_chunk"] == pytest.approx(0)
    assert sl["alg2"]["fixed_chunk_points"] == 2
    res = {"runs": runs + [{"alg": "alg1", "n": 10, "error_message": "timed out"}],
           "slopes": sl, "machine": {"cpu_count": 2}, "load_before": [1, 1, 1], "d": 4}
    ldp_scale.figure(res, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0
    text = ldp_scale.table(res)
    assert "| alg2 | 1e+07 | 20.0 s |" in text and "failed: timed out" in text
