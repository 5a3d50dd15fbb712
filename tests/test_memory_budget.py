"""`dpjax run --memory-budget GB`: the chunk size of every setting follows the budget (results
unchanged: keys do not depend on chunking); a non-positive budget is a clear error."""

import json

import pytest

from dpjax import cli, results

SMALL = ["--set", "n_grid=800", "--set", "s_grid=3", "--set", "eps_grid=0.5", "--set",
         "n_base=800", "--set", "s_base=3", "--set", "large_n=", "--set", "d=40"]


def _run(out, *extra):
    args = ["run", "em_fig1", "--out", str(out), "--quick", "--reps", "6", "--no-progress"]
    assert cli.main(args + SMALL + list(extra)) == 0
    cfg = json.loads((out / "config.json").read_text())
    return [s["chunk_size"] for s in cfg["settings"]], results.read_csv(out / "summary.csv")


@pytest.mark.production_compiler
def test_memory_budget_sets_the_chunk_size(tmp_path):
    chunks_default, summary_default = _run(tmp_path / "a")
    chunks_tiny, summary_tiny = _run(tmp_path / "b", "--memory-budget", "1e-6")
    # the tests run 4 CPU devices (conftest): the budget is per device
    assert chunks_default == [6] * len(chunks_default)  # 0.1 GB: all repetitions in one chunk
    assert chunks_tiny == [4] * len(chunks_tiny)  # a byte budget: one repetition per device
    # equal, NaN where nothing was requested (the non-private level's budget_spent) included
    assert repr(summary_tiny) == repr(summary_default)


def test_non_positive_memory_budget_is_an_error(tmp_path, capsys):
    args = ["run", "em_fig1", "--out", str(tmp_path / "c"), "--quick", "--reps", "1",
            "--no-progress", "--memory-budget", "0"]
    assert cli.main(args + SMALL) == 2
    assert "--memory-budget must be > 0" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_chunks_are_evened_out_and_the_default_budget_follows_the_device():
    """At most 18 repetitions fit: 50 run as 3 chunks of 17 (each chunk is padded to the chunk
    size, so 18 + 18 + 14 would compute 54); the budget is per device; the CPU default budget
    is 0.1 GB."""
    import jax

    from dpjax import study
    from dpjax.experiments import registry

    exp = registry()["em_fig1"]
    config = study.resolve_config(exp, {"n_grid": "4000", "s_grid": "10", "large_n": ""}, False)
    setting = next(iter(exp.settings(config)))
    per_rep = study._rep_bytes(setting)
    assert study._auto_chunk(setting, 50, 18.5 * per_rep) == 17
    assert study._auto_chunk(setting, 50, 50 * per_rep) == 50
    assert study._auto_chunk(setting, 50, 0.5 * per_rep) == 1
    assert study._auto_chunk(setting, 7, 3 * per_rep) == 3  # 3 + 3 + 1 -> 3 chunks of 3
    # per device: 2 devices of 9 reps each -> 18 per chunk, evened out over 3 chunks
    assert study._auto_chunk(setting, 50, 9.5 * per_rep, devices=2) == 18
    assert study._auto_chunk(setting, 50, 0.5 * per_rep, devices=2) == 2
    assert study._auto_chunk(setting, 1, 0.5 * per_rep, devices=4) == 1
    assert jax.default_backend() == "cpu" and study.default_memory_budget_gb() == 0.1


def test_cpu_devices_are_set_before_jax_starts_and_never_over_a_users_choice(monkeypatch):
    """`dpjax run --cpu-devices N` asks JAX for N CPU devices (0: one per core), but leaves a
    user's XLA_FLAGS device count alone, and does nothing once JAX has started (no error)."""
    import jax

    from dpjax import cli

    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=3")
    assert cli.set_cpu_devices(2) is None
    monkeypatch.setenv("XLA_FLAGS", "")
    jax.devices()  # JAX has started in this process: the update is refused, quietly
    assert cli.set_cpu_devices(2) is None
    calls = []
    monkeypatch.setattr(jax.config, "update", lambda name, value: calls.append((name, value)))
    assert cli.set_cpu_devices(2) == 2 and calls == [("jax_num_cpu_devices", 2)]
    assert cli.set_cpu_devices(0) >= 1
