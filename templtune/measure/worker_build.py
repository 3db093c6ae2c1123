"""Build side of a measurement worker: rebuild a candidate, build it, export the module.

A build reply carries the module as bytes (:func:`export_module`); the runner process turns them
back into a callable module with :func:`load_artifact`. Part of :mod:`.worker`.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import Any

from templtune.errors import CodegenError, InstantiationError

from .candidate import ArgInfo, Candidate, arg_info, is_device_target
from .measure import MeasureErrorNo


@dataclass(frozen=True, slots=True)
class BuildRequest:
    """Build ``candidate`` with ``templtune.build(..., **build_kwargs)``."""

    candidate: Candidate
    build_kwargs: dict


@dataclass(frozen=True, slots=True)
class BuildReply:
    """A build worker's answer: the exported module and argument info, or an error."""

    error_no: MeasureErrorNo
    artifact: bytes | None
    detail: str
    seconds: float
    arg_info: tuple[ArgInfo, ...] = ()


def _detail(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-4000:]}"


def build_candidate(req: BuildRequest) -> BuildReply:
    """Rebuild the candidate's schedule and build it; never raises for a bad candidate.

    Error codes are chosen by exception type: ``InstantiationError`` is
    ``INSTANTIATION_ERROR``, a ``CodegenError`` is ``COMPILE_DEVICE`` on GPU targets and
    ``COMPILE_HOST`` otherwise, anything else is ``COMPILE_HOST``.
    """
    t0 = time.perf_counter()
    target: Any = req.candidate.target
    try:
        import templtune

        inst = req.candidate.instantiate()
        target = inst.target
        with _target_scope(target):
            module = templtune.build(inst.schedule, inst.args, target=target, **req.build_kwargs)
        return BuildReply(MeasureErrorNo.NO_ERROR, export_module(module), "",
                          time.perf_counter() - t0, arg_info(inst.args))
    except InstantiationError as exc:
        code = MeasureErrorNo.INSTANTIATION_ERROR
        detail = _detail(exc)
    except CodegenError as exc:
        code = (MeasureErrorNo.COMPILE_DEVICE if is_device_target(target)
                else MeasureErrorNo.COMPILE_HOST)
        detail = _detail(exc)
    except Exception as exc:  # noqa: BLE001 - any other failure is a host compile error
        code = MeasureErrorNo.COMPILE_HOST
        detail = _detail(exc)
    return BuildReply(code, None, detail, time.perf_counter() - t0)


_PICKLED = b"TEMPLTUNE-PICKLED-MODULE\n"


def export_module(module: Any) -> bytes:
    """Bytes that :func:`load_artifact` turns back into a callable module in another process:
    ``module.export()`` when the module type has it, else the pickled module (e.g. a CUDA
    module, which carries its compiled binary)."""
    export = getattr(module, "export", None)
    if export is not None:
        return bytes(export())
    import pickle

    # NOTE: a CUDA module keeps its kernel IR in the pickle when the emulator is selected
    # (CudaModule.__getstate__), so nothing here depends on the runtime choice.
    return _PICKLED + pickle.dumps(module)


def load_artifact(artifact: bytes) -> Any:
    """Inverse of :func:`export_module`."""
    if artifact.startswith(_PICKLED):
        import pickle

        return pickle.loads(artifact[len(_PICKLED):])
    from templtune.runtime import load_module

    return load_module(artifact)


class _target_scope:  # noqa: N801 - used like a function
    """``with target:`` when the target is a context manager, else nothing."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.entered = False

    def __enter__(self) -> None:
        enter = getattr(self.target, "__enter__", None)
        if enter is not None:
            enter()
            self.entered = True

    def __exit__(self, *exc: object) -> None:
        if self.entered:
            self.target.__exit__(*exc)

