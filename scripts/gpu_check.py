"""The tuning and timing steps of ``scripts/gpu_check.sh`` (see there for the budget).

``tune NAME ARGS LOG N_TRIAL``: tune one CUDA AutoTVM template on one workload with XGBTuner
(knob features: itervar features lower every scored candidate, too slow for the budget),
appending to LOG; cut off from outside by ``timeout``, the log keeps what was measured.

``eval OUT LOG...``: for each log, build its best record, check it against numpy, then time it
and the PyTorch peer (cuDNN conv2d / cuBLAS linear, fp32 with TF32 disabled) in interleaved
rounds and write ``OUT/ratios.json``: per workload both medians and ``speed_vs_peer`` (peer
time / templtune time, > 1 means templtune is faster). Run on the emulator (``--dry-run`` of the
shell script) the peer is skipped and the timings are CPU timings, flagged as such.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import sys
import time
from typing import Any

import numpy as np

TEMPLATES = {"conv2d_nchw.cuda": "conv2d_nchw", "conv2d_nchw_winograd.cuda": "conv2d_winograd",
             "dense.cuda": "dense"}


def _task(name: str, args: tuple[Any, ...]) -> Any:
    from templtune import autotvm

    importlib.import_module(f"templtune.templates.cuda.{TEMPLATES[name]}")
    return autotvm.task.create(name, args, "cuda")


def tune(name: str, args: tuple[Any, ...], log: str, n_trial: int) -> None:
    from templtune import autotvm

    task = _task(name, args)
    print(f"{name}{args}: {len(task.config_space)} configs "
          f"(of {task.config_space.range_length} before the limit filter)", flush=True)
    try:
        import xgboost  # noqa: F401

        from templtune.autotvm.tuner import XGBTuner

        tuner = XGBTuner(task, feature_type="knob", seed=0)
    except ImportError:
        from templtune.autotvm.tuner import GATuner

        print("xgboost missing: GATuner", flush=True)
        tuner = GATuner(task)
    env = os.environ.get
    mo = autotvm.measure_option(
        builder=autotvm.LocalBuilder(timeout=float(env("GPU_CHECK_BUILD_TIMEOUT", 30))),
        runner=autotvm.LocalRunner(number=int(env("GPU_CHECK_NUMBER", 10)),
                                   repeat=int(env("GPU_CHECK_REPEAT", 3)),
                                   min_repeat_ms=float(env("GPU_CHECK_MIN_REPEAT_MS", 50)),
                                   timeout=float(env("GPU_CHECK_RUN_TIMEOUT", 10))))
    t0 = time.time()
    tuner.tune(n_trial=n_trial, measure_option=mo,
               callbacks=[autotvm.callback.log_to_file(log)])
    print(f"{name}: {n_trial} trials in {time.time() - t0:.0f}s", flush=True)


# ---- evaluation ---------------------------------------------------------------------------------
def _best(log: str) -> tuple[Any, dict[str, Any]] | None:
    """The measure input of the fastest valid record of ``log``, with the log's counts."""
    from templtune.autotvm.record import load_from_file

    recs = list(load_from_file(log)) if os.path.exists(log) else []
    errors: dict[str, int] = {}
    for _, res in recs:
        key = str(int(res.error_no))
        errors[key] = errors.get(key, 0) + 1
    ok = [(float(np.mean(r.costs)), n) for n, (_, r) in enumerate(recs) if int(r.error_no) == 0]
    info: dict[str, Any] = {"trials": len(recs), "valid": len(ok), "errors": errors}
    if not ok:
        return None
    cost, n = min(ok)
    info["best_tuning_ms"] = cost * 1e3
    return recs[n][0], info


def _inputs(name: str, args: tuple[Any, ...], rng: np.random.Generator
            ) -> tuple[list[np.ndarray], np.ndarray, int]:
    """Random inputs, the numpy reference and the FLOP count of a workload."""
    from templtune.topi.testing import conv2d_nchw_python

    if name == "dense.cuda":
        m, k, n = args[:3]
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
        return [a, w], a @ w.T, 2 * m * n * k
    n_, h, w_, co, ci, kh, kw = args[:7]
    pad = args[8] if name == "conv2d_nchw.cuda" else args[7]
    pad = pad if isinstance(pad, (tuple, list)) else (pad, pad)
    data = rng.uniform(-1, 1, (n_, ci, h, w_)).astype(np.float32)
    kernel = rng.uniform(-1, 1, (co, ci, kh, kw)).astype(np.float32)
    ref = conv2d_nchw_python(data, kernel, (1, 1), tuple(pad))
    return [data, kernel], ref, 2 * n_ * co * ref.shape[2] * ref.shape[3] * ci * kh * kw


