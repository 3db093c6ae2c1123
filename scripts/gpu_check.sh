#!/usr/bin/env bash
# One prepared GPU check for a lent NVIDIA machine (H200; no network there). Run from the repo
# root, carrying .whl (xgboost-cpu wheel for cp312; pycuda source archive, built only with
# GPU_CHECK_PYCUDA=1). Budget: about 8 minutes. Writes summary.json / summary.txt and logs to
# $OUT (default ./gpu_check_out).
#   1. CUDA unit tests (codegen + runtime, the GPU-only tests included);
#   2. tunes the seed's conv2d (1x512x7x7, 3x3, pad 1) for up to 200 trials with XGBTuner
#      (GATuner when xgboost is missing), cut off after TUNE_BUDGET_S seconds;
#   3. builds the best record, checks it against numpy and prints GFLOPS beside PyTorch/cuDNN.
set -uo pipefail
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export TEMPLTUNE_CUDA_CACHE=${TEMPLTUNE_CUDA_CACHE:-/tmp/templtune_cuda_cache}
TUNE_BUDGET_S=${TUNE_BUDGET_S:-280}
N_TRIAL=${N_TRIAL:-200}
# N,H,W,CO,CI,KH,KW (stride 1, pad 1); a dry run on a CPU machine can use a small one with
# TEMPLTUNE_CUDA_BACKEND=emulator, e.g. WORKLOAD=1,6,6,8,4,3,3.
export WORKLOAD=${WORKLOAD:-1,7,7,512,512,3,3}
T0=$(date +%s)

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl 2>&1 | grep -v "already exists" | tail -2
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
if [ "${GPU_CHECK_PYCUDA:-0}" = 1 ] && ls .whl/pycuda-*.tar.gz >/dev/null 2>&1; then
  CUDA_ROOT=${CUDA_ROOT:-$(dirname "$(dirname "$(command -v nvcc)")")} \
    timeout 300 python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site \
    .whl/pycuda-*.tar.gz > "$OUT/pycuda_build.txt" 2>&1 || echo "pycuda build failed (see log)"
fi

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvcc --version | tail -1;
  python3 -c "import sys; print(sys.version)"; } 2>&1 | tee "$OUT/env.txt"

echo "== 1. CUDA tests"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_runtime.py \
  tests/test_cuda_codegen.py 2>&1 | tee "$OUT/pytest.txt" | tail -15
TESTS_RC=${PIPESTATUS[0]}

echo "== 2. tuning (budget ${TUNE_BUDGET_S}s, ${N_TRIAL} trials)"
rm -f "$OUT/conv2d.log"
timeout "$TUNE_BUDGET_S" python3 - "$OUT" "$N_TRIAL" <<'PY' 2>&1 | tee "$OUT/tune.txt" | grep -v "^\s*$" | tail -25
import importlib, sys, time
out, n_trial = sys.argv[1], int(sys.argv[2])
importlib.import_module("templates.cuda.conv2d_nchw")
from templtune import autotvm
import os
shape = tuple(int(v) for v in os.environ["WORKLOAD"].split(","))
task = autotvm.task.create("tutorial/conv2d_no_batching", (*shape, (1, 1), (1, 1)), "cuda")
print(task.config_space)
try:
    import xgboost  # noqa: F401
    from templtune.autotvm.tuner import XGBTuner

    # NOTE: "itervar" features lower every candidate the model scores (seconds each in Python
    # on this template), which does not fit the budget; "knob" features need no lowering.
    feature = os.environ.get("GPU_CHECK_FEATURE", "knob")
    tuner = XGBTuner(task, feature_type=feature, seed=0)
    print("tuner: XGBTuner, features:", feature, flush=True)
except ImportError:
    from templtune.autotvm.tuner import GATuner

    tuner = GATuner(task)
    print("tuner: GATuner (xgboost missing)", flush=True)
mo = autotvm.measure_option(
    builder=autotvm.LocalBuilder(timeout=20),
    runner=autotvm.LocalRunner(number=int(os.environ.get("GPU_CHECK_NUMBER", 10)),
                               repeat=int(os.environ.get("GPU_CHECK_REPEAT", 3)),
                               min_repeat_ms=float(os.environ.get("GPU_CHECK_MIN_REPEAT_MS", 50)),
                               timeout=float(os.environ.get("GPU_CHECK_RUN_TIMEOUT", 10))))
t0 = time.time()
tuner.tune(n_trial=n_trial, measure_option=mo,
                 callbacks=[autotvm.callback.progress_bar(n_trial),
                            autotvm.callback.log_to_file(f"{out}/conv2d.log")])
print(f"tuning finished in {time.time() - t0:.0f}s")
PY
echo "tuning stage rc=${PIPESTATUS[0]} (124 = cut off at the budget; the log is kept)"

