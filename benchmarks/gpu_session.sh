#!/usr/bin/env bash
# Issue 31 item 4: the harness on a lent GPU, as one call of the device tool.
#
#   bash benchmarks/gpu_session.sh OUTDIR SECONDS STEP...     (STEP: smoke, emhd, all)
#
# Runs from the repository root with the machine's own Python (its JAX has the CUDA plugin;
# dpjax is put on PYTHONPATH, nothing is installed). The steps, each bounded by `timeout` and
# written to OUTDIR as it finishes, so a step cut short loses only itself (the whole call
# within SECONDS):
#   1. the device and library versions, and a smoke run of one family at tiny sizes (an API
#      break in the machine's JAX shows here in seconds);
#   2. every family at full size, dpjax only (`--skip-numpy`: the NumPy rows are the CPU's),
#      2 kernel rounds and 1 whole-process round: kernel, compile, cold and warm `dpjax run`,
#      floor, in OUTDIR/gpu.json;
#   3. the HD-EM study (spec 000 Fig 1: n=4000, d=1000, 4 levels) at growing repetitions, one
#      process each, until one takes over a minute: the largest that fits in one minute.
set -u
OUT=${1:?usage: gpu_session.sh OUTDIR SECONDS STEP...}
BUDGET=${2:?usage: gpu_session.sh OUTDIR SECONDS STEP...}
shift 2
STEPS=" $* "
want() { [[ $STEPS == *" $1 "* ]]; }
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
start=$(date +%s)
# dpjax.experiments is the experiments/ folder installed as a subpackage (pyproject's
# package-dir); with nothing installed there, a link in this disposable copy stands in
$PY -c "import dpjax.experiments" 2>/dev/null || ln -sfn ../experiments dpjax/experiments
left() { echo $(( BUDGET - ($(date +%s) - start) )); }

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY -c "import jax, numpy, scipy; print('jax', jax.__version__, jax.devices(), 'numpy', numpy.__version__, 'scipy', scipy.__version__)"
} 2>&1 | tee "$OUT/versions.txt"

if want smoke; then
timeout 90 $PY benchmarks/run.py --quick --family em_hd --device gpu --skip-numpy --no-e2e \
  --out "$OUT/smoke.json" > "$OUT/smoke.log" 2>&1
rc=$?; tail -5 "$OUT/smoke.log"
if [ $rc -ne 0 ]; then echo "smoke run failed (rc $rc)"; exit $rc; fi
fi

if want all; then
timeout $(( $(left) - 5 )) $PY benchmarks/run.py --all --device gpu --skip-numpy --rounds 2 \
  --e2e-rounds 1 --tag gpu --out "$OUT/gpu.json" > "$OUT/all.log" 2>&1
echo "full run rc $?"; tail -25 "$OUT/all.log"
fi

if want emhd; then
: > "$OUT/em_hd_reps.jsonl"
for reps in ${EMHD_REPS:-400 1600 6400}; do
  t=$(( $(left) - 5 )); [ $t -lt 20 ] && break
  line=$(timeout $t $PY benchmarks/run.py --part kernel --family em_hd --device gpu --rounds 1 \
         --skip-numpy --reps $reps 2>>"$OUT/em_hd_reps.err" | tail -1)
  [ -z "$line" ] && { echo "em_hd reps=$reps: no result within ${t}s"; break; }
  echo "{\"reps\": $reps, \"kernel\": $line}" >> "$OUT/em_hd_reps.jsonl"
  $PY - "$line" "$reps" <<'EOF'
import json, sys
r = json.loads(sys.argv[1])
print(f"em_hd reps={sys.argv[2]}: kernel {r.get('dpjax_s')} s, compile {r.get('compile_s')} s")
EOF
  $PY -c "import json,sys; sys.exit(json.loads('''$line''').get('dpjax_s', 99) > 60)" || break
done
fi
echo "total $(( $(date +%s) - start )) s"
