"""Programs a study compiles, and what they cost (issue 47, item 1).

    python benchmarks/shared_programs.py em_fig1 --out DIR [--full] [--compare REF_DIR]

Runs one bundled experiment (``--quick`` unless ``--full``) into DIR and prints: the settings,
the sweep's algorithm programs compiled (``sweep.compile_count``) and data programs
(``sweep.data_compile_count``), every XLA compilation JAX reports (``jax.monitoring``'s
``backend_compile_duration`` events: count and seconds, and those over 0.5 s), the wall time,
and per setting the program it ran (config.json). ``--compare REF_DIR``: the largest relative
difference of the ``results.csv`` values against another run's (e.g. one of the main branch),
and the reports' comparison (``dpjax.reproduce.compare_summaries``) of the two summaries.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path

from jax import monitoring

_COMPILES: list[float] = []


def _listen(name: str, secs: float, **kwargs) -> None:
    if name == "/jax/core/compile/backend_compile_duration":
        _COMPILES.append(secs)


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _largest_relative_difference(ref: Path, out: Path) -> float:
    a, b = _rows(ref / "results.csv"), _rows(out / "results.csv")
    if len(a) != len(b):
        return math.inf
    worst = 0.0
    for ra, rb in zip(a, b):
        for k, va in ra.items():
            try:
                x, y = float(va), float(rb[k])
            except (TypeError, ValueError):
                continue
            if math.isfinite(x) and math.isfinite(y) and x != y:
                worst = max(worst, abs(x - y) / max(abs(x), 1e-12))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--out", required=True)
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--compare")
    args = parser.parse_args()
    monitoring.register_event_duration_secs_listener(_listen)

    import dpjax.experiments
    from dpjax import reproduce, results, study, sweep

    exp = dpjax.experiments.registry()[args.name]
    programs, data_programs = sweep.compile_count(), sweep.data_compile_count()
    t0 = time.perf_counter()
    study.run_experiment(exp, args.out, quick=not args.full, progress=False)
    wall = time.perf_counter() - t0
    meta = json.loads((Path(args.out) / "config.json").read_text())
    big = [c for c in _COMPILES if c > 0.5]
    print(f"{args.name}{'' if args.full else ' --quick'}: {len(meta['settings'])} settings, "
          f"{sweep.compile_count() - programs} algorithm programs and "
          f"{sweep.data_compile_count() - data_programs} data programs compiled; XLA "
          f"compilations {len(_COMPILES)} ({sum(_COMPILES):.1f} s), over 0.5 s {len(big)} "
          f"({sum(big):.1f} s); wall {wall:.1f} s")
    for s in meta["settings"]:
        print(f"  {s['key']}: {s.get('program')} "
              f"({'compiled' if s.get('compiled') else 'reused'})")
    if args.compare:
        ref = Path(args.compare)
        print(f"largest relative difference of results.csv against {ref}: "
              f"{_largest_relative_difference(ref, Path(args.out)):.3g}")
        cmp = reproduce.compare_summaries(
            args.name, results.read_csv(ref / "summary.csv"),
            results.read_csv(Path(args.out) / "summary.csv"))
        moved = [r for r in cmp if r["status"] != "ok"]
        print(f"summary comparison: {len(cmp)} values, {len(moved)} not ok")


if __name__ == "__main__":
    main()
