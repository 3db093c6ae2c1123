"""Callbacks for :meth:`Tuner.tune`: progress bar, log writers and a score monitor.

A callback is any callable ``callback(tuner, inputs, results)``, called after every batch (after
the tuner's own ``update``).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import IO, Any

logger = logging.getLogger("autotvm")


def log_to_file(file_out: str | os.PathLike | IO[str], protocol: str = "json"):
    """A callback that appends every measured record to a JSON-lines log.

    For a path, the file is opened in append mode once per batch, one line is written per record,
    and the batch is flushed and ``fsync``-ed before the callback returns, so a killed tuning run
    loses no completed batch. For an open file object, lines are written and flushed.
    :meth:`Tuner.tune` checks that the path can be written before it measures anything.

    Parameters
    ----------
    file_out : str, os.PathLike or file object
        Where to append the records.
    protocol : str
        Record encoding (``"json"``).

    Returns
    -------
    callable
        ``callback(tuner, inputs, results)``.
    """
    if isinstance(file_out, os.PathLike):
        file_out = os.fspath(file_out)

    if protocol != "json":
        raise ValueError(f"unsupported record protocol {protocol!r} (only 'json')")

    def _callback(tuner: Any, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        from .record import append_records

        # NOTE: one write per line and an fsync per batch (see record.append_records): a killed
        # run leaves only whole lines, and every finished batch is on disk.
        append_records(file_out, zip(inputs, results))

    def _prepare() -> None:
        if isinstance(file_out, str):
            _check_writable(file_out)

    _callback.file_out = file_out  # type: ignore[attr-defined]
    _callback.prepare = _prepare  # type: ignore[attr-defined]  # Tuner.tune calls it first
    return _callback


def _check_writable(path: str) -> None:
    """Raise ``ValueError`` naming ``path`` unless records can be appended to it (the file is
    created, empty, if missing)."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"log_to_file: the directory of {path!r} does not exist ({parent})")
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ValueError(f"log_to_file: cannot write records to {path!r}: {exc}") from None


