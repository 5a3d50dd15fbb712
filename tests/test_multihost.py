"""Multi-process (multi-host) sweeps: two JAX processes on this machine, joined with
jax.distributed.initialize over loopback, give the same results as one process."""

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from dpjax import sweep
from tests.test_sweep import _setting

ROOT = Path(__file__).resolve().parents[1]

WORKER = textwrap.dedent(
    """
    import os, sys
    pid, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    # 2 CPU devices per process, and the suite's other XLA flags (conftest: those this XLA
    # accepts, the CPU compiler flags only where the suite runs on the CPU)
    os.environ["XLA_FLAGS"] = " ".join(["--xla_force_host_platform_device_count=2"] + [
        f for f in os.environ.get("XLA_FLAGS", "").split()
        if not f.startswith("--xla_force_host_platform_device_count")])
    os.environ["JAX_PLATFORMS"] = "cpu"  # CPU collectives (gloo), on any machine
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2,
                               process_id=pid, initialization_timeout=60)
    import numpy as np
    sys.path.insert(0, sys.argv[4])
    from tests.test_sweep import _setting
    from dpjax import sweep
    assert len(jax.devices()) == 4 and len(jax.local_devices()) == 2
    res = sweep.run_setting(_setting(), reps=7, seed=3, chunk_size=4, data_mode="materialize")
    if pid == 0:
        np.save(out, res["error"])
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_match_one(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port, out = str(_free_port()), str(tmp_path / "multi.npy")
    procs = [subprocess.Popen([sys.executable, str(script), str(i), port, out, str(ROOT)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
    ref = sweep.run_setting(_setting(), reps=7, seed=3, data_mode="materialize", num_devices=1)
    # Same keys, same draws; vectorised arithmetic over another device layout may round the
    # last bit differently.
    np.testing.assert_allclose(np.load(out), ref["error"], rtol=1e-5, atol=1e-6)
