#!/usr/bin/env bash
# The one prepared GPU check for a lent NVIDIA H200 (no network there; one command may run 10
# minutes, a session has 15 minutes of device time). Run from the repo root:
#   scripts/gpu_check.sh             on the GPU machine; writes $OUT/ratios.json and logs
#   scripts/gpu_check.sh --dry-run   here, on the CPU emulator, with tiny workloads and trials
#   scripts/gpu_check.sh --prepare   here, once: fetch the wheels to carry into .whl
#   scripts/gpu_check.sh --networks  on the GPU machine, as a second call (one call may run at
#                                    most 10 minutes): resnet-18/50 end to end vs PyTorch
# Carry `.whl` (xgboost-cpu for cp312; pycuda is not needed: the machine's cuda-python
# serves, and the script requires a real GPU backend unless --dry-run).
# Steps and default budgets (seconds, each cut off by `timeout`; about 8 minutes in all):
#   1. GPU tests (codegen, runtime, templates, pruning)                     GPU_CHECK_TEST_S=75
#   2. XGBTuner (knob features), N trials per workload, logs kept when cut off:
#      seed conv2d 1x512x7x7, 512 3x3 pad 1, direct template               N_CONV=240, 110 s
#      the same conv2d, Winograd F(2x2,3x3) and F(4x4,3x3)                 N_WINO=96, 55 s each
#      dense 1024x1024x1024                                                N_DENSE=240, 110 s
#   3. best record of each log: numpy check, then templtune and PyTorch (cuDNN / cuBLAS fp32,
#      TF32 disabled) timed in 9 interleaved rounds of >= 100 ms, medians  GPU_CHECK_EVAL_S=90
#      -> $OUT/ratios.json (speed_vs_peer = peer time / templtune time)
# $OUT gets three files (the device tool brings back eight at most): ratios.json, run.txt (all
# output) and logs.tar.gz (the tuning logs).
# The network benchmark appends below the marker at the end; it may use what is left of
# GPU_CHECK_TOTAL_S (exported, with GPU_CHECK_T0).
set -uo pipefail
MODE=${1:-run}
OUT=${OUT:-$PWD/gpu_check_out}
LOGS=${GPU_CHECK_LOGS:-/tmp/gpu_check_logs}
RUN=$OUT/run.txt
export PYTHONUNBUFFERED=1
export TEMPLTUNE_CUDA_CACHE=${TEMPLTUNE_CUDA_CACHE:-/tmp/templtune_cuda_cache}
export GPU_CHECK_T0=$(date +%s) GPU_CHECK_TOTAL_S=${GPU_CHECK_TOTAL_S:-570}
PY=${PYTHON:-python3}

if [ "$MODE" = --prepare ]; then
  EXCLUDE=$(git rev-parse --git-path info/exclude)
  grep -qx /.whl/ "$EXCLUDE" 2>/dev/null || echo /.whl/ >> "$EXCLUDE"
  "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "xgboost-cpu==${XGB_VERSION:-3.2.0}"
  ls -l .whl
  exit $?
fi

mkdir -p "$OUT" "$LOGS"
CONV="(1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1))"
WINO2="(1, 7, 7, 512, 512, 3, 3, (1, 1), 2)"
WINO4="(1, 7, 7, 512, 512, 3, 3, (1, 1), 4)"
DENSE="(1024, 1024, 1024)"
N_CONV=${N_CONV:-240} N_WINO=${N_WINO:-96} N_DENSE=${N_DENSE:-240}
CONV_S=${CONV_S:-110} WINO_S=${WINO_S:-55} DENSE_S=${DENSE_S:-110}
TEST_S=${GPU_CHECK_TEST_S:-75} EVAL_S=${GPU_CHECK_EVAL_S:-90}
TESTS="tests/test_cuda_runtime.py tests/test_cuda_codegen.py tests/test_cuda_templates.py \
tests/test_cuda_templates_vector.py tests/test_cuda_prune.py tests/test_cuda_prune_templates.py"
if [ "$MODE" = --dry-run ]; then
  # the same steps on the CPU emulator: tiny workloads, a few trials, no peer
  export TEMPLTUNE_CUDA_BACKEND=emulator TEMPLTUNE_CUDA_EMULATOR=${TEMPLTUNE_CUDA_EMULATOR:-llvm}
  CONV="(1, 6, 6, 8, 4, 3, 3, (1, 1), (1, 1))"
  WINO2="(1, 6, 6, 8, 4, 3, 3, (1, 1), 2)"
  WINO4="(1, 6, 6, 8, 4, 3, 3, (1, 1), 4)"
  DENSE="(16, 32, 16)"
  N_CONV=4 N_WINO=2 N_DENSE=4 CONV_S=300 WINO_S=300 DENSE_S=300 EVAL_S=600
  # emulated calls take up to seconds: one timed call each, generous timeouts
  export GPU_CHECK_NUMBER=1 GPU_CHECK_REPEAT=1 GPU_CHECK_MIN_REPEAT_MS=0 \
    GPU_CHECK_RUN_TIMEOUT=120 GPU_CHECK_BUILD_TIMEOUT=120
  TESTS="tests/test_cuda_prune_templates.py"
