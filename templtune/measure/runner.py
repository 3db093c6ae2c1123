"""The part every measuring runner shares: set-up per argument signature, checking policy,
retries and the mapping of worker outcomes to :class:`MeasureResult`.

:class:`LocalRunner` and the Ray ``RPCRunner`` differ only in transport: how a request reaches
the measurement process (:meth:`CheckingRunner._call`) and which buffers it holds.
"""

from __future__ import annotations

import abc
import logging
import time
import uuid
import warnings
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .candidate import ArgInfo, Candidate
from .measure import BuildResult, Measurable, MeasureErrorNo, MeasureResult, Runner, error_result
from .measure import scaled_note as _scaled
from .pool import CallStatus, Outcome
from .validate import check_count, check_number
from .worker import (
    _MAX_STATES,
    LoadRequest,
    RunRequest,
    RunSetup,
    SetupRequest,
    TimingOptions,
    load_run_state,
    prepare_run,
    run_candidate,
)

logger = logging.getLogger("templtune.measure")

_SETUP_TIMEOUT = 600.0
_MAX_SIGNATURES = 8  # set-ups (inputs + reference) the parent keeps


@dataclass(frozen=True, slots=True)
class Signature:
    """A prepared argument signature: its token in the measurement process, its buffers, and
    whether candidates are checked against a reference (``error`` when it cannot be used)."""

    token: str
    setup: RunSetup | None
    checked: bool
    error: str = ""


