"""Generic traversal of expression and statement trees.

Nodes are dataclasses, so children are found from their fields: any field holding a ``PrimExpr``,
a ``Stmt`` or a tuple of them is a child. Passes subclass :class:`Mutator` / :class:`Visitor` and
register handlers (``@handles(Var)``) only for the nodes they care about; each class gets a
:class:`~templtune.te.dispatch.Dispatch` table, and everything else is rebuilt (or walked)
generically, so a new node kind needs no change here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from templtune.te.dispatch import Dispatch, handles, method_tables
from templtune.te.expr import BinOp, FloatImm, IntImm, IterVar, PrimExpr, TensorLoad, Var

_NODE_TYPES: dict[type, bool] = {}


def _is_node(x: Any) -> bool:
    # Stmt lives in a higher layer; duck-type on the base class name to keep imports downward.
    # NOTE: the answer depends on the type only; cached per type because every traversal asks
    # it for every field value (it dominated lowering time when it scanned the MRO each call).
    cls = type(x)
    r = _NODE_TYPES.get(cls)
    if r is None:
        r = issubclass(cls, PrimExpr) or any(c.__name__ == "Stmt" for c in cls.__mro__)
        _NODE_TYPES[cls] = r
    return r


_FIELDS: dict[type, tuple[str, ...]] = {}
_INIT: dict[type, tuple[tuple[str, ...], bool]] = {}


def _replace(node: Any, changes: dict[str, Any]) -> Any:
    """``dataclasses.replace(node, **changes)`` without re-reading the field list each call."""
    cls = type(node)
    info = _INIT.get(cls)
    if info is None:
        fs = dataclasses.fields(node)
        info = (tuple(f.name for f in fs if f.init), all(f.init for f in fs))
        _INIT[cls] = info
    names, all_init = info
    if not all_init and any(n not in names for n in changes):
        return dataclasses.replace(node, **changes)  # raises its usual error
    return cls(*[changes[n] if n in changes else getattr(node, n) for n in names])


def child_fields(node: Any) -> tuple[str, ...]:
    """Names of the fields of ``node`` that may hold child nodes (cached per class)."""
    cls = type(node)
    names = _FIELDS.get(cls)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(node) if not f.name.startswith("_"))
        _FIELDS[cls] = names
    return names


def _child_list(node: Any) -> list[Any]:
    nt = _NODE_TYPES
    if type(node) is BinOp and nt.get(type(node.a)) and nt.get(type(node.b)):
        return [node.a, node.b]  # NOTE: the commonest node, without the field loop
    out: list[Any] = []
    names = _FIELDS.get(type(node))
    for name in child_fields(node) if names is None else names:
        v = getattr(node, name)
        if isinstance(v, tuple):
            out.extend(x for x in v if _is_node(x))
        else:
            isn = nt.get(type(v))
            if isn if isn is not None else _is_node(v):
                out.append(v)
    return out


def children(node: Any) -> Iterator[Any]:
    return iter(_child_list(node))


def _same_node(functor: Any, node: Any) -> Any:
    return node


def _class_table(cls: type, default: Callable[..., Any]) -> Dispatch[Any]:
    """The dispatch table of a functor class: its own and inherited ``@handles`` methods (the
    most derived definition of each method name wins)."""
    for name, attr in vars(cls).items():
        if (name.startswith("visit_") and name[6:7].isupper() and callable(attr)
                and not getattr(attr, "_handles", None)):
            raise TypeError(f"{cls.__qualname__}.{name}: handlers are chosen by node type; "
                            f"decorate it with @handles(NodeType)")
    table = method_tables(cls, {"visit": default})["visit"]
    if default is Mutator.generic:
        # NOTE: Mutator.generic returns a leaf (no child fields) as it is
        for leaf in (IntImm, FloatImm, Var):
            if leaf not in table._table:
                table.register(leaf)(_same_node)
    return table


class Visitor:
    """Pre-order walk; register handlers with ``@handles(NodeType)`` and call
    ``self.generic(node)`` in them to continue into children."""

    _dispatch: Dispatch[Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._dispatch = _class_table(cls, cls.generic)

    @classmethod
    def register_handler(cls, node_type: type, fn: Callable[..., Any]) -> None:
        """Add a handler after the class is defined (for node types of a higher layer),
        also to subclasses that have none of their own for ``node_type``."""
        previous = cls._dispatch._table.get(node_type)
        cls._dispatch.register(node_type)(fn)
        for sub in cls.__subclasses__():
            if sub._dispatch._table.get(node_type) is previous:
                sub.register_handler(node_type, fn)

    def visit(self, node: Any) -> None:
        self._dispatch(self, node)

    def generic(self, node: Any) -> None:
        for c in children(node):
            self.visit(c)


class Mutator:
    """Bottom-up rebuild; register handlers with ``@handles(NodeType)`` returning the new node.
    The generic path rebuilds a node only when a child changed, so unchanged subtrees keep
    identity."""

    _dispatch: Dispatch[Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._dispatch = _class_table(cls, cls.generic)

    register_handler: Any = classmethod(Visitor.register_handler.__func__)  # type: ignore[attr-defined]

    def visit(self, node: Any) -> Any:
        # NOTE: one dict lookup per node: the table caches the handler per node class
        fn = self._dispatch.lookup(type(node))
        return fn(self, node)  # type: ignore[misc]

    def generic(self, node: Any) -> Any:
        visit = self.visit
        nt = _NODE_TYPES
        if type(node) is BinOp and nt.get(type(node.a)) and nt.get(type(node.b)):
            # NOTE: the commonest node, rebuilt without the field loop (same result)
            a, b = visit(node.a), visit(node.b)
            if a is node.a and b is node.b:
                return node
            return BinOp(node.op, a, b, node.dtype)
        changes: dict[str, Any] = {}
        names = _FIELDS.get(type(node))
        for name in child_fields(node) if names is None else names:
            v = getattr(node, name)
            if isinstance(v, tuple):
                if any(_is_node(x) for x in v):
                    nv = tuple(visit(x) if _is_node(x) else x for x in v)
                    if any(a is not b for a, b in zip(nv, v)):
                        changes[name] = nv
                continue
            isn = nt.get(type(v))
            if isn if isn is not None else _is_node(v):
                nv = visit(v)
                if nv is not v:
                    changes[name] = nv
        return _replace(node, changes) if changes else node


Visitor._dispatch = Dispatch("Visitor.visit", default=Visitor.generic)
Mutator._dispatch = _class_table(Mutator, Mutator.generic)


class _Substituter(Mutator):
    def __init__(self, vmap: Mapping[Var, PrimExpr]) -> None:
        self.vmap = vmap

    @handles(Var)
    def visit_var(self, node: Var) -> PrimExpr:
        return self.vmap.get(node, node)


def substitute(node: Any, vmap: Mapping[Var, PrimExpr]) -> Any:
    """Replace variables by expressions everywhere in ``node`` (an expression or a statement)."""
    if not vmap:
        return node
    return _Substituter(vmap).visit(node)


def post_order(node: Any) -> Iterator[Any]:
    """All nodes of the tree, children before parents."""
    # NOTE: built as a list (a pre-order walk that visits the last child first, reversed: the
    # same sequence as a post-order walk), with the commonest leaves and BinOp handled without
    # the field loop; much cheaper than a generator with a (node, done) stack
    out: list[Any] = []
    stack = [node]
    nt = _NODE_TYPES
    append, pop, push, extend = out.append, stack.pop, stack.append, stack.extend
    while stack:
        n = pop()
        append(n)
        t = type(n)
        if t is Var or t is IntImm or t is FloatImm:
            continue
        if t is BinOp and nt.get(type(n.a)) and nt.get(type(n.b)):
            push(n.a)
            push(n.b)
            continue
        extend(_child_list(n))
    out.reverse()
    return iter(out)


def collect(node: Any, pred: Callable[[Any], bool]) -> list[Any]:
    return [n for n in post_order(node) if pred(n)]


def collect_vars(node: Any) -> set[Var]:
    return {n for n in post_order(node) if isinstance(n, Var)}


def collect_tensor_loads(node: Any) -> list[Any]:
    """Tensors read by ``TensorLoad`` nodes in ``node``, in first-seen order."""
    seen: dict[Any, None] = {}
    for n in post_order(node):
        if isinstance(n, TensorLoad):
            seen.setdefault(n.tensor, None)
    return list(seen)


def structural_equal(a: Any, b: Any, vmap: dict[Var, Var] | None = None) -> bool:
    """True when ``a`` and ``b`` are the same tree (variables compared by identity unless mapped
    through ``vmap``)."""
    if a is b:
        return True
    if isinstance(a, Var) or isinstance(b, Var):
        return vmap is not None and vmap.get(a) is b  # type: ignore[arg-type]
    if type(a) is not type(b):
        return False
    if isinstance(a, (IterVar,)):
        return a is b
    if not dataclasses.is_dataclass(a):
        return bool(a == b)
    for f in dataclasses.fields(a):
        if f.name.startswith("_"):
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, tuple) and isinstance(y, tuple):
            if len(x) != len(y) or not all(structural_equal(p, q, vmap) for p, q in zip(x, y)):
                return False
        elif _is_node(x) or _is_node(y):
            if not structural_equal(x, y, vmap):
                return False
        elif x is not y and x != y:
            return False
    return True
