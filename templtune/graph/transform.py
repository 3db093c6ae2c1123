"""``PassContext``: the build options of a network (TVM's ``tvm.transform.PassContext``).

Honoured: ``opt_level`` (0 disables operator fusion, as Relay's FuseOps), ``disabled_pass``
(``"FuseOps"``), and the config keys ``relay.backend.use_auto_scheduler`` (False makes
``relay.build`` ignore auto-scheduler records; templtune uses them by default when an
``ApplyHistoryBest`` is active, where TVM needs the flag) and ``relay.FuseOps.max_depth`` (the
most operators in one fused group, default 256), and templtune's ``templtune.graph.use_templates``
(False: no AutoTVM template implementations, only auto-scheduler records and default
schedules), ``templtune.graph.fuse_epilogues`` (False: a template's group runs its
element-wise tail as a second kernel instead of in the template's output stage) and
``templtune.graph.alter_layout`` (False: no ``AlterOpLayout``, which otherwise
runs at ``opt_level >= 3``: NCHW[x]c convolutions, see :mod:`templtune.graph.alter_layout`).
An unknown config key is an error naming it. ``trace(mod, info, is_before)`` is
called around each pass ``relay.build`` runs (``AlterOpLayout``, ``FuseOps``) and around each
:class:`Pass` run.

:class:`Pass` and :class:`Sequential` are TVM's module passes (``tvm.transform.Sequential``):
a pass is called on a network and returns a new one; a ``Sequential`` runs only the passes
the current context enables (``opt_level`` at most the context's, or named in
``required_pass``; never those in ``disabled_pass``), as TVM's does.
"""

from __future__ import annotations

import contextvars
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .op import GraphError

_KNOWN = {"relay.backend.use_auto_scheduler": bool, "relay.FuseOps.max_depth": int,
          "templtune.graph.use_templates": bool, "templtune.graph.fuse_epilogues": bool,
          "templtune.graph.alter_layout": bool}
_CURRENT: contextvars.ContextVar[PassContext | None] = contextvars.ContextVar(
    "templtune_pass_context", default=None)


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PassInfo:
    """What a ``PassContext(trace=...)`` hook is told about a pass (TVM's ``PassInfo``)."""

    opt_level: int
    name: str
    required: tuple[str, ...] = ()


