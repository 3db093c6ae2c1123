"""Whole-network inference: templtune against ONNX Runtime, OpenVINO and PyTorch, same run.

Models: ``resnet-18``, ``resnet-50``, ``mobilenet`` (the zoo's, batch 1, NCHW 224x224, random
weights with batch-norm folded; the final softmax is left out so that the outputs compared are
the logits: with random weights the softmax saturates, which would hide differences),
``conv2d-seed`` (the seed layer alone: conv2d 1x512x7x7, 512 3x3 filters, pad 1), or the path
of an ONNX file (a name ending in ``.onnx``: a user's model, e.g. ``vit_onnx.py``'s ViT-B/16),
imported with ``relay.frontend.from_onnx`` at the static input shape it declares and reported
under the file's stem (:mod:`models`). Every engine computes the same network with the same
weights on the same input: templtune builds it with ``relay.build`` (the packaged reference log
of the host's ISA family, and with ``--log`` too); ONNX Runtime and OpenVINO load the ONNX file
itself, as a user deploys it, or for a zoo model its export (:func:`peers.to_onnx`); PyTorch
runs a zoo model eagerly (skipped for files: it maps only the zoo's ops). Outputs are checked
against the numpy interpreter (``graph.evaluate``) and the maximum absolute differences
printed; an f32 engine off by more than ``--rtol`` of the output's range fails the run
(OpenVINO's default precision, bf16 on AMX hosts, is printed but not gated).

Timing: for each thread count (each engine's own setting: ``kernel.set_num_threads``, ORT's
``intra_op_num_threads``, OpenVINO's ``INFERENCE_NUM_THREADS``, ``torch.set_num_threads``)
rounds interleave the engines, ``--number`` calls each (by default as many as make the fastest
engine's share of a round last ``AUTO_ROUND_S``: a few calls of a 5 ms model after another
engine ran time its caches refilling as much as the model), ``--settle`` idle seconds between
engines (spinning worker threads of the previous one); medians over ``--rounds`` rounds. Ratios
(templtune's speed over an engine's, % of the FMA peak timed at the end of the same round) are
medians of the rounds' own ratios: a shared host's speed drifts between rounds. With
``--isolate`` each engine runs in a process of its own and times its calls there
(:mod:`isolate`), as users deploy them; by default all share this process.
GFLOPS count 2 x multiply-adds of the convolutions, dense layers and batched matmuls; % of peak
is against the FMA peak measured on the same threads (:func:`ops.fma_peak`). The ratio column is
templtune's speed over the engine's (> 1: templtune faster). Results are also written to ``--out``.

Run::

    python3 benchmarks/inference.py [--models resnet-18,conv2d-seed,MODEL.onnx] [--rounds 7]
        [--threads 1,2] [--log LOG] [--engines ort,openvino,openvino-default,torch]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from isolate import TEMPLTUNE, TEMPLTUNE_LOG, model_input, start  # noqa: E402
from models import (  # noqa: E402,F401 - seed_layer, network_flops: this module's API too
    MODELS,
    display_name,
    load_model,
    network_flops,
    onnx_file,
    seed_layer,
)
from peers import Engine, peer_engines, templtune_engine  # noqa: E402

from templtune import graph  # noqa: E402

#: file that benchmarks/studies/ort_avx2.py leaves in the ONNX Runtime copy it patches
ORT_AVX2_MARK = "AVX2_KERNELS"
#: key of the per-round FMA peaks in :func:`time_rounds`'s result
PEAK = "FMA peak"
PEERS = ("ort", "openvino", "openvino-default", "torch")


def cpu_name() -> str:
    """The CPU's marketing name, LLVM's name for it, and the ISA family."""
    from templtune.autotvm.task.reference import isa_family
    from templtune.target import Target

    model = platform.processor() or "unknown CPU"
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    caps = Target("llvm").capabilities
    fam = isa_family("llvm")
    return (f"{model} (LLVM {caps.cpu}, {fam.value if fam else 'no'} family, "
            f"{caps.cores} cores)")


def tuning_spent(log: Path) -> str:
    """Records, workloads and the tuning time (timestamp spans) behind a log or raw-log folder."""
    files = sorted(log.glob("*.log")) if log.is_dir() else [log]
    n, workloads, spent = 0, set(), 0.0
    for f in files:
        stamps = []
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if "input" in r:
                n += 1
                workloads.add((r["input"][1], tuple(r["input"][2])))
                stamps.append(float(r["result"][3]))
        # NOTE: records are stamped per batch; gaps over 2 minutes are pauses between runs.
        gaps = np.diff(sorted(stamps))
        spent += float(gaps[gaps < 120].sum())
    text = f"{n} records of {len(workloads)} workloads"
    return text + f", about {spent:.0f} s of tuning"


def check(outputs: dict[str, np.ndarray], ref: np.ndarray, gated: dict[str, bool],
          rtol: float, emit: Any) -> list[str]:
    """Print each engine's max |diff| to the numpy reference and to the first engine; return
    the gated engines beyond ``rtol`` x max|ref|."""
    scale = float(np.abs(ref).max()) or 1.0
    first_name, first = next(iter(outputs.items()))
    bad = []
    for name, out in outputs.items():
        d_ref = float(np.abs(out - ref).max())
        d_first = float(np.abs(out - first).max())
        ok = d_ref <= rtol * scale
        mark = "ok" if ok else ("MISMATCH" if gated[name] else "not gated (reduced precision)")
        emit(f"  check {name:38s} max|diff| to numpy {d_ref:.2e}, to {first_name} {d_first:.2e}"
             f"  (output range {scale:.2e}) {mark}")
        if gated[name] and not ok:
            bad.append(name)
    return bad


#: seconds of calls per engine per round the default ``--number`` aims at (for the fastest)
AUTO_ROUND_S = 0.1


def _one_call_ms(fn: Any) -> float:
    timed = getattr(fn, "timed", None)  # an engine in its own process times itself
    if timed is not None:
        return float(timed(1))
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def auto_number(runners: dict[str, Any]) -> int:
    """Calls per engine per round: at least 3, and enough that the fastest engine's calls
    last :data:`AUTO_ROUND_S` (each engine timed warm, twice, the faster kept)."""
    fastest = min(min(_one_call_ms(fn), _one_call_ms(fn)) for fn in runners.values())
    return max(3, int(np.ceil(AUTO_ROUND_S * 1e3 / max(fastest, 1e-3))))


def time_rounds(runners: dict[str, Any], rounds: int, number: int, settle: float,
                peak: Any = None) -> dict[str, list[float]]:
    """Ms per call of each runner in each of ``rounds`` interleaved rounds; with ``peak`` (a
    callable returning GFLOPS) also the FMA peak timed at the end of each round, under
    :data:`PEAK`."""
    times: dict[str, list[float]] = {k: [] for k in runners}
    for fn in runners.values():  # warm-up: first-call allocations, lazy compilation
        fn()
    peaks: list[float] = []
    for _ in range(rounds):
        for name, fn in runners.items():
            time.sleep(settle)
            timed = getattr(fn, "timed", None)  # an engine in its own process times itself
            if timed is not None:
                times[name].append(timed(number))
                continue
            t = time.perf_counter()
            for _ in range(number):
                fn()
            times[name].append((time.perf_counter() - t) / number * 1e3)
        if peak is not None:
            time.sleep(settle)  # the last engine's worker threads may still spin
            peaks.append(peak())
    return {**times, PEAK: peaks} if peak is not None else times


def time_engines(runners: dict[str, Any], rounds: int, number: int, settle: float
                 ) -> dict[str, float]:
    """Median ms per call of each runner over interleaved rounds."""
    return {k: statistics.median(v)
            for k, v in time_rounds(runners, rounds, number, settle).items()}


def _no_prepare(threads: int) -> Any:
    raise AssertionError("an isolated engine runs in its own process")


def bench_model(name: str, a: argparse.Namespace, peaks: dict[int, float], emit: Any) -> bool:
    """Check and time one model on every engine; False on a mismatch."""
    from ops import fma_peak

    net, params = load_model(name)
    data = next(v for v in net.params if v.name not in params)
    x = model_input(net, params)
    gflop = network_flops(net) / 1e9
    path = onnx_file(name)
    emit(f"\n== {display_name(name)}{f' ({path})' if path else ''} {tuple(data.shape)}: "
         f"{gflop:.3f} GFLOP per inference")
    t0 = time.time()
    specs = [TEMPLTUNE, *([TEMPLTUNE_LOG] if a.log else []), *a.engines.split(",")]
    if a.isolate:  # the engines as their processes built them (names, notes, precision)
        probe = start(specs, name, a.log, int(a.threads.split(",")[0]))
        engines = [Engine(c.ready.name, _no_prepare, c.ready.gated, c.ready.note,
                          dict(c.ready.extra)) for c in probe if not c.ready.skipped]
        skipped = [c.ready.skipped for c in probe if c.ready.skipped]
        if probe[0].ready.skipped:
            raise RuntimeError(f"templtune could not run: {probe[0].ready.skipped}")
        for c in probe:  # the skipped ones have exited; the others serve the first count
            if c.ready.skipped:
                c.close()
        probe = [c for c in probe if not c.ready.skipped]
        specs = [c.spec for c in probe]
    else:
        engines = [templtune_engine("templtune (packaged log)", net, params, x)]
        if a.log:
            engines.append(templtune_engine(f"templtune (+{Path(a.log).name})", net, params,
                                            x, a.log))
        peers, skipped = peer_engines(net, params, x, tuple(a.engines.split(",")), path)
        engines += peers
        specs, probe = [], []
    emit(f"  {'engines started' if a.isolate else 'templtune built'} in {time.time() - t0:.1f} s; "
         + "; ".join(f"{e.name}: {e.note}" for e in engines if e.note))
    for line in skipped:
        emit(f"  skipped {line}")
    ref = graph.evaluate(net, params, **{data.name: x})
    for nt in (int(t) for t in a.threads.split(",")):
        children: list[Any] = []
        runners: dict[str, Any]
        if a.isolate:
            children = probe if probe else start(specs, name, a.log, nt)
            probe = []
            runners = {c.ready.name: c for c in children}
        else:
            runners = {e.name: e.prepare(nt) for e in engines}
        outputs = {k: fn() for k, fn in runners.items()}
        if nt == int(a.threads.split(",")[0]):
            labels = [f"{e.name}: {e.extra['precision']}" for e in engines
                      if "precision" in e.extra]
            if labels:
                emit("  inference precision: " + "; ".join(labels))
            bad = check(outputs, ref, {e.name: e.gated for e in engines}, a.rtol, emit)
            if bad:
                emit(f"  FAIL: {', '.join(bad)} disagree with numpy")
                for c in children:
                    c.close()
                return False
        # NOTE: the host's speed drifts within a run: ratios are taken within each round (the
        # FMA peak is timed at the end of each), then their median
        number = a.number if a.number > 0 else auto_number(runners)
        ts = time_rounds(runners, a.rounds, number, a.settle, lambda n=nt: fma_peak(n, 0.1))
        base, pk = ts[engines[0].name], ts[PEAK]
        emit(f"  {nt} thread(s), FMA peak {statistics.median(pk):.0f} GFLOPS (median of the "
             f"rounds'; {peaks[nt]:.0f} before), {a.rounds} rounds of {number} calls: median ms, "
             "and medians of the per-round ratios")
        for e in engines:
            t = ts[e.name]
            m = statistics.median(t)
            of_peak = statistics.median(gflop / v * 1e3 / p for v, p in zip(t, pk))
            speed = statistics.median(v / b for v, b in zip(t, base))
            emit(f"    {e.name:38s} {m:8.2f} ms {gflop / m * 1e3:7.1f} GFLOPS "
                 f"{of_peak:6.1%} of peak   templtune/engine speed {speed:5.2f}")
        for c in children:
            c.close()
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS),
                    help="zoo names or ONNX files (*.onnx), comma-separated")
    ap.add_argument("--engines", default=",".join(PEERS), help="peers, comma-separated")
    ap.add_argument("--log", default=None, help="tuning records for a second templtune build")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=0,
                    help="calls per engine per round (0: enough to fill AUTO_ROUND_S)")
    ap.add_argument("--settle", type=float, default=0.05)
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--isolate", action="store_true",
                    help="each engine in a process of its own (benchmarks/isolate.py)")
    ap.add_argument("--out", default=str(HERE / "results" / "inference.txt"))
    a = ap.parse_args(argv)
    for m in a.models.split(","):
        path = onnx_file(m)
        if path is not None and not path.is_file():
            ap.error(f"no ONNX file {m!r}")
        if path is None and m not in MODELS:
            ap.error(f"unknown model {m!r}; choose from {', '.join(MODELS)} or an .onnx file")

    from ops import fma_peak

    from templtune.autotvm.task.reference import FAMILY_LOGS, isa_family, reference_log_files

    lines: list[str] = []

    def emit(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    emit(f"# python3 benchmarks/inference.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    emit(f"CPU: {cpu_name()}")
    # NOTE: shared hosts: the load says how far the figures are from an idle machine's.
    emit("load average (1, 5, 15 min): " + ", ".join(f"{v:.1f}" for v in os.getloadavg()))
    if os.environ.get("ONEDNN_MAX_CPU_ISA"):  # OpenVINO's kernels capped (the AVX2 proxy)
        emit(f"ONEDNN_MAX_CPU_ISA={os.environ['ONEDNN_MAX_CPU_ISA']}: OpenVINO's ISA capped")
    ort = importlib.util.find_spec("onnxruntime")
    if ort and ort.origin and (Path(ort.origin).parent / ORT_AVX2_MARK).exists():
        emit(f"ONNX Runtime from {Path(ort.origin).parent.parent}: its AVX2 kernels "
             "(benchmarks/studies/ort_avx2.py)")
    fam = isa_family("llvm")
    emit(f"packaged logs: {', '.join(str(f) for f in reference_log_files('llvm')) or 'none'}")
    if fam is not None:
        raw = HERE.parent / "logs" / "pretune" / fam.value
        if raw.is_dir():
            emit(f"  {FAMILY_LOGS[fam]} distilled from logs/pretune/{fam.value}: "
                 f"{tuning_spent(raw)}")
    if a.log:
        emit(f"--log {a.log}: {tuning_spent(Path(a.log))}")
    peaks = {nt: fma_peak(nt) for nt in (int(t) for t in a.threads.split(","))}
    emit("FMA peak: " + ", ".join(f"{v:.0f} GFLOPS on {k} thread(s)" for k, v in peaks.items()))
    ok = all([bench_model(m, a, peaks, emit) for m in a.models.split(",")])  # every model
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"written to {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
