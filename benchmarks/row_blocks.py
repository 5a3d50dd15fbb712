"""A padded form that adds up its records in row blocks, against the same form without (issue 47).

    python benchmarks/row_blocks.py [CASE ...] [--rounds K] [--json FILE]

A padded form with :attr:`dpjax.base.Padded.row_block` adds up its per-record terms block by
block up to the count (:func:`dpjax.base.fold_rows`, :func:`dpjax.base.fold_affine`), so
settings of every ``n`` of a shape family share one program. That must not make the program
slower where it runs a setting's own rows: for each case below (a setting and the program
its study plans for it), the script times, warm, the best of ``--rounds`` calls of
``run_setting`` with the form as it is (``blocked``) and with the same step built without
blocks (``unblocked``; one loop over all the program's rows), and prints their ratio. Where
the setting is padded past its own rows (``program rows > own rows``), the blocked form skips
the blocks past its records, and its ratio says what the blocks save.

``glm_fig1`` is Algorithm 1 of the GLM paper in blocks of 4096, built here (it is not a
bundled form): measured slower on its largest setting, so it keeps the geometric buckets
(docs/architecture.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time

#: case -> (experiment, configuration overrides, setting key, repetitions per call)
CASES: dict[str, tuple[str, dict, str, int]] = {
    "em_fig2/gradient-em/n=5000": ("em_fig2", {}, "gradient-em,n=5000,d=10", 20),
    "em_fig2/gradient-em/n=25000": ("em_fig2", {}, "gradient-em,n=25000,d=10", 20),
    "em_rmc/ld-dp-em/n=50000": ("em_rmc", {}, "ld-dp-em,n=50000,d=10,p=0.1", 20),
    "em_rmc/ld-dp-em/n=200000": ("em_rmc", {}, "ld-dp-em,n=200000,d=10,p=0.1", 20),
    "iv_fig3/dp/d=5/n=8000": ("iv_fig3", {}, "dp,d=5,n=8000", 50),
    "iv_fig3/gd/d=5/n=8000": ("iv_fig3", {}, "gd,d=5,n=8000", 50),
    "iv_fig3/dp/d=50/n=8000": ("iv_fig3", {}, "dp,d=50,n=8000", 10),
    "iv_fig3/dp/d=5/n=250": ("iv_fig3", {}, "dp,d=5,n=250", 50),
    "gem_mean/thm2/n=100000": ("gem_mean", {}, "thm2,n=100000", 100),
    "gem_mean/thm2/n=1000": ("gem_mean", {}, "thm2,n=1000", 100),
}
GLM_CASES: dict[str, tuple[str, dict, str, int]] = {
    "glm_fig1/alg1/n=80000": ("glm_fig1", {}, "alg1-gaussian,T=50,n=80000,d=20", 10),
    "glm_fig1/alg1/n=20000": ("glm_fig1", {}, "alg1-gaussian,T=50,n=20000,d=20", 10),
}


class _BlockedGLM:
    """A GLM whose masked clipped gradient is added up in blocks of 4096 records
    (:func:`dpjax.base.fold_affine`): Algorithm 1 as a row-block form would run it."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def clipped_gradient(self, beta, data, truncation, norm, support=None, mask=None,
                         count=None):
        from dpjax import base

        return base.fold_affine(lambda rows, m: self.inner.clipped_gradient(
            beta, rows, truncation, norm, support=support, mask=m, count=count), data, mask,
            4096)


def _settings(name: str, overrides: dict) -> list:
    import dpjax.experiments
    from dpjax import study

    exp = dpjax.experiments.registry()[name]
    config = study.resolve_config(exp, overrides)
    return study._merge_repeated_levels(study._study_settings(exp, config))


def _forms(name: str, overrides: dict, setting):
    """``(blocked, unblocked, program)``: the padded forms to compare and the program."""
    from dpjax import sweep
    from dpjax.algorithms import dp_em, dp_iv

    padded = setting.estimator.padded
    if name == "glm_fig1":
        from dpjax.algorithms import dp_glm

        step = dp_glm._make_noisy_gd_step(_BlockedGLM(dp_glm.GLM()), None, "gaussian", 2.0)
        blocked = padded._replace(family=padded.family + " [blocks 4096]", step=step,
                                  row_block=4096)
        rows = max(sweep._data_rows(s) for s in _settings(name, overrides)
                   if s.key.startswith("alg1-gaussian") and s.key.endswith(",d=20"))
        program = sweep.Program(setting.estimator.num_steps, sweep.padded_rows(rows, 4096), 1)
        return blocked, padded, program
    program = sweep.plan_programs(_settings(name, overrides))[setting.key]
    if name.startswith("em_"):
        cells = dict(zip(padded.step.__code__.co_freevars,
                         (c.cell_contents for c in padded.step.__closure__)))
        step = dp_em._make_step(cells["model"], cells["privatiser"], cells["s_hat"],
                                cells["calibration"], None)
    elif name.startswith("iv_"):
        from dpjax.experiments._iv_common import _tracked_padded

        variant = "dp" if setting.key.startswith("dp") else "none"
        inner = dp_iv.Padded(dp_iv._NAMES[variant] + ("/paper" if variant == "dp" else ""),
                             dp_iv._init, dp_iv._make_step(variant, "paper", None, None), "full")
        return padded, _tracked_padded(inner), program
    else:  # gem_mean: its padded step reads the module's ROW_BLOCK at trace time
        import functools

        from dpjax.experiments import gem_mean

        method = setting.key.split(",")[0]

        def step(key, state, x, hp, sizes):
            saved, gem_mean.ROW_BLOCK = gem_mean.ROW_BLOCK, None
            try:
                return functools.partial(gem_mean._padded_step, method)(key, state, x, hp,
                                                                          sizes)
            finally:
                gem_mean.ROW_BLOCK = saved
    unblocked = padded._replace(family=padded.family + " [unblocked]", step=step,
                                row_block=None)
    return padded, unblocked, program


def measure(case: str, spec, rounds: int) -> dict:
    from dpjax import sweep

    name, overrides, key, reps = spec
    setting = next(s for s in _settings(name, overrides) if s.key == key)
    blocked, unblocked, program = _forms(name, overrides, setting)
    times = {}
    for tag, form in (("unblocked", unblocked), ("blocked", blocked)):
        st = dataclasses.replace(setting, estimator=setting.estimator._replace(padded=form))

        def call(st=st):
            t0 = time.perf_counter()
            sweep.run_setting(st, reps=reps, seed=0, num_devices=1, program=program)
            return time.perf_counter() - t0

        call()  # compile (not timed)
        times[tag] = min(call() for _ in range(rounds))
    row = {"case": case, "setting": key, "reps": reps, "own_rows": sweep._data_rows(setting),
           "program_rows": program.rows, "row_block": blocked.row_block,
           "blocked_s": times["blocked"], "unblocked_s": times["unblocked"],
           "ratio": times["blocked"] / times["unblocked"]}
    print(f"{case}: rows {row['own_rows']} of {program.rows}, blocks of {row['row_block']}: "
          f"blocked {row['blocked_s']:.3f} s, unblocked {row['unblocked_s']:.3f} s "
          f"({row['ratio']:.2f}x)", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"default: {', '.join(CASES)}; also "
                        f"{', '.join(GLM_CASES)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    import jax

    every = {**CASES, **GLM_CASES}
    rows = [measure(c, every[c], args.rounds) for c in (args.cases or list(CASES))]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": f"{platform.machine()} {jax.devices()[0].device_kind}, "
                       f"jax {jax.__version__}", "rounds": args.rounds, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