class _Peer:
    """PyTorch on the GPU, fp32 with TF32 disabled (cuDNN benchmark mode for conv2d)."""

    def __init__(self, name: str, inputs: list[np.ndarray], args: tuple[Any, ...]) -> None:
        import torch

        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
        torch.set_float32_matmul_precision("highest")
        self.torch = torch
        self.settings = {"cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
                         "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                         "float32_matmul_precision": torch.get_float32_matmul_precision(),
                         "cudnn.benchmark": True, "torch": torch.__version__}
        try:  # the newer precision API, where this torch has it (read only)
            self.settings["cudnn.conv.fp32_precision"] = torch.backends.cudnn.conv.fp32_precision
            self.settings["cuda.matmul.fp32_precision"] = (
                torch.backends.cuda.matmul.fp32_precision)
        except (AttributeError, RuntimeError):
            pass
        x, w = (torch.from_numpy(v).cuda() for v in inputs)
        if name == "dense.cuda":
            self.fn = lambda: torch.nn.functional.linear(x, w)
        else:
            pad = args[8] if name == "conv2d_nchw.cuda" else args[7]
            self.fn = lambda: torch.nn.functional.conv2d(x, w, padding=pad)
        self.out = self.fn().cpu().numpy()
        for _ in range(20):
            self.fn()
        torch.cuda.synchronize()

    def time(self, min_ms: float) -> float:
        """Seconds per call over one round of at least ``min_ms`` (CUDA events)."""
        torch = self.torch
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        n = 1
        while True:
            st.record()
            for _ in range(n):
                self.fn()
            en.record()
            torch.cuda.synchronize()
            ms = st.elapsed_time(en)
            if ms >= min_ms or n >= 1 << 16:
                return ms / 1e3 / n
            n = max(n * 2, int(n * min_ms / max(ms, 1e-3)) + 1)


def evaluate_one(log: str, rounds: int, min_ms: float, emulated: bool) -> dict[str, Any]:
    import templtune
    from templtune.target import Target

    found = _best(log)
    if found is None:
        return {"log": os.path.basename(log), "error": "no valid record"}
    inp, info = found
    name, args = inp.task.name, tuple(inp.task.args)
    row: dict[str, Any] = {"template": name, "args": repr(args), **info,
                           "config": str(inp.config)}
    task = _task(name, args)
    with Target("cuda"):
        s, tensors = task.instantiate(inp.config)
        func = templtune.build(s, tensors, "cuda")
    inputs, ref, flop = _inputs(name, args, np.random.default_rng(0))
    out = np.zeros(ref.shape, np.float32)
    func(*inputs, out)
    row["max_abs_err"] = float(np.max(np.abs(out - ref)))
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3 * float(np.abs(ref).max()))
    ev = func.time_evaluator(func.entry_name, templtune.cuda(), number=1, repeat=1,
                             min_repeat_ms=min_ms)
    peer = None
    if not emulated:
        try:
            peer = _Peer(name, inputs, args)
            row["peer_settings"] = peer.settings
            np.testing.assert_allclose(peer.out, ref, rtol=1e-3,
                                       atol=1e-3 * float(np.abs(ref).max()))
        except Exception as exc:  # noqa: BLE001 - report the peer's failure, keep ours
            row["peer_error"] = repr(exc)
            peer = None
    # NOTE: interleaved rounds, so that clock and thermal drift hit both sides alike
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(float(ev(*inputs, out).results[0]))
        if peer is not None:
            theirs.append(peer.time(min_ms))
    t = float(np.median(ours))
    row.update(flop=flop, templtune_ms=t * 1e3, templtune_gflops=flop / t / 1e9,
               rounds=rounds, timings="emulator (CPU)" if emulated else "GPU")
    if theirs:
        tp = float(np.median(theirs))
        row.update(peer_ms=tp * 1e3, peer_gflops=flop / tp / 1e9, speed_vs_peer=tp / t)
    return row


def evaluate(out: str, logs: list[str]) -> dict[str, Any]:
    from templtune.runtime.cuda.backend import emulator_selected

    emulated = emulator_selected()
    rounds = int(os.environ.get("GPU_CHECK_ROUNDS", 3 if emulated else 9))
    min_ms = float(os.environ.get("GPU_CHECK_EVAL_MIN_MS", 1 if emulated else 100))
    summary: dict[str, Any] = {"emulated": emulated, "workloads": {}}
    for log in logs:
        key = os.path.splitext(os.path.basename(log))[0]
        try:
            summary["workloads"][key] = evaluate_one(log, rounds, min_ms, emulated)
        except Exception as exc:  # noqa: BLE001 - one broken workload must not hide the rest
            summary["workloads"][key] = {"error": repr(exc)}
        print(key, json.dumps(summary["workloads"][key]), flush=True)
    conv = [w for k, w in summary["workloads"].items() if k.startswith("conv") and
            "templtune_ms" in w]
    if conv:
        fastest = min(conv, key=lambda w: w["templtune_ms"])
        summary["seed_conv2d_best"] = {k: fastest.get(k) for k in (
            "template", "templtune_ms", "peer_ms", "speed_vs_peer")}
    with open(os.path.join(out, "ratios.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    return summary


def main(argv: list[str]) -> int:
    if argv[:1] == ["tune"]:
        name, args, log, n_trial = argv[1:5]
        tune(name, tuple(ast.literal_eval(args)), log, int(n_trial))
        return 0
    if argv[:1] == ["eval"]:
        evaluate(argv[1], argv[2:])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
