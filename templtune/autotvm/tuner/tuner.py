"""The tuner base class and its ``tune`` loop.

Subclasses implement :meth:`Tuner.next_batch` (propose configs never proposed before) and may
override :meth:`Tuner.update` (learn from results) and :meth:`Tuner.mark_visited` (exclude configs,
used by resume). Model-based tuners plug in through the same four methods.
"""

from __future__ import annotations

import abc
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from templtune.autotvm.measure import MeasureInput, MeasureResult, create_measure_batch
from templtune.autotvm.task.task import serialize_args

logger = logging.getLogger("autotvm")

_SI_PREFIXES = "yzafpnµm kMGTPEZY"


def is_space_point(space: Any, config: Any) -> bool:
    """Whether ``config`` (e.g. read from a log) is exactly ``space``'s config of its index."""
    try:
        cfg = space.get(config.index)
    except (IndexError, TypeError, ValueError):
        return False
    return dict(cfg._entity_map) == dict(getattr(config, "_entity_map", {}))


def si_scale(si_prefix: str) -> float:
    """The scale of an SI prefix character (``"G"`` -> 1e9, ``" "`` -> 1).

    Raises
    ------
    ValueError
        If ``si_prefix`` is not one character of ``"yzafpnµm kMGTPEZY"``.
    """
    if len(si_prefix) != 1 or si_prefix not in _SI_PREFIXES:
        raise ValueError(f"invalid SI prefix {si_prefix!r}: expected one of {_SI_PREFIXES!r}")
    return 10.0 ** (3 * _SI_PREFIXES.index(si_prefix) - 24)


Callback = Callable[["Tuner", Sequence[MeasureInput], Sequence[MeasureResult]], Any]


