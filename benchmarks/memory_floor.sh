#!/bin/bash
# The floor of peak memory (VmHWM, /usr/bin/time %M) under a JAX process on CPU: what a
# study cannot go below (benchmarks/README.md, target 4). Two CPU devices, as dpjax run uses.
cd "$(dirname "$0")/.."  # run from the repository, in the environment dpjax is installed in
T='/usr/bin/time -f %M'
echo "python+numpy: $($T python -c 'import numpy as np; x=np.zeros(1)' 2>&1 | tail -1) KB"
echo "import jax: $($T python -c 'import jax' 2>&1 | tail -1) KB"
echo "jax 2 devices + tiny jit: $($T env XLA_FLAGS=--xla_force_host_platform_device_count=2 python -c '
import jax, jax.numpy as jnp
f=jax.jit(lambda x: jnp.sin(x)@x.T)
print(f(jnp.ones((8,8))).block_until_ready().shape)' 2>&1 | tail -1) KB"
echo "+ matplotlib figure: $($T env XLA_FLAGS=--xla_force_host_platform_device_count=2 python -c '
import jax, jax.numpy as jnp
f=jax.jit(lambda x: jnp.sin(x)@x.T)
f(jnp.ones((8,8))).block_until_ready()
import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
fig,ax=plt.subplots(1,3,figsize=(14,5)); ax[0].plot([1,2,3]); fig.savefig("/dev/null",dpi=120,format="png")' 2>&1 | tail -1) KB"
echo "import dpjax.cli + registry: $($T python -c '
import dpjax.cli
from dpjax.experiments import registry; registry()' 2>&1 | tail -1) KB"
