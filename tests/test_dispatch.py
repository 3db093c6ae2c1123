"""The per-node-type dispatch table shared by renderers, evaluators and passes."""

from __future__ import annotations

import pytest

from templtune import te
from templtune.errors import CodegenError
from templtune.te.dispatch import Dispatch
from templtune.te.expr import BinOp, FloatImm, IntImm, PrimExpr, Var


class Base:
    pass


class Child(Base):
    pass


class GrandChild(Child):
    pass


def test_nearest_registered_base_wins_and_is_cached() -> None:
    table: Dispatch[str] = Dispatch("demo")
    table.register(Base)(lambda ctx, n: "base")
    table.register(Child)(lambda ctx, n: "child")
    assert table(None, Base()) == "base"
    assert table(None, GrandChild()) == "child"
    assert table.lookup(GrandChild) is table.lookup(Child)
    # a later registration invalidates cached answers
    table.register(GrandChild)(lambda ctx, n: "grand")
    assert table(None, GrandChild()) == "grand"


def test_missing_handler_raises_the_tables_error() -> None:
    table: Dispatch[str] = Dispatch("render", missing=lambda n: CodegenError(f"no {n!r}"))
    with pytest.raises(CodegenError, match="no 3"):
        table(None, 3)
    with pytest.raises(TypeError, match="plain: no handler for int"):
        Dispatch("plain")(None, 3)
    assert Dispatch("d", default=lambda ctx, n: "dflt")(None, 3) == "dflt"


def test_extend_copies_entries_and_overrides_locally() -> None:
    parent: Dispatch[str] = Dispatch("p")
    parent.register(PrimExpr)(lambda ctx, n: "expr")
    child = parent.extend("c")
    child.register(Var)(lambda ctx, n: "var")
    x = te.var("x")
    assert child(None, x) == "var" and parent(None, x) == "expr"
    assert child(None, x + 1) == "expr"
    assert BinOp in child and int not in child


def test_extra_arguments_are_passed_through() -> None:
    table: Dispatch[float] = Dispatch("scale")

    @table.register(IntImm, FloatImm)
    def _imm(k: float, n: IntImm | FloatImm, offset: float) -> float:
        return k * n.value + offset

    assert table(2.0, IntImm("int32", 3), 1.0) == 7.0


def test_functor_handlers_are_chosen_by_type_and_inherited() -> None:
    from templtune.te.functor import Mutator, handles

    class Double(Mutator):
        @handles(IntImm)
        def on_int(self, node: IntImm) -> IntImm:
            return IntImm(node.dtype, node.value * 2)

    class DoubleAndRenameVars(Double):
        @handles(Var)
        def on_var(self, node: Var) -> Var:
            return Var(node.name + "_r", node.dtype)

    x = te.var("x")
    out = DoubleAndRenameVars().visit(x * 3 + 1)
    assert str(out) == str(Var("x_r", "int32") * 6 + 2)
    assert Double().visit(x + 1).a is x  # leaves without a handler are kept as they are


def test_undecorated_visit_method_is_an_error() -> None:
    from templtune.te.functor import Mutator

    with pytest.raises(TypeError, match="@handles"):
        class Old(Mutator):
            def visit_Var(self, node: Var) -> Var:
                return node


def test_handler_registered_later_reaches_subclasses() -> None:
    from templtune.te.functor import Mutator

    class Node(PrimExpr):
        pass

    class Base(Mutator):
        pass

    class Sub(Base):
        pass

    Base.register_handler(Node, lambda self, n: "node")
    assert Sub().visit(Node()) == "node" and Base().visit(Node()) == "node"
