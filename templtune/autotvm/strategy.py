"""Op strategies: which AutoTVM template implements which network op, on which targets.

Each template module registers, beside its own definition::

    strategy.register(op="nn.dense", keys=("cpu",), template="dense", plevel=10,
                      when=lambda call: len(call.inputs) == 2,
                      workloads=_workloads,      # OpCall -> template argument tuples
                      transform=_transform,      # template args -> weight transform (or None)
                      fallback=_fallback,        # what runs without a tuning record
                      epilogue=True,             # takes a fused element-wise tail
                      tuned_as=_plain_args)      # args -> the task whose records apply
    strategy.catalog(TemplateInfo("dense", "x86", ...))   # the command line's entry

Consumers (``relay.build``, ``autotvm.task.extract_from_program``, ``templtune templates``, the
tests and the benchmarks) ask this registry; none imports a template module by name. The
template library is imported once, by :func:`load_templates`.

A strategy registered with ``epilogue=True`` declares that its template takes the keyword
``epilogue`` (:class:`~templtune.autotvm.epilogue.Epilogue`): the group's element-wise tail,
computed in the template's output stage. :func:`instantiate` passes it; the workload key, hence
every tuning record, stays the anchor's.

``tuned_as`` maps a variant's arguments to those of the task that configures it (a Winograd
template taking pre-transformed weights runs the configs tuned on the plain task, whose space
is the same): the variant's ``workload`` is that task's, so record lookups, fallback warnings
and task extraction all see the plain task.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from templtune.autotvm import env
from templtune.autotvm.dispatcher import ApplyConfig, DispatchContext
from templtune.autotvm.epilogue import Epilogue
from templtune.autotvm.task.target_compat import as_target, target_scope
from templtune.autotvm.task.task import _TRACE, TASK_TABLE, args_to_workload, trace_workload
from templtune.errors import TempltuneError

__all__ = ["OpCall", "Implementation", "Strategy", "TemplateInfo", "StrategyError", "Epilogue",
           "register",
           "catalog", "catalog_entries", "strategies", "implementations", "select",
           "instantiate", "current_config", "weight_transform", "load_templates"]

WeightTransform = Callable[[np.ndarray], np.ndarray]

#: the template library (imported by name here only; see :func:`load_templates`)
TEMPLATES_PACKAGE = "templtune.templates"


class StrategyError(TempltuneError, ValueError):
    """A strategy registration or lookup that cannot be honoured (names the op or template)."""


@dataclass(frozen=True, slots=True)
class OpCall:
    """A network op call as strategies see it: op name, input shapes, dtype, output shape and
    attributes (no graph types, so templates need not import the network layer)."""

    op: str
    inputs: tuple[tuple[int, ...], ...]
    dtype: str
    out_shape: tuple[int, ...]
    attrs: tuple[tuple[str, Any], ...] = ()

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)


@dataclass(frozen=True, slots=True)
class Implementation:
    """One way to run an op call: template ``template`` on ``args``; ``transform`` turns the
    op's input ``weight`` (a constant) into the layout the template takes (None: as is);
    ``epilogue``: the template takes a fused element-wise tail (see :func:`instantiate`);
    ``tuned_as``: the arguments whose tuning records configure these (None: ``args``), so a
    variant taking pre-transformed weights runs the configs tuned on its plain task."""

    template: str
    args: tuple[Any, ...]
    transform: WeightTransform | None = field(default=None, compare=False)
    weight: int = 1
    epilogue: bool = field(default=False, compare=False)
    tuned_as: tuple[Any, ...] | None = None

    @property
    def name(self) -> str:
        return self.template

    @property
    def workload(self) -> tuple[Any, ...]:
        """The workload of the tuning task (and records) that configures this implementation."""
        return args_to_workload(self.args if self.tuned_as is None else self.tuned_as,
                                self.template)


def _last(call: OpCall, target: Any, impls: Sequence[Implementation]) -> Implementation:
    return impls[-1]


@dataclass(frozen=True, slots=True)
class Strategy:
    """What a template declares about the op it implements.

    ``workloads(call)`` lists the template argument tuples worth trying (the one taking the
    weight as is last); ``transform(args)`` the weight transform those arguments need;
    ``fallback(call, target, impls)`` picks among ``impls`` (this strategy's usable ones) what
    runs when no implementation has a tuning record. Higher ``plevel`` wins that choice;
    ``untuned_plevel(call)``, where given, replaces it there (a template that beats the others'
    fallbacks on some shapes only, such as Winograd, takes those shapes without a record).
    ``epilogue``: the template takes the keyword ``epilogue`` (a fused element-wise tail).
    ``tuned_as(args)``: the arguments of the task whose records configure ``args`` (None:
    ``args`` themselves); the two must define the same config space.
    """

    op: str
    keys: frozenset[str]
    template: str
    plevel: int
    when: Callable[[OpCall], bool]
    workloads: Callable[[OpCall], Sequence[tuple[Any, ...]]]
    transform: Callable[[tuple[Any, ...]], WeightTransform | None]
    fallback: Callable[[OpCall, Any, Sequence[Implementation]], Implementation] = _last
    weight: int = 1
    epilogue: bool = False
    tuned_as: Callable[[tuple[Any, ...]], tuple[Any, ...] | None] | None = None
    untuned_plevel: Callable[[OpCall], int] | None = None

    def fallback_level(self, call: OpCall) -> int:
        """This strategy's rank for ``call`` when no implementation has a record."""
        return self.plevel if self.untuned_plevel is None else self.untuned_plevel(call)

    def implementations(self, call: OpCall) -> list[Implementation]:
        if not self.when(call):
            return []
        return [self.implementation(tuple(a)) for a in self.workloads(call)]

    def implementation(self, args: tuple[Any, ...]) -> Implementation:
        """The implementation of this strategy's template on ``args``."""
        tuned = None if self.tuned_as is None else self.tuned_as(args)
        return Implementation(self.template, args, self.transform(args), self.weight,
                              self.epilogue, None if tuned == args else tuned)


@dataclass(frozen=True, slots=True)
class TemplateInfo:
    """One template as the command line shows it (carried by the template's own module)."""

    name: str
    family: str
    params: tuple[str, ...]
    example: tuple[int, ...]
    summary: str
    n_required: int = -1  # parameters without a default (-1: all)
    target: str = "llvm"

    def check_args(self, args: tuple[int, ...]) -> None:
        """Raise ``ValueError`` (one clear line) if ``args`` do not fit the parameters."""
        need = len(self.params) if self.n_required < 0 else self.n_required
        if not need <= len(args) <= len(self.params):
            want = ",".join(self.params)
            raise ValueError(f"template {self.name!r} takes {need}"
                             f"{'' if need == len(self.params) else f'-{len(self.params)}'}"
                             f" arguments ({want}), got {len(args)}: "
                             f"{','.join(str(a) for a in args)}")

    @property
    def target_keys(self) -> frozenset[str]:
        """The keys of the template's target (``{"cpu"}``, ``{"cuda", "gpu"}``)."""
        return target_keys(self.target)

    def supports(self, target: Any) -> bool:
        """Whether the template can be tuned for ``target``: the two share a target key.

        Raises
        ------
        TargetError
            ``target`` is not a valid target string.
        """
        return bool(self.target_keys & target_keys(target))


_STRATEGIES: list[Strategy] = []
#: template name -> catalogue entry (filled by :func:`catalog`)
CATALOG: dict[str, TemplateInfo] = {}


def _no_transform(args: tuple[Any, ...]) -> None:
    return None


def register(op: str, keys: Sequence[str], template: str, plevel: int = 10,
             when: Callable[[OpCall], bool] | None = None,
             workloads: Callable[[OpCall], Sequence[tuple[Any, ...]]] | None = None,
             transform: Callable[[tuple[Any, ...]], WeightTransform | None] | None = None,
             fallback: Callable[[OpCall, Any, Sequence[Implementation]], Implementation]
             | None = None, weight: int = 1, epilogue: bool = False,
             tuned_as: Callable[[tuple[Any, ...]], tuple[Any, ...] | None] | None = None,
             untuned_plevel: Callable[[OpCall], int] | None = None) -> Strategy:
    """Declare that template ``template`` implements network op ``op`` on targets with any of
    ``keys`` (``"cpu"``, ``"cuda"``, ``"gpu"``); see :class:`Strategy` for the callables.
    ``epilogue=True``: the template function takes the keyword-only argument ``epilogue``.

    Raises
    ------
    StrategyError
        If ``workloads`` is missing or the (op, template) pair is already registered.
    """
    if workloads is None:
        raise StrategyError(f"strategy {template!r} for {op!r} needs a workloads function")
    if any(s.op == op and s.template == template for s in _STRATEGIES):
        raise StrategyError(f"template {template!r} is already registered for {op!r}")
    s = Strategy(op, frozenset(keys), template, int(plevel), when or (lambda call: True),
                 workloads, transform or _no_transform, fallback or _last, weight,
                 bool(epilogue), tuned_as, untuned_plevel)
    _STRATEGIES.append(s)
    return s


def catalog(info: TemplateInfo) -> TemplateInfo:
    """Add a template's command-line entry (its module calls this beside the template)."""
    if info.name in CATALOG and CATALOG[info.name] != info:
        raise StrategyError(f"a different catalogue entry for {info.name!r} exists")
    CATALOG[info.name] = info
    return info


_loaded = False


def load_templates() -> None:
    """Import the template library once (its modules register their strategies).

    NOTE: the only import of ``templtune.templates`` below the command line; the library
    (a top-level folder above every layer) exposes one entry, ``load_all``.
    """
    global _loaded
    if not _loaded:
        importlib.import_module(TEMPLATES_PACKAGE).load_all()
        _loaded = True


def catalog_entries(family: str | None = None, target: Any = None) -> dict[str, TemplateInfo]:
    """The catalogue (name -> entry) of every packaged template, or of one ``family``, or of
    those tunable for ``target`` (sharing one of its keys)."""
    load_templates()
    return {k: v for k, v in CATALOG.items() if (family is None or v.family == family)
            and (target is None or v.supports(target))}


def target_keys(target: Any) -> frozenset[str]:
    """The keys of ``target`` (default ``llvm``): ``{"cpu"}`` for llvm, ``{"cuda", "gpu"}``
    for cuda."""
    tgt = as_target(target if target is not None else "llvm")
    return frozenset(getattr(tgt, "keys", ()) or ())


_keys = target_keys


def strategies(op: str | None = None, target: Any = None) -> list[Strategy]:
    """Registered strategies (of ``op``, for ``target``'s keys), highest plevel first, then in
    registration order."""
    load_templates()
    keys = None if target is None else _keys(target)
    found = [s for s in _STRATEGIES
             if (op is None or s.op == op) and (keys is None or s.keys & keys)]
    return sorted(found, key=lambda s: -s.plevel)


def implementations(call: OpCall, target: Any = None, allow_transform: bool = True
                    ) -> list[Implementation]:
    """Every implementation of ``call`` on ``target`` (default ``llvm``), best strategy first;
    only those taking the weight as is when not ``allow_transform``."""
    out = []
    for s in strategies(call.op, target if target is not None else "llvm"):
        out += [i for i in s.implementations(call) if allow_transform or i.transform is None]
    return out


def select(call: OpCall, target: Any, allow_transform: bool = True) -> Implementation | None:
    """The implementation to run: the lowest recorded cost in the active dispatch context,
    else the fallback of the strategy that applies with the highest untuned plevel (the first
    of equals in :func:`strategies`' order; None: no template does)."""
    tgt = as_target(target)
    by_strategy = [(s, [i for i in s.implementations(call)
                        if allow_transform or i.transform is None])
                   for s in strategies(call.op, tgt)]
    by_strategy = [(s, impls) for s, impls in by_strategy if impls]
    if not by_strategy:
        return None
    ctx = DispatchContext.current
    best, best_cost = None, float("inf")
    for _, impls in by_strategy:
        for i in impls:
            cost = ctx.query_cost(tgt, i.workload)
            if cost is not None and cost < best_cost:
                best, best_cost = i, cost
    if best is not None:
        return best
    s, impls = max(by_strategy, key=lambda si: si[0].fallback_level(call))
    return s.fallback(call, tgt, impls)


def instantiate(impl: Implementation, target: Any, epilogue: Epilogue | None = None,
                config: Any = None) -> tuple[Any, list[Any]]:
    """``(schedule, arg tensors)`` of ``impl`` under the active dispatch context, as calling
    the decorated template function does (a tracing task extraction records it); with
    ``config`` given, under that config instead (a layer whose config a graph pass chose).

    With ``epilogue`` the template computes it in its output stage: the arguments are the
    template's inputs, then the epilogue's extra inputs, then the fused output; the config is
    the one of the anchor's workload (``impl.workload``, unchanged).

    Raises
    ------
    StrategyError
        ``epilogue`` is given but the template does not take one.
    """
    if epilogue is not None and not impl.epilogue:
        raise StrategyError(f"template {impl.template!r} takes no fused epilogue "
                            f"({epilogue.name}); register it with epilogue=True")
    tmpl = TASK_TABLE.get(impl.template)
    if tmpl is None:
        load_templates()
        tmpl = TASK_TABLE.get(impl.template)
    if tmpl is None:
        raise StrategyError(f"no AutoTVM template named {impl.template!r} is registered")
    tgt = as_target(target)
    trace_workload(impl.workload)
    # NOTE: a tracing extraction records the task that configures impl (traced above), not
    # the template call's own workload (a pre-transformed variant's)
    token = _TRACE.set(None)
    try:
        with target_scope(tgt):
            cfg = config if config is not None else DispatchContext.current.query(
                tgt, impl.workload)
            with ApplyConfig(cfg):
                if epilogue is None:
                    return tmpl(*impl.args)
                return tmpl(*impl.args, epilogue=epilogue)
    finally:
        _TRACE.reset(token)


def current_config(impl: Implementation, target: Any) -> Any:
    """The config the active dispatch context gives ``impl`` (a fallback config has its knobs
    filled by instantiating the template once, silently)."""
    tgt = as_target(target)
    # NOTE: a probe: the fallback warning, and a tracing extraction's record, belong to the
    # workload that will actually run.
    token = _TRACE.set(None)
    try:
        with env.scope(silent=True):
            instantiate(impl, tgt)
            with target_scope(tgt):
                return DispatchContext.current.query(tgt, impl.workload)
    finally:
        _TRACE.reset(token)


def weight_transform(template: str, args: Sequence[Any]) -> WeightTransform | None:
    """The registered weight transform of template ``template`` with ``args`` (None: the
    template takes the weight as the op does)."""
    load_templates()
    for s in _STRATEGIES:
        if s.template == template:
            return s.transform(tuple(args))
    raise StrategyError(f"no strategy is registered for template {template!r}")
