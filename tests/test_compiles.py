"""Programs compiled and compile seconds, from JAX's own compile events (dpjax._compiles):
what each run's config.json ``timing`` and ``dpjax run --all``'s timing lines record."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np

from dpjax import _compiles, study

ROOT = Path(__file__).resolve().parents[1]


def test_a_tally_counts_the_programs_jax_compiles():
    f = jax.jit(lambda x: x * 2.0 + 1.0)
    with _compiles.tally() as outer:
        f(np.ones(3, np.float32)).block_until_ready()
        f(np.ones(3, np.float32)).block_until_ready()  # the same shape: no compile
        with _compiles.tally() as inner:
            f(np.ones(4, np.float32)).block_until_ready()  # another shape: a second program
    assert (outer.programs, outer.compiled, outer.cache_hits) == (2, 2, 0)
    assert (inner.programs, inner.compiled) == (1, 1)
    assert outer.seconds >= inner.seconds > 0
    assert outer.to_dict() == {"programs_compiled": 2, "compile_seconds": round(outer.seconds, 3),
                               "programs_from_cache": 0}
    with _compiles.tally() as after:  # nothing compiled: nothing counted
        with _compiles.tally() as nested:  # equal counts: each tally ends as itself
            f(np.ones(4, np.float32)).block_until_ready()
        g = jax.jit(lambda x: x - 1.0)
        g(np.ones(2, np.float32)).block_until_ready()
    assert (nested.programs, after.programs) == (0, 1)


_CACHED = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    sys.path.insert(0, sys.argv[2])
    from dpjax import _compiles
    from dpjax.cli import enable_compile_cache
    enable_compile_cache(sys.argv[1])
    x = np.ones(5, np.float32)
    with _compiles.tally() as t:
        jax.jit(lambda v: v * 3.0)(x).block_until_ready()
        jax.clear_caches()  # the in-memory caches: the program comes from the disk cache
        jax.jit(lambda v: v * 3.0)(x).block_until_ready()
    print(json.dumps(t.to_dict() | {"programs": t.programs}))
""")


def test_programs_loaded_from_the_persistent_cache_are_not_counted_as_compiled(tmp_path):
    out = subprocess.run([sys.executable, "-c", _CACHED, str(tmp_path / "cache"), str(ROOT)],
                         capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert (got["programs"], got["programs_compiled"], got["programs_from_cache"]) == (2, 1, 1)


def test_a_run_records_its_programs_and_compile_seconds_in_config_json(tmp_path):
    from tests.test_sweep import _experiment

    exp = _experiment([])
    jax.clear_caches()  # what another test compiled is compiled again here
    first = study.run_experiment(exp, tmp_path, reps=2, seed=1, progress=False, num_devices=1)
    timing = first.config["timing"]
    assert timing["programs_compiled"] >= 1 and timing["compile_seconds"] > 0
    assert timing["seconds"] >= timing["compile_seconds"]
    (setting,) = first.config["settings"]
    assert 1 <= setting["programs_compiled"] <= timing["programs_compiled"]
    assert 0 < setting["compile_seconds"] <= timing["compile_seconds"]
    assert json.loads((tmp_path / "config.json").read_text())["timing"] == timing
    # the same study again in this process: its kernel is compiled already
    again = study.run_experiment(exp, tmp_path / "again", reps=2, seed=1, progress=False,
                                 num_devices=1)
    assert again.config["settings"][0]["programs_compiled"] == 0