class CheckingRunner(Runner):
    """A runner that checks every candidate against a reference and times it in a separate
    measurement process (the parameters are :class:`LocalRunner`'s)."""

    def __init__(self, timeout: float = 10, n_parallel: int | None = None, number: int = 4,
                 repeat: int = 3, min_repeat_ms: float = 0, cooldown_interval: float = 0.1,
                 enable_cpu_cache_flush: bool = False, check_correctness: bool = True,
                 seed: int = 0, rtol: float = 1e-3, atol: float = 1e-3) -> None:
        super().__init__(timeout=timeout, n_parallel=n_parallel)
        owner = type(self).__name__
        check_count(owner, "number", number)
        check_count(owner, "repeat", repeat)
        for name, value in (("min_repeat_ms", min_repeat_ms),
                            ("cooldown_interval", cooldown_interval), ("rtol", rtol),
                            ("atol", atol)):
            check_number(owner, name, value)
        self.number, self.repeat, self.min_repeat_ms = number, repeat, min_repeat_ms
        self.cooldown_interval = cooldown_interval
        self.enable_cpu_cache_flush = enable_cpu_cache_flush
        self.check_correctness = check_correctness
        self.seed, self.rtol, self.atol = seed, rtol, atol
        self._ref_input: list[np.ndarray] | None = None
        self._user_ref_input = False
        self._sigs: dict[Hashable, Signature] = {}
        self.note = ""
        #: Seconds spent preparing inputs and the reference outputs.
        self.setup_time = 0.0

    @property
    def timing(self) -> TimingOptions:
        """The check and timing settings sent with every candidate."""
        return TimingOptions(self.number, self.repeat, self.min_repeat_ms,
                             self.enable_cpu_cache_flush, self.rtol, self.atol,
                             self.effective_timeout)

    # ---- ref_input (as TVM) -------------------------------------------------------------------
    @property
    def ref_input(self) -> list[np.ndarray] | None:
        """The input arrays every candidate runs on (set them to fix the inputs).

        After the first measurement this holds the generated random inputs when none were set
        (output buffers appear as zero arrays).
        """
        return self._ref_input

    @ref_input.setter
    def ref_input(self, val: list[np.ndarray] | None) -> None:
        warnings.warn("ref_input is set: candidates run on these fixed inputs",
                      RuntimeWarning, stacklevel=2)
        self._ref_input = None if val is None else [np.asarray(v) for v in val]
        self._user_ref_input = val is not None
        self._sigs.clear()

    def set_task(self, task: Any) -> None:
        super().set_task(task)
        self._sigs.clear()
        if not self._user_ref_input:
            self._ref_input = None

    # ---- transport (subclasses) ---------------------------------------------------------------
    @abc.abstractmethod
    def _call(self, slot: int, fn: Callable[[Any], Any], req: Any,
              timeout: float | None) -> Outcome:
        """Run ``fn(req)`` in the measurement process of ``slot``; never raises."""

    @abc.abstractmethod
    def _loaded(self, slot: int) -> list[str]:
        """Tokens whose buffers the measurement process of ``slot`` holds (the caller edits it;
        a replaced process starts with an empty list)."""

    def _where(self) -> str:
        return ""

    def _timeout_scale(self, task: Any) -> int:
        """Factor on ``timeout`` for candidates of ``task`` (1: the device is not emulated)."""
        return 1

    # ---- set-up ---------------------------------------------------------------------------------
    def _prepare(self, slot: int, cand: Candidate, info: tuple[ArgInfo, ...]) -> Signature:
        user = tuple(self._ref_input) if self._user_ref_input and self._ref_input else None
        check = self.check_correctness
        failures: dict[CallStatus, int] = {}
        gave_up = False
        t0 = time.perf_counter()
        while True:
            out = self._call(slot, prepare_run, SetupRequest(cand, info, self.seed, user, check),
                             _SETUP_TIMEOUT)
            if out.ok or not check or out.status not in (CallStatus.DIED, CallStatus.TIMEOUT):
                break
            failures[out.status] = failures.get(out.status, 0) + 1
            if failures[out.status] < 2:
                logger.warning("%s: setting up %s for measurement failed (%s: %s); retrying with "
                               "correctness checking", type(self).__name__, cand.label,
                               out.status.value, out.message)
                continue
            logger.warning("%s: computing the reference outputs of %s failed twice the same way "
                           "(%s: %s); CORRECTNESS IS NOT CHECKED for these candidates and their "
                           "records say \"checked\": false", type(self).__name__, cand.label,
                           out.status.value, out.message)
            check, gave_up = False, True
        self.setup_time += time.perf_counter() - t0
        token = uuid.uuid4().hex
        if not out.ok:
            return Signature(token, None, False, (
                f"{type(self).__name__} could not set up {cand.label}{self._where()}: "
                f"{out.status.value} {out.error_type} {out.message}\n{out.traceback}"))
        setup: RunSetup = out.value
        self.note = setup.note
        checked = setup.reference is not None
        if self.check_correctness and not checked and not gave_up:
            logger.warning("%s: %s; CORRECTNESS IS NOT CHECKED for %s and its records say "
                           "\"checked\": false", type(self).__name__, setup.note, cand.label)
        elif self.check_correctness:
            logger.info("%s %s: %s", type(self).__name__, cand.label, setup.note)
        if not self._user_ref_input:
            self._ref_input = [np.array(a, copy=True) for a in setup.inputs]
        return Signature(token, setup, checked)

    def _ensure_setup(self, slot: int, br: BuildResult) -> Signature:
        """The prepared signature of ``br`` loaded in ``slot``'s process (``error`` if not)."""

        cand = br.candidate
        assert cand is not None, "the builder did not record the candidate"
        key = (cand.task_key, br.arg_info)
        sig = self._sigs.get(key)
        if sig is None:
            sig = self._prepare(slot, cand, br.arg_info)
            while len(self._sigs) >= _MAX_SIGNATURES:
                del self._sigs[next(iter(self._sigs))]
            self._sigs[key] = sig
        if sig.error or sig.setup is None:
            return sig
        loaded = self._loaded(slot)
        if sig.token not in loaded:
            out = self._call(slot, load_run_state, LoadRequest(sig.token, sig.setup),
                             _SETUP_TIMEOUT)
            if not out.ok:
                return Signature(sig.token, None, False, f"{type(self).__name__} could not load "
                                 f"the buffers{self._where()}: {out.message}")
            loaded.append(sig.token)
            del loaded[:-_MAX_STATES]  # NOTE: mirrors the process's own eviction
        return sig

    # ---- results --------------------------------------------------------------------------------
    def _request(self, sig: Signature, br: BuildResult) -> RunRequest:
        assert br.artifact is not None
        return RunRequest(sig.token, br.artifact, sig.checked, self.timing)

    def _result(self, br: BuildResult, sig: Signature, out: Outcome,
                elapsed: float) -> MeasureResult:
        cand = br.candidate
        label = cand.label if cand is not None else "candidate"
        now = time.time()
        total = br.time_cost + elapsed
        if out.status is CallStatus.TIMEOUT:
            return error_result(MeasureErrorNo.RUN_TIMEOUT, f"{label}: run timed out after "
                                f"{self.effective_timeout:g} s{_scaled(self.time_scale)}{self._where()}",
                                br.time_cost + self.effective_timeout,
                                now, sig.checked)
        if out.status is CallStatus.DIED:
            return error_result(MeasureErrorNo.RUNTIME_DEVICE, f"{label}: measurement process "
                                f"died{self._where()} ({out.message})", total, now, sig.checked,
                                infra_error=out.killed_externally)
        if out.status is CallStatus.ERROR:
            return error_result(MeasureErrorNo.RUNTIME_DEVICE,
                                f"{out.error_type}: {out.message[:1024]}\n{out.traceback}",
                                total, now, sig.checked)
        reply = out.value
        if reply.error_no != MeasureErrorNo.NO_ERROR:
            return error_result(reply.error_no, f"{label}: {reply.detail}", total, now,
                                sig.checked)
        costs = reply.costs
        if len(costs) > 2:
            # NOTE: as AutoTVM, drop the fastest and slowest round when more than 2 exist.
            costs = tuple(sorted(costs)[1:-1])
        return MeasureResult(costs, MeasureErrorNo.NO_ERROR, total, now, "", sig.checked,
                             device=reply.device, threads=reply.threads)

    def _failed_build(self, br: BuildResult) -> MeasureResult:
        return error_result(br.error_no, br.error_detail, br.time_cost, time.time(),
                            infra_error=br.infra_error)

    def _cooldown(self) -> None:
        if self.cooldown_interval > 0:
            time.sleep(self.cooldown_interval)

    def run(self, measure_inputs: Sequence[Measurable], build_results: Sequence[BuildResult],
            verbose: int = 0) -> list[MeasureResult]:
        """Check and time every built candidate, one at a time in the process of slot 0."""
        if measure_inputs:
            self.time_scale = self._timeout_scale(getattr(measure_inputs[0], "task", None))
        results = []
        cooled = False
        for br in build_results:
            if not br.ok:
                results.append(self._failed_build(br))
                continue
            if not cooled:
                # NOTE: one cooldown per batch, before its first run (templtune deviation; see
                # LocalRunner's docstring).
                self._cooldown()
                cooled = True
            results.append(self._run_one(br))
        return results

    def _run_one(self, br: BuildResult) -> MeasureResult:
        for attempt in (0, 1):
            sig = self._ensure_setup(0, br)
            if sig.error:
                return error_result(MeasureErrorNo.RUNTIME_DEVICE, sig.error, br.time_cost,
                                    time.time(), False)
            t0 = time.perf_counter()
            out = self._call(0, run_candidate, self._request(sig, br),
                             self.effective_timeout)
            if out.killed_externally and attempt == 0:
                logger.warning("%s: the measurement process was killed from outside (%s) while "
                               "running %s; running it again", type(self).__name__, out.message,
                               br.candidate.label if br.candidate else "a candidate")
                continue
            return self._result(br, sig, out, time.perf_counter() - t0)
        raise AssertionError("unreachable")

