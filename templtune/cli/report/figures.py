"""The report's figures, drawn with matplotlib (the optional ``[plot]`` extra) as PNG bytes."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any

from .data import ERROR_NAMES, NetworkCurve, ReportError, TaskCurve


@dataclass(frozen=True, slots=True)
class Figure:
    """One rendered figure: a file-name stem, a caption and its PNG bytes."""

    name: str
    caption: str
    png: bytes


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ReportError("templtune report draws its plots with matplotlib, an optional "
                          "dependency: pip install 'templtune[plot]' (or pip install "
                          "matplotlib)") from None
    matplotlib.use("Agg")  # files only; never a window
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    _pyplot().close(fig)
    return buf.getvalue()


def _best_so_far(task: TaskCurve) -> list[float]:
    """Best-so-far GFLOPS per trial (when the FLOPs are known), else best latency in ms;
    NaN before the first success."""
    out, best = [], math.inf
    for t in task.trials:
        if t.cost_s is not None:
            best = min(best, t.cost_s)
        if math.isinf(best):
            out.append(math.nan)
        else:
            out.append(task.flop / best / 1e9 if task.flop else best * 1e3)
    return out


def task_figures(task: TaskCurve, index: int) -> list[Figure]:
    """Best-so-far against trials and wall time, and the error codes over trials."""
    plt = _pyplot()
    y = _best_so_far(task)
    unit = "best GFLOPS so far" if task.flop else "best latency so far (ms)"
    t0 = task.trials[0].timestamp
    wall = [t.timestamp - t0 for t in task.trials]
    trials = list(range(1, len(task.trials) + 1))
    mark = {"marker": "o", "markersize": 3} if len(trials) <= 64 else {}
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4), constrained_layout=True)
    a.step(trials, y, where="post", color="tab:blue", **mark)
    a.set_xlabel("trial")
    a.set_ylabel(unit)
    a.grid(alpha=0.3)
    b.step(wall, y, where="post", color="tab:green", **mark)
    b.set_xlabel("wall time (s)")
    b.set_ylabel(unit)
    b.grid(alpha=0.3)
    fig.suptitle(task.label, fontsize=9)
    curve = Figure(f"task{index:02d}_curve", f"{task.label}: {unit} against trials and wall time",
                   _png(fig))

    codes = sorted({t.error_no for t in task.trials})
    fig, ax = plt.subplots(figsize=(10, 0.6 + 0.45 * len(codes)), constrained_layout=True)
    for row, code in enumerate(codes):
        xs = [i for i, t in zip(trials, task.trials) if t.error_no == code]
        ax.scatter(xs, [row] * len(xs), marker="|", s=120,
                   color="tab:green" if code == 0 else "tab:red")
    ax.set_yticks(range(len(codes)))
    ax.set_yticklabels([ERROR_NAMES[c] if 0 <= c < len(ERROR_NAMES) else str(c)
                        for c in codes])
    ax.set_ylim(-0.6, len(codes) - 0.4)
    ax.set_xlim(0, len(trials) + 1)
    ax.set_xlabel("trial")
    errors = Figure(f"task{index:02d}_errors",
                    f"{task.label}: error codes over trials ({task.errors} of "
                    f"{len(task.trials)} failed)", _png(fig))
    return [curve, errors]


def network_figure(net: NetworkCurve) -> Figure:
    """The estimated network latency against trials and wall time."""
    plt = _pyplot()
    trials = list(range(1, len(net.latency_ms) + 1))
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4), constrained_layout=True)
    mark = {"marker": "o", "markersize": 3} if len(trials) <= 64 else {}
    a.plot(trials, net.latency_ms, color="tab:purple", **mark)
    a.set_xlabel("trial (all tasks)")
    a.set_ylabel("estimated latency (ms)")
    a.grid(alpha=0.3)
    b.plot(net.elapsed_s, net.latency_ms, color="tab:orange", **mark)
    b.set_xlabel("wall time (s)")
    b.set_ylabel("estimated latency (ms)")
    b.grid(alpha=0.3)
    how = "task weights from the task table" if net.weights_known else "every task weighs 1"
    return Figure("network_latency", f"Estimated network latency over trials ({how})",
                  _png(fig))
