"""Planned algorithm programs of every bundled experiment (issue 47, item 1): nothing runs.

    python benchmarks/planned_programs.py [NAME ...] [--quick] [--families]

For each experiment (all bundled ones by default) its full configuration's settings (``--quick``:
the quick one) are grouped as a study groups them (:func:`dpjax.sweep.plan_programs`), and the
script prints the settings, the programs a cold run compiles (a setting outside the plan is one
program of its own; the settings of a plan that share padded sizes and a shape family are one),
the data programs of the settings that run in a shared program (one each, or one for the
settings of a program whose ``simulate`` is prefix-stable, :func:`dpjax.sweep.shares_data_program`),
and with ``--families`` the shared programs' families. The last line is the total.
"""

from __future__ import annotations

import argparse


def data_programs(settings, reps: int) -> int:
    """The data programs a cold run of ``reps`` repetitions compiles for the settings that run
    in a shared program (the others' data are drawn in their own kernel): one per setting's
    own data program, one per shared data program (:func:`dpjax.sweep.shares_data_program`).
    Builds the (uncompiled) programs and counts the distinct ones."""
    from dpjax import sweep

    plan = sweep.plan_programs(settings)
    kernels = set()
    for s in settings:
        prog = plan.get(s.key)
        if prog is None or sweep.shape_family(s) is None:
            continue
        data, _ = sweep.make_shared_kernels(s, prog, 1, sweep.shares_data_program(s, prog, reps))
        kernels.add(id(data))
    return len(kernels)


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
    total_settings = total_programs = total_data = 0
    for name in args.names or sorted(exps):
        exp = exps[name]
        config = study.resolve_config(exp, quick=args.quick)
        settings = study._merge_repeated_levels(study._study_settings(exp, config))
        programs, shared = planned(settings)
        data = data_programs(settings, exp.quick_reps if args.quick else exp.reps)
        total_settings += len(settings)
        total_programs += programs
        total_data += data
        print(f"{name}: {len(settings)} settings -> {programs} programs (+ {data} data "
              "programs)")
        if args.families:
            for fam, keys in shared.items():
                print(f"    {fam}: {len(keys)} settings")
    print(f"all: {total_settings} settings -> {total_programs} programs (+ {total_data} data "
          "programs)")


if __name__ == "__main__":
    main()
