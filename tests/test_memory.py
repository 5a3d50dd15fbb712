"""dpjax._memory: the peak resident memory of a stretch of the process and of the process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dpjax import _memory

linux = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(),
                           reason="the per-stretch peak needs Linux's /proc/self/clear_refs")


def _touch(nbytes: int) -> bytearray:
    x = bytearray(nbytes)
    x[::4096] = b"1" * len(x[::4096])  # resident, not only reserved
    return x


@linux
def test_a_stretch_reads_its_own_peak_and_the_process_keeps_its_whole():
    big = _touch(400_000_000)
    del big  # the process's peak now holds it; the next stretch starts below it
    with _memory.stretch() as small:
        x = _touch(20_000_000)
    with _memory.stretch() as large:
        y = _touch(300_000_000)
    del x, y
    # each stretch its own peak (without the reset, both would read the 400 MB peak)
    assert small.peak_gb is not None and large.peak_gb is not None
    assert large.peak_gb - small.peak_gb > 0.25
    # the process's peak is still the 400 MB one, though the stretches reset the mark
    assert _memory.process_peak_gb() >= 0.4 + small.peak_gb - 0.05


def test_without_clear_refs_a_stretch_is_not_measured(monkeypatch, tmp_path):
    monkeypatch.setattr(_memory, "_CLEAR_REFS", tmp_path / "missing" / "clear_refs")
    with _memory.stretch() as s:
        pass
    assert s.peak_gb is None
    assert _memory.process_peak_gb() > 0.01


def test_a_setting_records_its_peak_memory(tmp_path):
    import json

    from dpjax import cli

    assert cli.main(["run", "dp_mean", "--quick", "--out", str(tmp_path), "--no-progress",
                     "--reps", "2"]) == 0
    meta = json.loads((tmp_path / "config.json").read_text())
    for s in meta["settings"]:
        if sys.platform == "linux":
            assert 0.05 < s["peak_rss_gb"] < 24
        else:
            assert "peak_rss_gb" not in s
