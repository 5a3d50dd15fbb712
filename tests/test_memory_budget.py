"""`dpjax run --memory-budget GB`: the chunk size of every setting follows the budget (results
unchanged: keys do not depend on chunking); a non-positive budget is a clear error."""

import json
import math

import pytest

from dpjax import cli, results, sweep

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
    assert chunks_default == [6] * len(chunks_default)  # all repetitions in one chunk
    assert chunks_tiny == [4] * len(chunks_tiny)  # a byte budget: one repetition per device
    # equal, NaN where nothing was requested (the non-private level's budget_spent) included
    assert repr(summary_tiny) == repr(summary_default)


def test_non_positive_memory_budget_is_an_error(tmp_path, capsys):
    args = ["run", "em_fig1", "--out", str(tmp_path / "c"), "--quick", "--reps", "1",
            "--no-progress", "--memory-budget", "0"]
    assert cli.main(args + SMALL) == 2
    assert "--memory-budget must be > 0" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_chunks_are_evened_out_per_device():
    """At most 18 repetitions fit: 50 run as 3 chunks of 17 (each chunk is padded to the chunk
    size, so 18 + 18 + 14 would compute 54); the budget is per device."""
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
    # evening out keeps every device at two repetitions per call or more where two fit
    for devices in (1, 2, 3, 4):
        for fit in (2, 3, 5):
            for reps in range(1, 41):
                chunk = study._auto_chunk(setting, reps, (fit + 0.5) * per_rep, devices)
                per_device = math.ceil(chunk / devices)
                assert min(2, math.ceil(reps / devices)) <= per_device <= fit, (
                    devices, fit, reps, chunk)


class _Accelerator:
    platform = "gpu"

    def __init__(self, stats):
        self.stats = stats

    def memory_stats(self):
        return self.stats


def test_the_default_budget_is_sized_from_the_device_memory(monkeypatch):
    """CPU: an eighth of the machine's memory, which its JAX CPU devices share (and processes
    that run at once split); an accelerator: a quarter of what its allocator has free; a
    backend that does not say: 0.1 GB (CPU), 2 GB."""
    import jax

    assert jax.default_backend() == "cpu" and jax.local_device_count() == 4  # conftest
    monkeypatch.setattr(sweep, "_physical_memory", lambda: 64 * 2**30)
    assert sweep.device_memory_gb() == 16.0
    assert sweep.default_memory_budget_gb() == 2.0
    assert sweep.default_memory_budget_gb(share=4) == 0.5
    with pytest.raises(ValueError, match="share"):
        sweep.default_memory_budget_gb(share=0)
    monkeypatch.setattr(sweep, "_physical_memory", lambda: math.inf)
    assert sweep.device_memory_gb() is None and sweep.default_memory_budget_gb() == 0.1

    gpu = _Accelerator({"bytes_limit": 100 * 2**30, "bytes_in_use": 20 * 2**30})
    assert sweep.device_memory_gb(gpu) == 80.0
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax, "local_devices", lambda *a, **k: [gpu])
    assert sweep.default_memory_budget_gb() == 20.0
    assert sweep.default_memory_budget_gb(share=4) == 20.0  # its allocator's limit is its own
    gpu.stats = None  # a backend without memory statistics
    assert sweep.device_memory_gb(gpu) is None and sweep.default_memory_budget_gb() == 2.0


def test_large_settings_run_two_repetitions_per_device_where_memory_allows(monkeypatch):
    """em_fig1's largest setting (n = 200,000, d = 1000: about 350 MB a repetition) ran one
    repetition per device per call at the old fixed 0.1 GB budget; at the default budget of a
    machine with the memory for two per device it runs two or more, and one where only one
    fits."""
    import jax

    from dpjax import study
    from dpjax.experiments import registry

    exp = registry()["em_fig1"]
    config = study.resolve_config(exp, {}, False)
    big = max(exp.settings(config), key=sweep.rep_bytes)
    per_rep, devices = sweep.rep_bytes(big), jax.local_device_count()
    assert big.n == 200_000 and per_rep > 0.1 * 2**30 / 2  # at 0.1 GB: 1 per device
    assert sweep.plan_run(big, 50, memory_budget_gb=0.1).chunk_size == devices
    for memory_reps, per_device in [(2, 2), (3, 3), (1, 1)]:  # memory of the whole machine
        physical = 8 * devices * (memory_reps + 0.5) * per_rep  # an eighth of it: the budget
        monkeypatch.setattr(sweep, "_physical_memory", lambda p=physical: p)
        plan = sweep.plan_run(big, 50)
        assert math.ceil(plan.chunk_size / devices) == per_device, (memory_reps, plan)


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
