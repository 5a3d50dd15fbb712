"""Files that travel: what the repository records (benchmark results and their README, the docs,
the experiments' reports) names no folder of the machine that wrote it, and a benchmark records
its command as a user runs it from the repository root."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.run import recorded_command  # noqa: E402

FOLDERS = ("benchmarks", "docs", "experiments/reports")
# an absolute path into a machine's scratch or home folders (not a URL's path: no word
# character, '.', ':', '/', '~' or '-' just before it)
SCRATCH = re.compile(r"(?<![\w.:/~-])/(tmp|root|home|work)/")


def _committed_files() -> list[Path]:
    """The files git tracks under FOLDERS (every file there outside a checkout)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *FOLDERS], cwd=ROOT,
                             capture_output=True, check=True).stdout.decode()
        files = [ROOT / f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = [p for folder in FOLDERS for p in (ROOT / folder).rglob("*") if p.is_file()]
    return [f for f in files if f.is_file()]


def scratch_paths(text: str) -> list[str]:
    """The lines of ``text`` that name an absolute /tmp/, /root/, /home/ or /work/ path."""
    return [line.strip() for line in text.splitlines() if SCRATCH.search(line)]


def test_no_committed_file_names_a_scratch_folder():
    files = _committed_files()
    assert any(f.suffix == ".json" for f in files) and any(f.suffix == ".md" for f in files)
    bad = {}
    for f in files:
        try:
            text = f.read_text()
        except UnicodeDecodeError:  # figures
            continue
        if lines := scratch_paths(text):
            bad[str(f.relative_to(ROOT))] = lines[:3]
    assert bad == {}, "record paths relative to the repository (runs/NAME, benchmarks/...)"


def test_the_scratch_check_has_teeth():
    assert scratch_paths('"command": "python benchmarks/run.py --out /work/runs/a.json"')
    assert scratch_paths("dpjax run em_fig4 --out /tmp/em_fig4")
    assert scratch_paths("`/root/x`") and scratch_paths("(/home/u/dpjax)")
    assert not scratch_paths("dpjax run em_fig4 --out runs/em_fig4")
    assert not scratch_paths("see https://example.org/home/tmp/ and ./work/tmp/x")


def test_benchmarks_record_commands_relative_to_the_repository():
    cmd = recorded_command("benchmarks/run.py", [
        "--family", "em_hd", "--out", "/work/runs/bench26/cpu-idle.json", "--tag", "a b"])
    assert cmd == ("python benchmarks/run.py --family em_hd --out "
                   "benchmarks/results/cpu-idle.json --tag 'a b'")
    inside = str(ROOT / "benchmarks" / "results" / "x.json")
    assert recorded_command("benchmarks/ldp_scale.py", ["--out=" + inside]) == (
        "python benchmarks/ldp_scale.py --out=benchmarks/results/x.json")
    assert recorded_command("benchmarks/run.py", ["--reps", "5"]) == (
        "python benchmarks/run.py --reps 5")
