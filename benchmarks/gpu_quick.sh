#!/usr/bin/env bash
# Issue 47 item 3: the quick tier (`python -m pytest -m quick`) on a lent GPU machine, as one
# call of the device tool, in at most 5 minutes:
#
#   bash benchmarks/gpu_quick.sh OUTDIR [SECONDS] [PYTEST ARGS...]     (SECONDS: default 290)
#
# e.g. run(command="bash benchmarks/gpu_quick.sh $OUT 290", timeout_s=330). Runs from the
# repository root with the machine's own Python (its JAX has the CUDA plugin; dpjax is put on
# PYTHONPATH, nothing is installed: the machine reaches no registry). Writes to OUTDIR:
#   versions.txt   the GPU, jax/jaxlib and the test packages' versions (or which are missing);
#   flags.txt      the XLA flags the suite's probe chose against this jaxlib (tests/xla_flags.py:
#                  the device count only, on a GPU) and the backend it found;
#   quick.log      pytest's output (skips with their reasons: -rs), quick.xml its JUnit file;
#   result.txt     the last line: passed / failed / skipped counts, and pytest's exit status.
# A missing test package is named in versions.txt and stops the run (exit 3): carry a folder of
# wheels and set WHEELS=that/folder to install them offline first.
# Pytest runs WORKERS xdist workers (default 8 of the 16 cores) on the one GPU, with
# XLA_PYTHON_CLIENT_PREALLOCATE=false: each worker would otherwise reserve 75% of its memory.
set -u
OUT=${1:?usage: gpu_quick.sh OUTDIR [SECONDS] [PYTEST ARGS...]}
BUDGET=${2:-290}
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
PY=${PYTHON:-python3}
start=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - start) )); }
# dpjax.experiments is the experiments/ folder installed as a subpackage (pyproject's
# package-dir); with nothing installed there, a link in this disposable copy stands in
$PY -c "import dpjax.experiments" 2>/dev/null || ln -sfn ../experiments dpjax/experiments

if [ -n "${WHEELS:-}" ]; then
  $PY -m pip install -q --no-index --find-links "$WHEELS" pytest pytest-xdist hypothesis \
    dp-accounting matplotlib pandas > "$OUT/wheels.log" 2>&1 || echo "wheels: see wheels.log"
fi

{ command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY - <<'EOF'
import importlib, importlib.metadata as md
import jax, jaxlib
print("jax", jax.__version__, "jaxlib", jaxlib.__version__, "backend", jax.default_backend(),
      jax.devices())
missing = []
for mod, dist in [("pytest", "pytest"), ("xdist", "pytest-xdist"), ("hypothesis", "hypothesis"),
                  ("numpy", "numpy"), ("scipy", "scipy"), ("matplotlib", "matplotlib"),
                  ("pandas", "pandas"), ("dp_accounting", "dp-accounting")]:
    try:
        importlib.import_module(mod)
        print(dist, md.version(dist))
    except Exception as exc:  # noqa: BLE001 - any import failure is a missing package here
        missing.append(f"{dist} ({type(exc).__name__})")
if missing:
    print("MISSING:", ", ".join(missing))
EOF
} > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"
if grep -q "^MISSING:" "$OUT/versions.txt"; then
  echo "missing test packages (see above): set WHEELS to a carried folder of wheels" \
    | tee "$OUT/result.txt"
  exit 3
fi

# the suite's XLA flags, chosen as tests/conftest.py chooses them (a probe in a subprocess)
$PY -c "from tests.xla_flags import supported_flags; print(*supported_flags())" \
  > "$OUT/flags.txt" 2>&1
cat "$OUT/flags.txt"

t=$(( $(left) - 10 ))
timeout "$t" $PY -m pytest -m quick -n "${WORKERS:-8}" -q -rs -p no:cacheprovider \
  --junitxml="$OUT/quick.xml" "$@" > "$OUT/quick.log" 2>&1
rc=$?
tail -40 "$OUT/quick.log"
{ tail -1 "$OUT/quick.log"; echo "pytest exit status $rc ($(( $(date +%s) - start )) s in all;" \
  "124: cut at ${t} s)"; } > "$OUT/result.txt"
cat "$OUT/result.txt"
exit $rc