else
  export TEMPLTUNE_CUDA_BACKEND=${TEMPLTUNE_CUDA_BACKEND:-cuda-python}
fi

if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl 2>&1 | grep -v "already exists" | tail -2
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
# NOTE: a bare checkout (the device machine's copy) has no installed templtune: the top-level
# templates/ folder is templtune.templates through the same link the developers' worktrees use
if ! "$PY" -c "import templtune.templates" 2>/dev/null; then
  [ -e templtune/templates ] || ln -s ../templates templtune/templates
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  nvcc --version | tail -1; "$PY" -c "import sys; print(sys.version)"
  "$PY" -c "import xgboost; print('xgboost', xgboost.__version__)"; } 2>&1 | tee "$RUN"

if [ "$MODE" != --networks ]; then
echo "== 1. GPU tests (${TEST_S}s)" | tee -a "$RUN"
# shellcheck disable=SC2086
timeout "$TEST_S" "$PY" -m pytest -q -p no:cacheprovider $TESTS > "$LOGS/pytest.txt" 2>&1
echo "tests rc=$? ($(tail -1 "$LOGS/pytest.txt"))" | tee -a "$RUN"
grep -E "^(FAILED|ERROR)" "$LOGS/pytest.txt" | head -20 | tee -a "$RUN"

tune() {  # tune NAME ARGS LOGNAME N_TRIAL BUDGET_S
  echo "== 2. tune $1 $2: $4 trials, ${5}s" | tee -a "$RUN"
  rm -f "$LOGS/$3.log"
  timeout "$5" "$PY" scripts/gpu_check.py tune "$1" "$2" "$LOGS/$3.log" "$4" 2>&1 \
    | grep -v "^\s*$" | tail -5 >> "$RUN"
  echo "rc=${PIPESTATUS[0]} (124: cut off at the budget, the log is kept);" \
    "$(cat "$LOGS/$3.log" 2>/dev/null | wc -l) records" | tee -a "$RUN"
}
tune conv2d_nchw.cuda "$CONV" conv2d_direct "$N_CONV" "$CONV_S"
tune conv2d_nchw_winograd.cuda "$WINO2" conv2d_winograd2 "$N_WINO" "$WINO_S"
tune conv2d_nchw_winograd.cuda "$WINO4" conv2d_winograd4 "$N_WINO" "$WINO_S"
tune dense.cuda "$DENSE" dense "$N_DENSE" "$DENSE_S"

echo "== 3. best records vs numpy and PyTorch (${EVAL_S}s)" | tee -a "$RUN"
timeout "$EVAL_S" "$PY" scripts/gpu_check.py eval "$OUT" "$LOGS/conv2d_direct.log" \
  "$LOGS/conv2d_winograd2.log" "$LOGS/conv2d_winograd4.log" "$LOGS/dense.log" >> "$RUN" 2>&1
echo "eval rc=$?" | tee -a "$RUN"
tar -czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null
"$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: {x: w.get(x) for x in ('template', 'valid', 'trials', 'templtune_ms', 'peer_ms', 'speed_vs_peer', 'error')} for k, w in d['workloads'].items()}, indent=1)); print('seed conv2d best:', d.get('seed_conv2d_best'))" "$OUT/ratios.json" \
  2>&1 | tee -a "$RUN"
echo "kernel checks done in $(( $(date +%s) - GPU_CHECK_T0 ))s; results in $OUT" | tee -a "$RUN"

fi

# --- network benchmark ---
# resnet-18 / resnet-50 batch 1 end to end vs PyTorch eager on cuDNN fp32 (TF32 disabled),
# interleaved rounds, medians and ratios (benchmarks/network_gpu.py). Records: NET_LOG
# (auto-scheduler, one network) / NET_AUTOTVM_LOG; NET_TUNE_TRIALS tunes each network first
# (default 0: template fallbacks and default GPU schedules). Budget NET_BUDGET_S (default 540 s).
if [ "$MODE" = --networks ]; then
  echo "== 4. networks vs PyTorch/cuDNN fp32 (TF32 off)" | tee -a "$RUN"
  NET_ARGS=(--network "${NETWORKS:-resnet-18,resnet-50}" --tune-trials "${NET_TUNE_TRIALS:-0}"
            --json "$OUT/network_gpu.json")
  [ -n "${NET_LOG:-}" ] && NET_ARGS+=(--log "$NET_LOG")
  [ -n "${NET_AUTOTVM_LOG:-}" ] && NET_ARGS+=(--autotvm-log "$NET_AUTOTVM_LOG")
  timeout "${NET_BUDGET_S:-540}" "$PY" benchmarks/network_gpu.py "${NET_ARGS[@]}" 2>&1 \
    | grep -v "Cannot find a tuned config" | tail -20 | tee -a "$RUN"
  echo "networks stage rc=${PIPESTATUS[0]} (124 = cut off at NET_BUDGET_S; 2 = no GPU)" \
    | tee -a "$RUN"
fi
