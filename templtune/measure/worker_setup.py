"""Runner side of a measurement worker, per argument signature: inputs and reference outputs.

The states installed here (:func:`load_run_state`) are what :func:`.worker_run.run_candidate`
checks and times a candidate on. Part of :mod:`.worker`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .candidate import ArgInfo, Candidate, arg_info, is_device_target
from .worker_build import _target_scope


@dataclass(frozen=True, slots=True)
class SetupRequest:
    """Prepare inputs (and, with ``check``, reference outputs) for one argument signature."""

    candidate: Candidate
    arg_info: tuple[ArgInfo, ...]
    seed: int
    ref_input: tuple[np.ndarray, ...] | None
    check: bool


@dataclass(frozen=True, slots=True)
class RunSetup:
    """Argument buffers of one signature in the runner process, and their reference outputs.

    ``reference`` is None when it was not computed (checking off, or both the naive build and
    the numpy evaluator failed: ``note`` says why).
    """

    inputs: tuple[np.ndarray, ...]
    outputs: tuple[int, ...]
    reference: tuple[np.ndarray, ...] | None
    note: str
    device: str


_RUN: dict[str, RunSetup] = {}
_MAX_STATES = 4  # argument signatures kept in the runner process at once


def _random_array(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    np_dtype = np.dtype(dtype)
    if np_dtype.kind == "f":
        return rng.uniform(-1.0, 1.0, size=shape).astype(np_dtype)
    if np_dtype.kind in "iu":
        return rng.integers(0, 8, size=shape).astype(np_dtype)
    if np_dtype.kind == "b":
        return rng.random(size=shape) < 0.5
    return np.zeros(shape, dtype=np_dtype)


def prepare_run(req: SetupRequest) -> RunSetup:
    """Set up one argument signature in the runner process: inputs and reference outputs.

    The reference is the candidate's outputs built with the naive schedule
    (``create_schedule([out.op ...])``), falling back to the numpy evaluator.
    """
    info = req.arg_info
    outputs = tuple(k for k, a in enumerate(info) if a.is_output)
    if req.ref_input is not None:
        if len(req.ref_input) != len(info) or any(
                tuple(np.shape(x)) != a.shape for x, a in zip(req.ref_input, info)):
            raise ValueError("ref_input does not match the candidate's arguments: "
                             f"{[np.shape(x) for x in req.ref_input]} vs {[a.shape for a in info]}")
        inputs = [np.array(x, dtype=a.dtype, copy=True) for x, a in zip(req.ref_input, info)]
    else:
        rng = np.random.default_rng(req.seed)
        inputs = [np.zeros(a.shape, dtype=np.dtype(a.dtype)) if a.is_output
                  else _random_array(a.shape, a.dtype, rng) for a in info]
    reference = None
    note = "correctness not checked (off)"
    if req.check and outputs:
        try:
            args = req.candidate.reference_args()
            if arg_info(args) != info:
                raise ValueError(f"the reference's arguments {arg_info(args)} differ from the "
                                 f"candidate's {info}")
        except Exception as exc:  # noqa: BLE001 - reported in the note, as unchecked
            args = None
            note = f"no reference, correctness not checked: {type(exc).__name__}: {exc}"
        if args is not None:
            try:
                reference = _reference_by_build(req.candidate.target, args, inputs, outputs)
                note = "reference: naive schedule"
            except Exception as exc:  # noqa: BLE001 - fall back to the numpy oracle
                try:
                    reference = _reference_by_numpy(args, inputs, outputs)
                    note = f"reference: numpy evaluator (naive build failed: {exc})"
                except Exception as exc2:  # noqa: BLE001
                    note = f"no reference, correctness not checked: {exc2}"
    device = "cuda" if is_device_target(req.candidate.target) else "cpu"
    return RunSetup(tuple(inputs), outputs, None if reference is None else tuple(reference),
                    note, device)


def _reference_by_build(target: str, args: list, inputs: list[np.ndarray],
                        outputs: tuple[int, ...]) -> list[np.ndarray]:
    import templtune
    from templtune.te import create_schedule

    s = create_schedule([args[k].op for k in outputs])
    # NOTE: the naive schedule has no thread binding, so GPU tasks get their reference on the
    # host CPU.
    target = "llvm" if is_device_target(target) else target
    with _target_scope(templtune.target.Target(str(target))):
        module = templtune.build(s, list(args), target=target)
    arrays = [a.copy() for a in inputs]
    module(*arrays)
    return [arrays[k] for k in outputs]


def _reference_by_numpy(args: list, inputs: list[np.ndarray],
                        outputs: tuple[int, ...]) -> list[np.ndarray]:
    from templtune.te.evaluate import evaluate

    feeds = {args[k]: inputs[k] for k in range(len(args)) if k not in outputs}
    res = evaluate([args[k] for k in outputs], feeds)
    if isinstance(res, dict):
        return [np.asarray(res[args[k]]) for k in outputs]
    return [np.asarray(r) for r in res]


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """Install ``setup`` in the runner process under ``token``."""

    token: str
    setup: RunSetup


def load_run_state(req: LoadRequest) -> None:
    """Install one signature's buffers and reference in this runner process."""
    while len(_RUN) >= _MAX_STATES:
        del _RUN[next(iter(_RUN))]  # NOTE: oldest first; frees that signature's buffers
    _RUN[req.token] = req.setup


def has_run_state(token: str) -> bool:
    return token in _RUN