class PassContext:
    """Options for building networks, used as ``with PassContext(opt_level=3, config={...}):``."""

    def __init__(self, opt_level: int = 2, required_pass: Any = None, disabled_pass: Any = None,
                 instruments: Any = None, config: dict[str, Any] | None = None,
                 trace: Callable[[Any, PassInfo, bool], None] | None = None) -> None:
        if not isinstance(opt_level, int) or not 0 <= opt_level <= 4:
            raise GraphError(f"opt_level must be an int in 0..4, got {opt_level!r}")
        self.opt_level = opt_level
        self.required_pass = tuple(required_pass or ())
        self.disabled_pass = tuple(disabled_pass or ())
        self.config: dict[str, Any] = {}
        for key, value in (config or {}).items():
            kind = _KNOWN.get(key)
            if kind is None:
                raise GraphError(f"unknown PassContext config {key!r}; known: {sorted(_KNOWN)}")
            self.config[key] = kind(value)
        # NOTE: TVM's trace hook: called as trace(module, PassInfo, is_before) around each pass
        self.trace = trace
        self._token: Any = None

    def run_pass(self, name: str, opt_level: int, mod: Any, fn: Callable[[], T],
                 required: tuple[str, ...] = ()) -> T:
        """Run ``fn`` (the pass ``name`` on ``mod``), calling :attr:`trace` before and after."""
        info = PassInfo(opt_level, name, required)
        if self.trace is not None:
            self.trace(mod, info, True)
        out = fn()
        if self.trace is not None:
            self.trace(mod, info, False)
        return out

    def enabled(self, name: str, opt_level: int) -> bool:
        """Whether a ``Sequential`` under this context runs the pass ``name`` of ``opt_level``."""
        if name in self.disabled_pass:
            return False
        return opt_level <= self.opt_level or name in self.required_pass

    @staticmethod
    def current() -> PassContext:
        """The innermost active context (a default one when none is active)."""
        return _CURRENT.get() or PassContext()

    @property
    def fuse(self) -> bool:
        return self.opt_level >= 1 and "FuseOps" not in self.disabled_pass

    @property
    def max_fuse_depth(self) -> int:
        return int(self.config.get("relay.FuseOps.max_depth", 256))

    @property
    def use_templates(self) -> bool:
        return bool(self.config.get("templtune.graph.use_templates", True))

    @property
    def alter_layout(self) -> bool:
        """Whether ``relay.build`` runs ``AlterOpLayout`` (NCHW[x]c convolutions, blocked
        activations): at ``opt_level >= 3`` with templates on, unless the pass is disabled
        or ``templtune.graph.alter_layout`` is False."""
        return (self.opt_level >= 3 and "AlterOpLayout" not in self.disabled_pass
                and self.use_templates
                and bool(self.config.get("templtune.graph.alter_layout", True)))

    @property
    def extracts_blocked(self) -> bool:
        """Whether task extraction gives convolutions their NCHW[x]c tasks: as TVM, tasks are
        extracted as an ``opt_level=3`` build runs them, whatever this context's level (the
        pass's switches still apply)."""
        return ("AlterOpLayout" not in self.disabled_pass and self.use_templates
                and bool(self.config.get("templtune.graph.alter_layout", True)))

    @property
    def fuse_epilogues(self) -> bool:
        return bool(self.config.get("templtune.graph.fuse_epilogues", True))

    @property
    def use_auto_scheduler(self) -> bool:
        return bool(self.config.get("relay.backend.use_auto_scheduler", True))

    @property
    def auto_scheduler_records(self) -> bool:
        """Whether ``relay.build`` takes auto-scheduler records here: they are on and an
        ``auto_scheduler.ApplyHistoryBest`` is active. Rewrites of the network that would change
        the groups those records were tuned on (AlterOpLayout, FuseAttention) then stay off."""
        from templtune.auto_scheduler.dispatcher import ApplyHistoryBest

        return self.use_auto_scheduler and ApplyHistoryBest.current() is not None

    def __enter__(self) -> PassContext:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)


class Pass(ABC):
    """A module pass (TVM's ``tvm.transform.Pass``): ``new_mod = pass_(mod)``.

    Subclasses set ``name`` and ``opt_level`` and implement :meth:`transform`. Calling a pass
    runs it whatever the context's ``opt_level`` (as in TVM); :class:`Sequential` filters."""

    name: str = "Pass"
    opt_level: int = 0
    required: tuple[str, ...] = ()

    @abstractmethod
    def transform(self, mod: Any) -> Any:
        """The pass's result on ``mod`` (a new network; ``mod`` is not changed)."""

    def __call__(self, mod: Any) -> Any:
        return PassContext.current().run_pass(self.name, self.opt_level, mod,
                                              lambda: self.transform(mod), self.required)

    @property
    def info(self) -> PassInfo:
        return PassInfo(self.opt_level, self.name, self.required)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, opt_level={self.opt_level})"


class Sequential(Pass):
    """Passes run in order (``tvm.transform.Sequential(passes, opt_level, name, required)``),
    skipping those the current :class:`PassContext` does not enable."""

    def __init__(self, passes: Any = None, opt_level: int = 0, name: str = "sequential",
                 required: Any = None) -> None:
        self.passes = tuple(passes or ())
        for p in self.passes:
            if not isinstance(p, Pass):
                raise GraphError(f"Sequential takes passes, got {type(p).__name__}")
        self.opt_level, self.name = int(opt_level), name
        self.required = tuple(required or ())

    def transform(self, mod: Any) -> Any:
        pc = PassContext.current()
        for p in self.passes:
            if pc.enabled(p.name, p.opt_level):
                mod = p(mod)
        return mod
