"""dpjax._memory: the process's own peak resident memory, recorded per setting and per study
process."""

from __future__ import annotations

import json
import subprocess
import sys

from dpjax import _memory


def _peak_of_child(code: str) -> float:
    out = subprocess.run([sys.executable, "-c", "from dpjax._memory import process_peak_gb\n"
                          f"{code}\nprint(process_peak_gb())"],
                         capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def _touch(nbytes: int) -> bytearray:
    x = bytearray(nbytes)
    x[::4096] = b"1" * len(x[::4096])  # resident, not only reserved
    return x


def test_the_peak_is_the_process_own_and_grows_with_it():
    before = _memory.process_peak_gb()
    x = _touch(300_000_000)
    assert _memory.process_peak_gb() >= 0.3
    # a child of this process (which now holds 0.3 GB more) reads its own peak only:
    # ru_maxrss on Linux would count this process's memory at the moment the child started
    small = _peak_of_child("")
    big = _peak_of_child("x = bytearray(400_000_000)\nx[::4096] = b'1' * len(x[::4096])")
    del x
    assert big >= 0.4 and big - small > 0.35, (small, big)
    if sys.platform == "linux":  # this process held at least before + 0.3 GB
        assert small < 0.3 <= before + 0.3 - 0.05, (small, before)


def test_a_setting_records_the_peak_so_far(tmp_path):
    from dpjax import cli

    assert cli.main(["run", "dp_mean", "--quick", "--out", str(tmp_path), "--no-progress",
                     "--reps", "2"]) == 0
    meta = json.loads((tmp_path / "config.json").read_text())
    peaks = [s["peak_rss_gb"] for s in meta["settings"]]
    assert all(0.05 < p < 24 for p in peaks)
    assert peaks == sorted(peaks)  # the process's peak so far: it never falls