class Tuner(abc.ABC):
    """Base class of all tuners.

    Parameters
    ----------
    task : templtune.autotvm.task.Task
        The task to tune.
    seed : int, numpy.random.Generator or None
        Seed of the tuner's random number generator (``None``: fresh entropy). A fixed seed gives
        the same sequence of proposals for the same measurement results.

    Attributes
    ----------
    best_config, best_flops, best_measure_pair, best_iter
        The best configuration so far, its FLOPS, its ``(MeasureInput, MeasureResult)`` and the
        trial number at which it was found.
    visited : set of int
        Config indices already measured or already planned; a tuner never proposes them again.
    tune_stats : dict
        After :meth:`tune`: ``trials``, ``errors`` and the wall-time split ``total_s``,
        ``build_s``, ``run_s``, ``overhead_s`` (tuner logic, callbacks, process start-up).
    """

    def __init__(self, task: Any, seed: int | np.random.Generator | None = None, **kwargs: Any):
        if kwargs:
            raise TypeError(f"{type(self).__name__}() got unexpected keyword arguments: "
                            f"{', '.join(sorted(kwargs))}")
        self.task = task
        self.space = task.config_space
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self.visited: set[int] = set()
        self.error_ct_threshold = 150
        self.n_trial = 0
        self.early_stopping: int | None = None
        self.ttl: int | None = None
        self.tune_stats: dict[str, float] = {}
        self.reset()

    # ---- subclass interface -------------------------------------------------------------------
    def has_next(self) -> bool:
        """Whether the tuner has configs left to propose."""
        return True

    @abc.abstractmethod
    def next_batch(self, batch_size: int) -> list:
        """Return up to ``batch_size`` configs (ConfigEntity) not proposed before."""

    def update(  # noqa: B027 - optional hook
        self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]
    ) -> None:
        """Learn from measured results (no-op by default)."""

    def mark_visited(self, indices: Iterable[int]) -> None:
        """Exclude config indices from future proposals (used by resume and ``load_history``)."""
        self.visited.update(int(i) for i in indices)

    def load_history(self, data_set: Iterable[tuple[MeasureInput, MeasureResult]],
                     min_seed_records: int = 500) -> None:
        """Load previous ``(MeasureInput, MeasureResult)`` records of this task.

        The base implementation marks their configs as visited (never measured again) and updates
        the best-so-far fields; model-based tuners additionally train on them. Records of other
        tasks are ignored. ``min_seed_records`` is used by model-based tuners only.
        """
        pairs = [(inp, res) for inp, res in data_set if self._same_task(inp)]
        self.mark_visited(inp.config.index for inp, _ in pairs)
        for j, (inp, res) in enumerate(pairs):
            # NOTE: the record's position is its trial number, so early stopping after a resume
            # counts from where the best config was really found.
            self._track_best(inp, res, j)

    def reset(self) -> None:
        """Forget the best-so-far fields."""
        self.best_config = None
        self.best_flops = 0.0
        self.best_measure_pair: tuple[MeasureInput, MeasureResult] | None = None
        self.best_iter = 0

    def set_error_threshold(self, threshold: int) -> None:
        """Number of consecutive errors after which the loop warns."""
        self.error_ct_threshold = threshold

    # ---- the loop -----------------------------------------------------------------------------
    def tune(self, n_trial: int, measure_option: dict, early_stopping: int | None = None,
             callbacks: Sequence[Callback] = (), si_prefix: str = "G",
             resume_log: str | os.PathLike | None = None,
             time_budget: float | None = None,
             initial_configs: Sequence[Any] = ()) -> None:
        """Measure up to ``n_trial`` configs, calling ``update`` and then every callback per batch.

        Parameters
        ----------
        n_trial : int
            Maximum number of configs to measure.
        measure_option : dict
            From :func:`templtune.autotvm.measure_option`.
        early_stopping : int or None
            Stop when no better config was found in this many trials.
        callbacks : sequence of callables
            Each called as ``callback(tuner, inputs, results)`` after every batch.
        si_prefix : str
            Unit of the FLOPS in log messages (``"G"``: GFLOPS).
        resume_log : path or None
            A JSON-lines log of an earlier (perhaps killed) run. Its records of this task and
            target (compared in canonical form) are loaded with :meth:`load_history`, are never measured again, and count toward ``n_trial``, so
            re-running the same ``tune`` call after a crash finishes the original budget
            (templtune extension).
        time_budget : float or None
            Seconds after which no new batch is started (the running batch finishes); None
            for no limit (templtune extension).
        initial_configs : sequence of ConfigEntity
            Configs of this task's space measured first (e.g. a packaged record's), counted
            toward ``n_trial``; one the tuner has measured (resumed) or planned already is
            skipped (templtune extension).
        """
        scale = si_scale(si_prefix)
        _check_count("n_trial", n_trial)
        if early_stopping is not None:
            _check_count("early_stopping", early_stopping)
        for callback in callbacks:
            # NOTE: e.g. log_to_file checks that its file can be written: failing after the first
            # batch was measured would lose that batch.
            prepare = getattr(callback, "prepare", None)
            if callable(prepare):
                prepare()
        t_start = time.perf_counter()
        i = 0
        if resume_log is not None and os.path.exists(resume_log):
            from ..record import load_from_file

            # NOTE: records of another target (e.g. ``llvm`` for ``llvm -mcpu=haswell``) are
            # not this task's measurements: matched on task and canonical target. A failure of
            # the infrastructure (a worker killed from outside) says nothing about its config,
            # which is measured again.
            mine = [(inp, res) for inp, res in load_from_file(str(resume_log))
                    if self._same_task(inp) and self._same_target(inp)
                    and not getattr(res, "infra_error", False)]
            history = [(inp, res) for inp, res in mine if self._trustworthy(inp, res)]
            if len(history) < len(mine):
                logger.warning("%s: ignoring %d records of this task whose config is not the "
                               "space's config of its index, or whose costs are not finite "
                               "and positive", resume_log, len(mine) - len(history))
            self.load_history(history, min_seed_records=len(history) + 1)
            i = len({inp.config.index for inp, _ in history})
            logger.info("resumed %d measured configs from %s", i, resume_log)
        resumed = i
        seeds = self._seed_indices(initial_configs)
        measure_batch = create_measure_batch(self.task, measure_option)
        n_parallel = getattr(measure_batch, "n_parallel", 1) or 1
        self.n_trial = n_trial
        self.early_stopping = int(early_stopping) if early_stopping is not None else int(1e9)
        error_ct = 0
        errors: list[str] = []
        n_errors = 0
        warned = False
        from ..env import configure, restore

        previous_env = configure(in_tuning=True)
        try:
            while i < n_trial and self.has_next():
                if time_budget is not None and time.perf_counter() - t_start >= time_budget:
                    logger.info("time budget of %.0f s spent after %d trials", time_budget, i)
                    break
                size = min(n_parallel, n_trial - i)
                if seeds:
                    configs = [self.task.config_space.get(k) for k in seeds[:size]]
                    del seeds[:size]
                    self.mark_visited(c.index for c in configs)
                else:
                    configs = self.next_batch(size)
                if not configs:
                    break
                inputs = [MeasureInput(self.task.target, self.task, cfg) for cfg in configs]
                results = measure_batch(inputs)
                for k, (inp, res) in enumerate(zip(inputs, results)):
                    if res.ok:
                        flops = self._flops(res)
                        error_ct = 0
                    else:
                        flops = 0.0
                        error_ct += 1
                        n_errors += 1
                        if n_errors == i + k + 1 - resumed:  # only kept while all failed
                            errors.append(f"{inp.config}\n{res.error_no!r}: {res.error_detail}")
                    self._track_best(inp, res, i + k)
                    logger.debug("No: %d\t%sFLOPS: %.2f/%.2f\tresult: %s\t%s", i + k + 1,
                                 si_prefix.strip(), flops / scale, self.best_flops / scale,
                                 res if res.ok else f"{res.error_no!r} {res.error_detail[-300:]}",
                                 inp.config)
                i += len(results)
                self.ttl = min(self.early_stopping + self.best_iter, n_trial) - i
                self.update(inputs, results)
                for callback in callbacks:
                    callback(self, inputs, results)
                if i >= self.best_iter + self.early_stopping:
                    logger.debug("early stopped at trial %d (best at %d)", i, self.best_iter)
                    break
                if error_ct > self.error_ct_threshold and not warned:
                    # NOTE: AutoTVM flips its logger to DEBUG here; a library must not configure
                    # logging, so we only warn (once) and leave the level to the application.
                    logger.warning("%d consecutive measurement errors; enable DEBUG logging on "
                                   "'autotvm' to see them", error_ct)
                    warned = True
        finally:
            restore(previous_env)
            # NOTE: the builder's and runner's worker processes stay warm for the next tune()
            # call (they idle, and exit with this process or with builder/runner.close()).
            total = time.perf_counter() - t_start
            build = float(getattr(measure_batch, "build_time", 0.0))
            run = float(getattr(measure_batch, "run_time", 0.0))
            self.tune_stats = {"trials": i - resumed, "resumed": resumed, "errors": n_errors,
                               "total_s": total,
                               "build_s": build, "run_s": run,
                               "overhead_s": max(0.0, total - build - run)}
        if i > resumed and n_errors == i - resumed and errors:
            _report_all_failed(errors, callbacks)

    # ---- helpers ------------------------------------------------------------------------------
    def _seed_indices(self, configs: Sequence[Any]) -> list[int]:
        """The indices of ``configs`` that are points of this task's space (a config of
        another space is skipped with a warning) and not yet measured."""
        from ..record import check_config

        out: list[int] = []
        for cfg in configs:
            why = check_config(self.space, cfg)
            if why is None and not self._is_space_point(cfg):
                why = "its index names another point"
            if why is not None:
                logger.warning("initial config #%s is not a point of %s's space: %s",
                               getattr(cfg, "index", "?"), self.task.name, why)
            elif cfg.index not in self.visited and cfg.index not in out:
                out.append(int(cfg.index))
        return out

    def _flops(self, res: MeasureResult) -> float:
        cost = res.mean_cost
        flop = float(getattr(self.task, "flop", 0) or 0)
        if cost <= 0:
            return 0.0
        # NOTE: with an unknown FLOP count AutoTVM scores everything 0 and never finds a best;
        # scoring 1/cost keeps best tracking meaningful (templtune deviation).
        return flop / cost if flop > 0 else 1.0 / cost

    def _track_best(self, inp: MeasureInput, res: MeasureResult, trial: int) -> bool:
        if not res.ok:
            return False
        flops = self._flops(res)
        if flops > self.best_flops:
            self.best_flops = flops
            self.best_config = inp.config
            self.best_measure_pair = (inp, res)
            self.best_iter = trial
            return True
        return False

    def _same_task(self, inp: MeasureInput) -> bool:
        task = inp.task
        if task is self.task:
            return True
        return (getattr(task, "name", None) == getattr(self.task, "name", None)
                and serialize_args(getattr(task, "args", ()))
                == serialize_args(getattr(self.task, "args", ())))

    def _trustworthy(self, inp: MeasureInput, res: MeasureResult) -> bool:
        """Whether a logged record may count as a measurement of this task: its config must
        be exactly the space's config of its index, and a success must have usable costs."""
        from ..record import usable_cost

        if res.ok and usable_cost(res) is None:
            return False
        return self._is_space_point(inp.config)

    def _is_space_point(self, config: Any) -> bool:
        return is_space_point(self.space, config)

    def _same_target(self, inp: MeasureInput) -> bool:
        mine = getattr(self.task, "target", None)
        theirs = getattr(inp, "target", None)
        if mine is None:  # a task without a target: nothing to compare with
            return True
        if theirs is None:
            return False
        return _canonical_target(theirs) == _canonical_target(mine)


def _canonical_target(t: Any) -> str:
    """The canonical string of a target (``Target`` prints its attributes in one order)."""
    from ..task.target_compat import as_target

    try:
        return str(as_target(str(t)))
    except Exception:  # noqa: BLE001 - an unparsable target matches only itself
        return " ".join(str(t).split())


def _report_all_failed(errors: list[str], callbacks: Sequence[Callback]) -> None:
    """Warn that every trial failed, with the first error; the full list goes beside the user's
    record log (``<log>.errors.txt``) when there is one, never to a stray temporary file."""
    logs = [str(getattr(cb, "file_out", "")) for cb in callbacks
            if isinstance(getattr(cb, "file_out", None), str)]
    where = ""
    if logs:
        path = logs[0] + ".errors.txt"
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n\n".join(errors) + "\n")
            where = f"; all {len(errors)} errors were written to {path}"
        except OSError as exc:
            where = f"; cannot write them to {path}: {exc}"
    logger.warning("every trial failed%s. The first error:\n%s", where, errors[0][-2000:])


def _check_count(name: str, value: Any) -> None:
    """Raise ``ValueError`` unless ``value`` is a non-negative integer (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value}")
