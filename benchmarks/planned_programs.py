"""Planned algorithm programs of every bundled experiment (issue 47, item 1): nothing runs.

    python benchmarks/planned_programs.py [NAME ...] [--quick] [--families]

For each experiment (all bundled ones by default) its full configuration's settings (``--quick``:
the quick one) are grouped as a study groups them (:func:`dpjax.sweep.plan_programs`), and the
script prints the settings, the programs a cold run compiles (a setting outside the plan is one
program of its own; the settings of a plan that share padded sizes and a shape family are one),
and with ``--families`` the shared programs' families. The last line is the total.
"""

from __future__ import annotations

import argparse


def planned(settings) -> tuple[int, dict]:
    """``(programs, {program id: setting keys})`` of a study's settings, as a run plans them."""
    from dpjax import sweep

    plan = sweep.plan_programs(settings)
    shared: dict = {}
    own = 0
    for s in settings:
        prog = plan.get(s.key)
        if prog is None:
            own += 1
            continue
        fam = sweep.shape_family(s)
        shared.setdefault((fam, prog), []).append(s.key)
    return own + len(shared), {
        f"{fam[0].family} {prog}": keys for (fam, prog), keys in shared.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--families", action="store_true")
    args = parser.parse_args()

    import dpjax.experiments
    from dpjax import study

    exps = dpjax.experiments.registry()
    total_settings = total_programs = 0
    for name in args.names or sorted(exps):
        exp = exps[name]
        config = study.resolve_config(exp, quick=args.quick)
        settings = study._merge_repeated_levels(study._study_settings(exp, config))
        programs, shared = planned(settings)
        total_settings += len(settings)
        total_programs += programs
        print(f"{name}: {len(settings)} settings -> {programs} programs")
        if args.families:
            for fam, keys in shared.items():
                print(f"    {fam}: {len(keys)} settings")
    print(f"all: {total_settings} settings -> {total_programs} programs")


if __name__ == "__main__":
    main()
