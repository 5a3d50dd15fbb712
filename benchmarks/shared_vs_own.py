"""A setting's time in its shared program against its own kernel (issue 47, item 1).

    python benchmarks/shared_vs_own.py [NAME ...] [--reps R] [--rounds K] [--json FILE]

A shared program (:func:`dpjax.sweep.plan_programs`) must cost a setting no more than padding
it does: the padded rows (at most twice the setting's own) and nothing for the machinery. A
``lax.cond`` per step in ``base.run_padded`` once made iv_fig9's padded 2S-GD 4x slower than
its own kernel with no padded rows at all; this script would have shown it. For every shared
program of the named experiments (their configuration below: small enough to time in
minutes), it times, warm, one setting of the program -- the one with the fewest rows, where
padding costs most -- three ways, each the best of ``--rounds`` calls of ``run_setting`` with
``--reps`` repetitions (data draws included, as a study runs them):

* ``own``: the setting's own kernel (:func:`dpjax.sweep.make_kernel`);
* ``shared, own sizes``: its padded form at its own sizes (``sweep.own_program``): no padded
  rows, no extra steps, so the ratio to ``own`` is the machinery's cost alone (1 expected);
* ``shared``: the program the study plans for it (its bucket's rows and steps), whose ratio to
  ``own`` is at most about the padding's ``rows / own rows``.

Compiles are not timed (each form is called once before the rounds).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

#: each experiment's configuration here (overrides of its full one): the settings that share,
#: at sizes that take seconds; ``reps`` per call as the studies run them at these sizes
CONFIGS: dict[str, dict] = {
    "iv_fig9": {"n_grid": (1000, 2000), "T_grid": (100, 300)},
    "iv_fig4": {"T_grid": (30, 100, 300)},
    "glm_fig1": {},
    "em_fig1": {"n_grid": (4000, 5000, 6000), "s_grid": (5, 10), "large_n": ()},
    "em_fig2": {},
    "gem_fig6": {"n_grid": (10000, 30000, 100000), "d_grid": (10,)},
}


def _settings(name: str, overrides: dict) -> list:
    import dpjax.experiments
    from dpjax import study

    exp = dpjax.experiments.registry()[name]
    config = study.resolve_config(exp, overrides)
    return study._merge_repeated_levels(study._study_settings(exp, config))


def _best(fn, rounds: int) -> float:
    fn()  # compile (not timed)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(name: str, overrides: dict, reps: int, rounds: int) -> list[dict]:
    """One row per shared program of the experiment: its smallest setting's three times."""
    from dpjax import sweep

    settings = _settings(name, overrides)
    plan = sweep.plan_programs(settings)
    groups: dict = {}
    for s in settings:
        if s.key in plan:
            groups.setdefault((repr(sweep.shape_family(s)), plan[s.key]), []).append(s)
    rows = []
    for (_, prog), members in groups.items():
        st = min(members, key=lambda s: (sweep.own_program(s).rows, s.key))
        own_prog = sweep.own_program(st)

        def run(program=None, st=st):
            return sweep.run_setting(st, reps=reps, seed=0, num_devices=1, program=program)

        own = _best(run, rounds)
        same = _best(lambda p=own_prog: run(p), rounds)
        shared = _best(lambda p=prog: run(p), rounds)
        row = {"experiment": name, "setting": st.key, "settings_in_program": len(members),
               "own_rows": own_prog.rows, "program_rows": prog.rows,
               "own_steps": own_prog.steps, "program_steps": prog.steps,
               "own_s": own, "shared_own_sizes_s": same, "shared_s": shared,
               "machinery_ratio": same / own, "shared_ratio": shared / own,
               "padding_ratio": prog.rows / own_prog.rows}
        rows.append(row)
        print(f"{name} {st.key}: {len(members)} settings in its program; rows "
              f"{own_prog.rows} -> {prog.rows}, steps {own_prog.steps} -> {prog.steps}; own "
              f"{own:.3f} s, shared at own sizes {same:.3f} s ({same / own:.2f}x), shared "
              f"{shared:.3f} s ({shared / own:.2f}x; padding {prog.rows / own_prog.rows:.2f}x)",
              flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"default: {', '.join(CONFIGS)}")
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    import jax

    rows = []
    for name in args.names or list(CONFIGS):
        rows += measure(name, CONFIGS.get(name, {}), args.reps, args.rounds)
    worst = max(rows, key=lambda r: r["machinery_ratio"]) if rows else None
    if worst:
        print(f"largest machinery ratio: {worst['machinery_ratio']:.2f}x "
              f"({worst['experiment']} {worst['setting']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": f"{platform.machine()} {jax.devices()[0].device_kind}, "
                       f"jax {jax.__version__}", "reps": args.reps, "rounds": args.rounds,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