echo "== 3. best config vs numpy and PyTorch/cuDNN"
timeout 120 python3 - "$OUT" "$TESTS_RC" "$T0" <<'PY' 2>&1 | tee "$OUT/eval.txt"
import importlib, json, sys, time
import numpy as np
out, tests_rc, t0 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
importlib.import_module("templates.cuda.conv2d_nchw")
import templtune
from templtune import autotvm
from templtune.autotvm.record import load_from_file
from templtune.topi.testing import conv2d_nchw_python
import os
N, H, W, CO, CI, KH, KW = (int(v) for v in os.environ["WORKLOAD"].split(","))
flop = 2 * N * CO * H * W * CI * KH * KW
summary = {"tests_rc": tests_rc, "flop": flop}
recs = list(load_from_file(f"{out}/conv2d.log"))
ok = [r for _, r in recs if int(r.error_no) == 0]
summary.update(trials=len(recs), valid=len(ok),
               errors={str(int(r.error_no)): sum(1 for _, x in recs if x.error_no == r.error_no)
                       for _, r in recs})
if ok:
    best = min(float(np.mean(r.costs)) for r in ok)
    summary["best_tuning_ms"] = best * 1e3
    summary["best_tuning_gflops"] = flop / best / 1e9
    with autotvm.apply_history_best(f"{out}/conv2d.log"):
        with templtune.target.Target("cuda"):
            s, args = importlib.import_module("templates.cuda.conv2d_nchw").conv2d_no_batching(
                N, H, W, CO, CI, KH, KW, (1, 1), (1, 1))
            func = templtune.build(s, args, "cuda")
    print(func.get_source()[:3000])
    rng = np.random.default_rng(0)
    a = rng.uniform(size=(N, CI, H, W)).astype(np.float32)
    w = rng.uniform(size=(CO, CI, KH, KW)).astype(np.float32)
    c = np.zeros((N, CO, H, W), np.float32)
    func(a, w, c)
    ref = conv2d_nchw_python(a, w, (1, 1), (1, 1))
    summary["max_abs_err"] = float(np.max(np.abs(c - ref)))
    np.testing.assert_allclose(c, ref, rtol=1e-3)
    ev = func.time_evaluator(func.entry_name, templtune.cuda(),
                             number=int(os.environ.get("GPU_CHECK_NUMBER", 50)), repeat=5,
                             min_repeat_ms=float(os.environ.get("GPU_CHECK_MIN_REPEAT_MS",
                                                                200)))(a, w, c)
    t = float(np.median(ev.results))
    summary.update(templtune_ms=t * 1e3, templtune_gflops=flop / t / 1e9)
try:
    import torch
    torch.backends.cudnn.benchmark = True
    torch.cuda.init()
    x = torch.rand(N, CI, H, W, device="cuda")
    k = torch.rand(CO, CI, KH, KW, device="cuda")
    for _ in range(20):
        torch.nn.functional.conv2d(x, k, padding=1)
    torch.cuda.synchronize()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = []
    for _ in range(5):
        st.record()
        for _ in range(200):
            torch.nn.functional.conv2d(x, k, padding=1)
        en.record()
        torch.cuda.synchronize()
        reps.append(st.elapsed_time(en) / 200 / 1e3)
    tt = float(np.median(reps))
    summary.update(torch_ms=tt * 1e3, torch_gflops=flop / tt / 1e9,
                   torch_version=torch.__version__)
    if "templtune_ms" in summary:
        summary["ratio_templtune_over_torch_time"] = summary["templtune_ms"] / summary["torch_ms"]
except Exception as exc:  # noqa: BLE001 - report, do not fail the summary
    summary["torch_error"] = repr(exc)
summary["wall_s"] = time.time() - t0
print(json.dumps(summary, indent=2))
with open(f"{out}/summary.json", "w") as fh:
    json.dump(summary, fh, indent=2)
with open(f"{out}/summary.txt", "w") as fh:
    for key, val in summary.items():
        fh.write(f"{key}: {val}\n")
PY
echo "done in $(( $(date +%s) - T0 ))s; results in $OUT"

# ==== networks on the GPU (issue 18, gpunet) =====================================================
# resnet-18 / resnet-50 batch 1 end to end vs PyTorch eager on cuDNN fp32 (TF32 disabled),
# interleaved rounds, medians and ratios (benchmarks/network_gpu.py). Records: NET_LOG
# (auto-scheduler, one network) / NET_AUTOTVM_LOG; NET_TUNE_TRIALS tunes each network first
# (default 0: template fallbacks and default GPU schedules). Budget NET_BUDGET_S (default 240 s).
echo "== 4. networks vs PyTorch/cuDNN fp32 (TF32 off)"
NET_ARGS=(--network "${NETWORKS:-resnet-18,resnet-50}" --tune-trials "${NET_TUNE_TRIALS:-0}"
          --json "$OUT/network_gpu.json")
[ -n "${NET_LOG:-}" ] && NET_ARGS+=(--log "$NET_LOG")
[ -n "${NET_AUTOTVM_LOG:-}" ] && NET_ARGS+=(--autotvm-log "$NET_AUTOTVM_LOG")
timeout "${NET_BUDGET_S:-240}" python3 benchmarks/network_gpu.py "${NET_ARGS[@]}" 2>&1 \
  | tee "$OUT/network_gpu.txt" | grep -v "Cannot find a tuned config" | tail -20
echo "networks stage rc=${PIPESTATUS[0]} (124 = cut off at NET_BUDGET_S; 2 = no GPU)"
