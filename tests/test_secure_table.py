"""The secure-delivery table of docs/privacy.md (issue 44) and its sampler floors.

``benchmarks/secure_table.py --write`` generates both; these tests read the page: its table
rows cover every private ``fit_*`` (three sizes each) with a delivered/requested in
[0.99, 1], and its floor numbers are :func:`dpjax._float_sampler.delta_floor`'s.
"""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import secure_table  # noqa: E402
from tests.test_fit_contract import (  # noqa: E402
    FITS,
    NO_SECURE_PATH,
    NOT_DP_AS_CLAIMED,
    is_private,
)

PAGE = ROOT / "docs" / "privacy.md"


def _rows(text):
    block = secure_table.between(text, secure_table.TABLE_MARKERS)
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in rows]


def test_the_table_covers_every_private_fit_at_three_sizes():
    private = {name for name, fn in FITS.items() if is_private(fn)} - NO_SECURE_PATH
    assert secure_table.NO_SECURE_PATH == NO_SECURE_PATH
    assert set(secure_table.private_fits()) == private  # the script finds the same fits
    rows = _rows(PAGE.read_text())
    shown = [r[0].strip("`") for r in rows]
    assert set(shown) == private
    for name in private:
        assert shown.count(name) == 3, name
        assert len({r[1] for r in rows if r[0].strip("`") == name}) == 3, name


def test_each_delivered_fraction_shown_lies_in_099_1():
    for fit, size, delivered, secure_s, float_s, ratio in _rows(PAGE.read_text()):
        if fit.strip("`") in NOT_DP_AS_CLAIMED:
            assert delivered.startswith("not DP as claimed")
            continue
        assert 0.99 <= float(delivered) <= 1.0, (fit, size, delivered)
        # the ratio is the timings' (shown rounded to 0.01 s and 0.001 s)
        s, f, r = float(secure_s), float(float_s), float(ratio.rstrip("x"))
        assert (s - 0.005) / (f + 0.0005) - 0.5 <= r <= (s + 0.005) / max(f - 0.0005, 1e-9) + 0.5


def test_the_table_check_has_teeth():
    good = PAGE.read_text()
    rows = _rows(good)
    fit, size, delivered = rows[0][:3]
    bad = good.replace(f"| {fit} | {size} | {delivered} |", f"| {fit} | {size} | 0.78 |", 1)
    assert bad != good
    with pytest.raises(AssertionError):
        for r in _rows(bad):
            if r[0].strip("`") not in NOT_DP_AS_CLAIMED:
                assert 0.99 <= float(r[2]) <= 1.0
    assert len(_rows(good.replace(f"| {fit} | {size} |", "| `x` | y |", 1))) == len(rows)


def test_the_pages_sampler_floors_are_delta_floors():
    """docs/privacy.md quoted continuous-normal tails (9.1e-7, 1.5e-6, 1.6e-7); the floors of
    the implemented sampler come from delta_floor, and the page carries exactly those."""
    text = PAGE.read_text()
    assert secure_table.between(text, secure_table.FLOOR_MARKERS) == \
        secure_table.sampler_floor_block()
    for stale in ("9.1e-7", "1.5e-6", "1.6e-7"):
        assert stale not in text
    # the sentences' claims hold for the computed floors
    d, (lo, hi) = secure_table.FLOOR_CROSSING
    assert secure_table.gaussian_floor(lo, d) < d < secure_table.gaussian_floor(hi, d)
    d3, e3 = secure_table.FLOOR_SMALL_DELTA
    assert secure_table.gaussian_floor(e3, d3) > d3
    numbers = re.findall(r"\d\.\d+e-\d", secure_table.sampler_floor_block())
    assert len(numbers) >= 5
