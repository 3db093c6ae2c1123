"""Text form of loop IR, modelled on TVM's lowered TIR printout.

Deterministic (no ids, no addresses) so that it can be used for golden tests::

    @main = primfn(A_1: handle, B_1: handle) -> ()
      attr = {"global_symbol": "main", "tir.noalias": True}
      buffers = {A: Buffer(A_2: Pointer(float32), float32, [16, 16], []), ...}
      buffer_map = {A_1: A, B_1: B} {
      for (i: int32, 0, 16) "parallel" {
        B[ramp((i*16), 1, 16)] = (A[ramp((i*16), 1, 16)]*broadcast(2f, 16))
      }
    }
"""

from __future__ import annotations

from typing import Any

from templtune.lower.ir import (
    Allocate,
    AttrStmt,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    PrimFunc,
    SeqStmt,
    Stmt,
    Store,
)
from templtune.te.expr import Call, PrimExpr
from templtune.te.printer import expr_str

_KIND_TEXT = {ForKind.PARALLEL: ' "parallel"', ForKind.VECTORIZED: ' "vectorized"',
              ForKind.UNROLLED: ' "unrolled"', ForKind.SERIAL: ""}


def _e(e: PrimExpr) -> str:
    return expr_str(e)


def _cond(c: PrimExpr) -> str:
    if isinstance(c, Call) and c.name == "likely" and len(c.args) == 1:
        return f"@tir.likely({_e(c.args[0])}, dtype=bool)"
    return _e(c)


def _lines(s: Stmt, ind: int, out: list[str]) -> None:
    pad = "  " * ind
    if isinstance(s, SeqStmt):
        for x in s.seq:
            _lines(x, ind, out)
    elif isinstance(s, For):
        v = s.loop_var
        if s.kind is ForKind.THREAD_BINDING:
            tag = s.thread_tag
            if tag.startswith("vthread") or tag == "cthread":
                out.append(f'{pad}attr [IterVar({v.name}: {v.dtype}, (nullptr), "DataPar", '
                           f'"{tag}")] "virtual_thread" = {_e(s.extent)};')
            else:
                out.append(f'{pad}attr [IterVar({v.name}: {v.dtype}, (nullptr), "ThreadIndex", '
                           f'"{tag}")] "thread_extent" = {_e(s.extent)};')
            _lines(s.body, ind, out)
            return
        for k, val in s.annotations:
            out.append(f'{pad}attr [{v.name}] "{k}" = {val};')
        out.append(f"{pad}for ({v.name}: {v.dtype}, {_e(s.min)}, {_e(s.extent)})"
                   f"{_KIND_TEXT[s.kind]} {{")
        _lines(s.body, ind + 1, out)
        out.append(f"{pad}}}")
    elif isinstance(s, Store):
        pred = "" if s.predicate is None else f" if {_e(s.predicate)}"
        out.append(f"{pad}{s.buffer.name}[{_e(s.index)}] = {_e(s.value)}{pred}")
    elif isinstance(s, Allocate):
        b = s.buffer
        shape = ", ".join(_e(x) for x in b.shape)
        out.append(f"{pad}allocate({b.name}: Pointer({b.scope} {b.dtype}), {b.dtype}, "
                   f"[{shape}]), storage_scope = {b.scope};")
        _lines(s.body, ind, out)
    elif isinstance(s, IfThenElse):
        out.append(f"{pad}if {_cond(s.condition)} {{")
        _lines(s.then_case, ind + 1, out)
        if s.else_case is not None:
            out.append(f"{pad}}} else {{")
            _lines(s.else_case, ind + 1, out)
        out.append(f"{pad}}}")
    elif isinstance(s, LetStmt):
        out.append(f"{pad}let {s.var.name}: {s.var.dtype} = {_e(s.value)}")
        _lines(s.body, ind, out)
    elif isinstance(s, AttrStmt):
        node = getattr(s.node, "name", s.node)
        out.append(f'{pad}attr [{node}] "{s.key}" = {s.value};')
        _lines(s.body, ind, out)
    elif isinstance(s, Evaluate):
        out.append(f"{pad}{_e(s.value)}")
    else:
        out.append(f"{pad}<{type(s).__name__}>")


def stmt_str(s: Stmt, indent: int = 0) -> str:
    """Render a statement (and everything below it) as text."""
    out: list[str] = []
    _lines(s, indent, out)
    return "\n".join(out)


def _attr_val(v: Any) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


def func_str(f: PrimFunc) -> str:
    """Render a lowered function as TVM-style text."""
    params = ", ".join(f"{b.name}_1: handle" for b in f.params)
    attrs = ", ".join(f'"{k}": {_attr_val(v)}' for k, v in f.attrs)
    bufs = ", ".join(
        f"{b.name}: Buffer({b.name}_2: Pointer({b.dtype}), {b.dtype}, "
        f"[{', '.join(_e(x) for x in b.shape)}], [])" for b in f.params)
    bmap = ", ".join(f"{b.name}_1: {b.name}" for b in f.params)
    head = [f"@{f.name} = primfn({params}) -> ()",
            f"  attr = {{{attrs}}}",
            f"  buffers = {{{bufs}}}",
            f"  buffer_map = {{{bmap}}} {{"]
    return "\n".join(head) + "\n" + stmt_str(f.body, 1) + "\n}"
