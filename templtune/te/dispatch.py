"""Per-node-type dispatch: one table from node type to function for every IR traversal.

Renderers, evaluators and passes register a handler per node class::

    EXPR = Dispatch("CUDA expression", missing=lambda node: CodegenError(...))

    @EXPR.register(IntImm)
    def _int(r: Renderer, x: IntImm) -> str: ...

    text = EXPR(renderer, node)

Classes whose handlers are methods (passes, renderers with state) mark them with
``@handles(NodeType, table="expr")`` and build their tables with :func:`method_tables`.

A lookup walks the node class's MRO once (a handler registered for a base class serves its
subclasses) and caches the answer per class, so dispatch costs one dict lookup per node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Dispatch", "handles", "method_tables"]

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")


class Dispatch(Generic[R]):
    """A table from node type to handler ``fn(ctx, node, *args) -> R``.

    Parameters
    ----------
    name : str
        What the table does (for error messages).
    default : callable, optional
        Handler for node types without an entry.
    missing : callable, optional
        ``missing(node)`` returns the exception raised for a node type without an entry and
        no ``default`` (a ``TypeError`` naming the table when omitted).
    """

    def __init__(self, name: str, default: Callable[..., R] | None = None,
                 missing: Callable[[Any], Exception] | None = None) -> None:
        self.name = name
        self.default = default
        self.missing = missing
        self._table: dict[type, Callable[..., R]] = {}
        self._cache: dict[type, Callable[..., R] | None] = {}

    def register(self, *types: type) -> Callable[[F], F]:
        """Decorator: ``fn`` handles nodes of each of ``types`` (and their subclasses)."""

        def deco(fn: F) -> F:
            for t in types:
                self._table[t] = fn
            self._cache.clear()
            return fn

        return deco

    def extend(self, name: str) -> Dispatch[R]:
        """A new table starting with this one's entries (later registrations override)."""
        child: Dispatch[R] = Dispatch(name, self.default, self.missing)
        child._table = dict(self._table)
        return child

    def lookup(self, cls: type) -> Callable[..., R] | None:
        """The handler for node class ``cls`` (nearest registered base), else the default."""
        try:
            return self._cache[cls]
        except KeyError:
            pass
        fn = next((self._table[c] for c in cls.__mro__ if c in self._table), self.default)
        self._cache[cls] = fn
        return fn

    def __contains__(self, cls: type) -> bool:
        return any(c in self._table for c in cls.__mro__)

    def __call__(self, ctx: Any, node: Any, *args: Any) -> R:
        fn = self._cache.get(type(node)) or self.lookup(type(node))
        if fn is None:
            if self.missing is not None:
                raise self.missing(node)
            raise TypeError(f"{self.name}: no handler for {type(node).__name__}")
        return fn(ctx, node, *args)


def handles(*types: type, table: str = "visit") -> Callable[[F], F]:
    """Method decorator: the method handles nodes of ``types`` in the class's ``table``
    (see :func:`method_tables`)."""

    def deco(fn: F) -> F:
        fn._handles = (*getattr(fn, "_handles", ()), (table, types))  # type: ignore[attr-defined]
        return fn

    return deco


def method_tables(cls: type, defaults: dict[str, Callable[..., Any] | None],
                  missing: dict[str, Callable[[Any], Exception]] | None = None
                  ) -> dict[str, Dispatch[Any]]:
    """One :class:`Dispatch` per table name for ``cls``, from the ``@handles`` methods of
    ``cls`` and its bases; the most derived definition of a method name wins, so a subclass
    overrides a handler by redefining the method."""
    missing = missing or {}
    tables: dict[str, Dispatch[Any]] = {
        name: Dispatch(f"{cls.__qualname__}.{name}", default=d, missing=missing.get(name))
        for name, d in defaults.items()}
    for klass in reversed(cls.__mro__):
        for attr_name, attr in vars(klass).items():
            for table, types in getattr(attr, "_handles", ()):
                tables[table].register(*types)(getattr(cls, attr_name))
    return tables