def log_to_database(db: Any):
    """A callback that saves every record with ``db.save(inp, res)``."""

    def _callback(tuner: Any, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        for inp, res in zip(inputs, results):
            db.save(inp, res)

    return _callback


class Monitor:
    """A callback collecting per-trial scores (FLOPS, 0 on error) and timestamps."""

    def __init__(self) -> None:
        self.scores: list[float] = []
        self.timestamps: list[float] = []

    def __call__(self, tuner: Any, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        flop = float(getattr(tuner.task, "flop", 0) or 0)
        for res in results:
            if res.ok and res.mean_cost > 0:
                self.scores.append(flop / res.mean_cost)
            else:
                self.scores.append(0.0)
            self.timestamps.append(res.timestamp)

    def reset(self) -> None:
        self.scores.clear()
        self.timestamps.clear()

    def trial_scores(self):
        """Scores as a numpy array."""
        import numpy as np

        return np.array(self.scores)

    def trial_timestamps(self):
        """Timestamps as a numpy array."""
        import numpy as np

        return np.array(self.timestamps)


class _ProgressBar:
    def __init__(self, total: int, prefix: str, si_prefix: str, file: IO[str] | None) -> None:
        from .tuner.tuner import si_scale

        self.total = int(total)
        self.prefix = prefix
        self.si_prefix = si_prefix
        self.scale = si_scale(si_prefix)
        self.file = file
        self.bar: Any = None
        self.done = 0
        self.errors = 0
        self.cur_flops = 0.0
        self.start = time.time()

    def _open(self) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=self.total, desc=self.prefix.strip() or None, unit="trial",
                        file=self.file or sys.stdout, dynamic_ncols=True, leave=True)
        # NOTE: the bar opens after the first batch; count the rate and ETA from creation.
        self.bar.start_t = self.start

    def __call__(self, tuner: Any, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        if logger.isEnabledFor(logging.DEBUG):
            return  # NOTE: as AutoTVM: debug logging prints every trial; no bar on top of it
        if self.bar is None:
            self._open()
        flop = float(getattr(tuner.task, "flop", 0) or 0)
        for res in results:
            if res.ok and res.mean_cost > 0:
                self.cur_flops = flop / res.mean_cost
            else:
                self.errors += 1
        self.done += len(results)
        unit = self.si_prefix.strip()
        self.bar.set_postfix_str(
            f"Current/Best: {self.cur_flops / self.scale:7.2f}/"
            f"{tuner.best_flops / self.scale:7.2f} {unit}FLOPS | errors: {self.errors}",
            refresh=False)
        self.bar.update(len(results))
        ttl = getattr(tuner, "ttl", None)
        if self.done >= self.total or (ttl is not None and ttl <= 0):
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def progress_bar(total: int, prefix: str = "", si_prefix: str = "G",
                 file: IO[str] | None = None):
    """A callback showing a tqdm progress bar.

    The bar shows trials done out of ``total``, the current and best FLOPS in the ``si_prefix``
    unit, the number of failed trials and the ETA. It prints nothing while the
    ``autotvm`` logger is at DEBUG level (every trial is logged then).

    Parameters
    ----------
    total : int
        Expected number of trials (usually ``n_trial``).
    prefix : str
        Text in front of the bar (e.g. ``"[Task  1/12] "``).
    si_prefix : str
        Unit prefix of the FLOPS figures (``"G"`` for GFLOPS).
    file : file object, optional
        Where to draw the bar (default ``sys.stdout``).
    """
    return _ProgressBar(total, prefix, si_prefix, file)


def plot(path: str | os.PathLike, title: str | None = None, si_prefix: str = "G"):
    """A callback redrawing a PNG of the best-so-far FLOPS (and each trial's) against trials
    after every batch, to watch a run live (templtune extension).

    The file is replaced atomically, so a viewer never reads a half-written image. Needs
    matplotlib (``pip install 'templtune[plot]'``).

    Parameters
    ----------
    path : str or os.PathLike
        The PNG file to (re)write.
    title : str, optional
        Figure title (default: the task's name and arguments).
    si_prefix : str
        Unit prefix of the FLOPS axis (``"G"`` for GFLOPS).
    """
    return _LivePlot(path, title, si_prefix)


class _LivePlot:
    def __init__(self, path: str | os.PathLike, title: str | None, si_prefix: str) -> None:
        from .tuner.tuner import si_scale

        try:
            import matplotlib
        except ImportError:
            raise ImportError("autotvm.callback.plot draws with matplotlib, an optional "
                              "dependency: pip install 'templtune[plot]'") from None
        matplotlib.use("Agg")  # files only; never a window
        self.path = os.fspath(path)
        self.title = title
        self.unit = si_prefix.strip()
        self.scale = si_scale(si_prefix)
        self.scores: list[float] = []

    def __call__(self, tuner: Any, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        import matplotlib.pyplot as plt

        flop = float(getattr(tuner.task, "flop", 0) or 0)
        for res in results:
            ok = res.ok and res.mean_cost > 0
            self.scores.append(flop / res.mean_cost / self.scale if ok else 0.0)
        best, cur = [], 0.0
        for s in self.scores:
            cur = max(cur, s)
            best.append(cur)
        trials = range(1, len(self.scores) + 1)
        fig, ax = plt.subplots(figsize=(7, 3.6), constrained_layout=True)
        ax.scatter(trials, self.scores, s=8, color="tab:gray", label="trial")
        ax.step(trials, best, where="post", color="tab:blue", label="best so far")
        ax.set_xlabel("trial")
        ax.set_ylabel(f"{self.unit}FLOPS")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
        task = tuner.task
        ax.set_title(self.title or f"{task.name}{tuple(task.args)}", fontsize=9)
        tmp = f"{self.path}.tmp.png"
        fig.savefig(tmp, dpi=100)
        plt.close(fig)
        os.replace(tmp, self.path)
