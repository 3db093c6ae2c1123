"""Exception types shared by every layer.

Every error a user can trigger derives from :class:`TempltuneError`, so callers can catch one type;
each subclass names a layer so that the measurement code can map failures to error codes by type,
never by parsing messages.
"""

from __future__ import annotations


class TempltuneError(Exception):
    """Base class of every templtune error."""


class DTypeError(TempltuneError, TypeError):
    """An unknown dtype string, or operands whose dtypes cannot be combined."""


class ExprError(TempltuneError, ValueError):
    """A malformed tensor expression (bad shape, wrong number of indices, ...)."""


class ScheduleError(TempltuneError):
    """An illegal schedule primitive; the message names the stage and the axis."""


class LoweringError(TempltuneError):
    """Lowering a schedule to loop IR failed, or the loop-IR verifier rejected the result."""


class CodegenError(TempltuneError):
    """Rendering or compiling generated code failed (LLVM verifier, nvcc, ...)."""


class TargetError(TempltuneError, ValueError):
    """An unknown or malformed target string, or an operation the target does not support."""


class RuntimeCallError(TempltuneError, ValueError):
    """A built function was called with arguments of the wrong number, shape or dtype."""


class InstantiationError(TempltuneError):
    """A template could not be instantiated for a configuration (invalid knob combination,
    resource limit exceeded). Maps to ``MeasureErrorNo.INSTANTIATION_ERROR``."""
