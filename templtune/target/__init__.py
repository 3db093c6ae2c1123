"""Compilation targets, parsed from TVM-style strings.

``Target("llvm -mcpu=znver4 -num-cores=2")`` or ``Target("cuda -arch=sm_90")``. A target is an
immutable value; ``with Target(...):`` makes it the current one for :func:`templtune.build` and the
AutoTVM dispatch (scopes nest, and are per thread / per task via :mod:`contextvars`).

``target.capabilities`` is the machine behind it (:class:`~.record.Capabilities`: GPU or
not, vector ISA and registers, cores, CUDA limits), computed once per target; ``-mcpu`` and
``-mattr`` are checked against LLVM when the string is parsed (``-mcpu=native`` is the host).
"""

from __future__ import annotations

import contextvars
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from templtune.errors import TargetError

if TYPE_CHECKING:
    from templtune.target.record import Capabilities

__all__ = ["Capabilities", "Target", "TargetKind", "capabilities", "create"]


class TargetKind(str):
    """A target kind: the string ``"llvm"`` / ``"cuda"`` with TVM's ``.name``."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        # NOTE: the plain string's repr, so messages read "target kind 'cuda'" as before
        return repr(str.__str__(self))


# NOTE: one table per kind: option name -> converter. Unknown options are errors (TVM also rejects
# them), so that a typo such as "-num_cores" does not silently fall back to a default.
_INT, _STR, _BOOL = int, str, bool
_COMMON: dict[str, type] = {"keys": _STR, "tag": _STR, "libs": _STR, "model": _STR,
                            "host": _STR, "device": _STR}
_OPTIONS: dict[str, dict[str, type]] = {
    "llvm": {
        **_COMMON, "mcpu": _STR, "mtriple": _STR, "mattr": _STR, "num-cores": _INT,
        "opt-level": _INT, "fast-math": _BOOL, "mfloat-abi": _STR, "mabi": _STR,
    },
    "cuda": {
        **_COMMON, "arch": _STR, "max_threads_per_block": _INT, "max_shared_memory_per_block": _INT,
        "max_registers_per_block": _INT, "thread_warp_size": _INT, "max_num_threads": _INT,
        "registers_per_block": _INT,
    },
}
_KEYS = {"llvm": ("cpu",), "cuda": ("cuda", "gpu")}
_KIND_ALIASES = {"c": "llvm", "x86": "llvm", "cpu": "llvm"}
# NOTE: per-architecture defaults; every NVIDIA arch since Kepler shares these except shared
# memory opt-in sizes, which need a dynamic attribute we do not use (48 KiB static limit).
_CUDA_DEFAULTS: dict[str, Any] = {
    "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
    "max_registers_per_block": 65536, "thread_warp_size": 32,
}
_ALIASES = {"num_cores": "num-cores", "max-threads-per-block": "max_threads_per_block",
            "max-shared-memory-per-block": "max_shared_memory_per_block"}

_CURRENT: contextvars.ContextVar[tuple[Target, ...]] = contextvars.ContextVar(
    "templtune_target_stack", default=())


def _parse_value(kind: str, key: str, raw: str | None) -> Any:
    conv = _OPTIONS[kind][key]
    if conv is _BOOL:
        if raw is None or raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise TargetError(f"option -{key} of target {kind!r} expects a boolean, got {raw!r}")
    if raw is None:
        raise TargetError(f"option -{key} of target {kind!r} needs a value (-{key}=...)")
    if conv is _INT:
        try:
            return int(raw)
        except ValueError:
            raise TargetError(
                f"option -{key} of target {kind!r} expects an integer, got {raw!r}") from None
    return raw


@dataclass(frozen=True, slots=True, eq=False)
class _Parsed:
    kind: str
    attrs: dict[str, Any] = field(default_factory=dict)


def _parse(text: str) -> _Parsed:
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise TargetError(f"malformed target string {text!r}: {e}") from None
    if not words:
        raise TargetError("empty target string")
    kind = _KIND_ALIASES.get(words[0], words[0])
    if kind not in _OPTIONS:
        raise TargetError(f"unknown target kind {kind!r} in {text!r}; "
                          f"known kinds: {', '.join(sorted(_OPTIONS))}")
    attrs: dict[str, Any] = {}
    for w in words[1:]:
        if not w.startswith("-"):
            raise TargetError(f"unexpected word {w!r} in target {text!r} (options start with '-')")
        key, eq, raw = w.lstrip("-").partition("=")
        key = _ALIASES.get(key, key)
        if key not in _OPTIONS[kind]:
            raise TargetError(f"unknown option -{key} for target kind {kind!r} in {text!r}")
        attrs[key] = _parse_value(kind, key, raw if eq else None)
    return _Parsed(kind, attrs)


class Target:
    """A compilation target.

    Parameters
    ----------
    target : str or Target
        A TVM-style string: a kind (``llvm`` or ``cuda``) followed by ``-key=value`` options.
    host : str or Target, optional
        The host target of a device target (defaults to ``llvm`` for cuda).

    Attributes
    ----------
    kind : TargetKind
        ``"llvm"`` or ``"cuda"`` (a str; ``kind.name`` as in TVM).
    keys : tuple of str
        ``("cpu",)`` for llvm, ``("cuda", "gpu")`` for cuda.
    attrs : dict
        The options, with defaults filled in (for cuda: ``max_threads_per_block`` etc.).

    Raises
    ------
    TargetError
        A malformed string, an unknown kind or option, or a ``-mcpu`` / ``-mattr`` that LLVM
        does not know.

    Examples
    --------
    >>> t = Target("llvm -mcpu=znver4 -num-cores=2")
    >>> t.kind, t.attrs["num-cores"]
    ('llvm', 2)
    >>> with Target("cuda"):
    ...     Target.current().kind
    'cuda'
    """

    __slots__ = ("kind", "keys", "attrs", "host", "_text", "_tokens")
    kind: TargetKind
    keys: tuple[str, ...]
    attrs: dict[str, Any]
    host: Target | None
    _text: str

    def __init__(self, target: str | Target, host: str | Target | None = None) -> None:
        if isinstance(target, Target):
            self.kind, self.keys, self.attrs = target.kind, target.keys, dict(target.attrs)
            self.host = target.host if host is None else Target(host)
            self._text = target._text
            self._tokens: list[contextvars.Token[tuple[Target, ...]]] = []
            return
        if not isinstance(target, str):
            raise TargetError(f"a target must be a string or a Target, got {type(target).__name__}")
        p = _parse(target)
        self.kind = TargetKind(p.kind)
        attrs = dict(p.attrs)
        if self.kind == "cuda":
            for k, v in _CUDA_DEFAULTS.items():
                attrs.setdefault(k, v)
            attrs.setdefault("max_num_threads", attrs["max_threads_per_block"])
        keys = tuple(attrs.pop("keys").split(",")) if "keys" in attrs else _KEYS[self.kind]
        self.keys = keys
        self.attrs = attrs
        if host is None and self.kind == "cuda":
            host = "llvm"
        self.host = None if host is None else Target(host)
        self._text = target
        self._tokens = []
        if self.kind == "llvm":
            _check_llvm(attrs)

    # ------------------------------------------------------------------ convenience fields
    @property
    def capabilities(self) -> Capabilities:
        """The machine of this target (computed once per target string)."""
        return _capabilities(str(self), None if self.host is None else str(self.host))

    @property
    def mcpu(self) -> str | None:
        return self.attrs.get("mcpu")

    @property
    def mtriple(self) -> str | None:
        return self.attrs.get("mtriple")

    @property
    def mattr(self) -> str | None:
        return self.attrs.get("mattr")

    @property
    def num_cores(self) -> int | None:
        return self.attrs.get("num-cores")

    @property
    def arch(self) -> str | None:
        return self.attrs.get("arch")

    @property
    def max_threads_per_block(self) -> int | None:
        return self.attrs.get("max_threads_per_block")

    @property
    def max_shared_memory_per_block(self) -> int | None:
        return self.attrs.get("max_shared_memory_per_block")

    @property
    def max_registers_per_block(self) -> int | None:
        return self.attrs.get("max_registers_per_block")

    @property
    def thread_warp_size(self) -> int | None:
        return self.attrs.get("thread_warp_size")

    @property
    def model(self) -> str:
        return str(self.attrs.get("model", "unknown"))

    # ------------------------------------------------------------------------- printing
    def __str__(self) -> str:
        parts: list[str] = [self.kind.name]
        defaults = _CUDA_DEFAULTS if self.kind == "cuda" else {}
        for k, v in self.attrs.items():
            if defaults.get(k) == v or (k == "max_num_threads"
                                        and v == self.attrs.get("max_threads_per_block")):
                continue
            if isinstance(v, bool):
                v = "1" if v else "0"
            parts.append(f"-{k}={v}")
        if self.keys != _KEYS[self.kind]:
            parts.append(f"-keys={','.join(self.keys)}")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = Target(other)
            except TargetError:
                return False
        return isinstance(other, Target) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    # -------------------------------------------------------------------------- context
    def __enter__(self) -> Target:
        self._tokens.append(_CURRENT.set(_CURRENT.get() + (self,)))
        return self

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._tokens.pop())

    @staticmethod
    def current(allow_none: bool = True) -> Target | None:
        """The innermost target of the enclosing ``with Target(...)`` scopes.

        Raises
        ------
        TargetError
            When no target is in scope and ``allow_none`` is false.
        """
        stack = _CURRENT.get()
        if stack:
            return stack[-1]
        if not allow_none:
            raise TargetError("no target in scope: use `with Target(...)` or pass target=")
        return None

    # ------------------------------------------------------------------------- pickling
    def __reduce__(self) -> tuple[Any, ...]:
        return (Target, (self._text_for_pickle(), None if self.host is None else str(self.host)))

    def _text_for_pickle(self) -> str:
        return str(self)


def kind_of(target: str | Target) -> TargetKind:
    """The kind of ``target``; of a string, its first word only (``"llvm -mcpu=core-avx2"`` ->
    ``llvm``, options not parsed: TVM's ``tvm.device`` reads no more).

    Raises
    ------
    TargetError
        An empty string or an unknown kind.
    """
    if isinstance(target, Target):
        return target.kind
    words = str(target).split()
    if not words:
        raise TargetError("empty target string")
    kind = _KIND_ALIASES.get(words[0], words[0])
    if kind not in _OPTIONS:
        raise TargetError(f"unknown target kind {kind!r} in {target!r}; "
                          f"known kinds: {', '.join(sorted(_OPTIONS))}")
    return TargetKind(kind)


def _check_llvm(attrs: dict[str, Any]) -> None:
    if not (attrs.get("mcpu") or attrs.get("mattr")):
        return
    from templtune.target.llvm_cpu import check_cpu_and_features, host_cpu

    host = host_cpu()
    triple = attrs.get("mtriple") or host.triple
    cpu = attrs.get("mcpu")
    if not cpu or cpu == "native":
        cpu = host.name if triple == host.triple else "generic"
    check_cpu_and_features(triple, cpu, attrs.get("mattr") or "")


@lru_cache(maxsize=256)
def _capabilities(text: str, host: str | None) -> Capabilities:
    from templtune.target.record import compute

    t = Target(text, host)
    return compute(t.kind.name, t.keys, t.attrs, None if t.host is None else t.host.attrs)


def capabilities(target: str | Target | None = None) -> Capabilities:
    """The capability record of ``target`` (a Target or string; None: the current scope's
    target, else ``llvm``, the host)."""
    return resolve(target).capabilities


def create(target: str | Target) -> Target:
    """Same as :class:`Target` (TVM's ``tvm.target.create``)."""
    return Target(target)


def resolve(target: str | Target | None, default: str = "llvm") -> Target:
    """``target`` as a Target; when None, the current scope's target, else ``default``."""
    if target is None:
        cur = Target.current(allow_none=True)
        return cur if cur is not None else Target(default)
    return target if isinstance(target, Target) else Target(target)


def __getattr__(name: str) -> Any:
    if name == "Capabilities":
        from templtune.target.record import Capabilities

        return Capabilities
    raise AttributeError(f"module 'templtune.target' has no attribute {name!r}")
