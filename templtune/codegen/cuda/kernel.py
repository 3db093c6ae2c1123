"""Split a GPU PrimFunc into kernels and turn thread-binding loops into launch dimensions.

A top-level ``For`` of kind ``THREAD_BINDING`` (blockIdx/threadIdx) starts a kernel. Inside it,
every binding loop disappears: its variable becomes the kernel's ``blockIdx.x``-style variable
(one :class:`~templtune.te.expr.Var` per tag, shared by all bindings of that tag, so later passes
can compare indices structurally), and its extent becomes a launch dimension. A binding whose
extent is smaller than the launch dimension of its tag is guarded by ``if (threadIdx.x < n)``.
Shared and local allocations are hoisted to the kernel top, as CUDA wants them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from templtune import dtype as dt
from templtune.codegen.cuda.analysis import (
    accessed_buffers,
    buffer_size,
    const_value,
    fast_substitute,
    iter_nodes,
)
from templtune.errors import CodegenError
from templtune.lower.ir import (
    Allocate,
    AttrStmt,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    PrimFunc,
    SeqStmt,
    Stmt,
    seq,
    shape_vars,
)
from templtune.te.expr import IntImm, PrimExpr, Var, const_int
from templtune.te.functor import Mutator, handles, post_order, structural_equal

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
LAUNCH_TAGS = BLOCK_TAGS + THREAD_TAGS


def is_vthread(tag: str) -> bool:
    return tag.startswith("vthread") or tag == "cthread"


@dataclass(frozen=True, slots=True, eq=False)
class Kernel:
    """One ``__global__`` function: its arguments (global buffers, in launch order), the shared
    and local arrays declared at its top, its body (no binding loops left) and launch shape."""

    name: str
    params: tuple[Buffer, ...]
    allocs: tuple[Buffer, ...]
    body: Stmt
    # a block dimension may be an expression of the shape variables (a symbolic shape)
    grid: tuple[int | PrimExpr, int | PrimExpr, int | PrimExpr]
    block: tuple[int, int, int]
    thread_vars: tuple[tuple[str, Var], ...]
    # shape variables the body reads: ``int`` arguments after the buffers
    scalars: tuple[Var, ...] = ()

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def shared_bytes(self) -> int:
        return sum(buffer_size(b) * dt.itemsize(b.dtype) for b in self.allocs
                   if b.scope == "shared")

    @property
    def local_words(self) -> int:
        """32-bit words of local arrays per thread (a lower bound on its registers)."""
        return sum(-(-buffer_size(b) * dt.itemsize(b.dtype) // 4) for b in self.allocs
                   if b.scope == "local")

    def var(self, tag: str) -> Var | None:
        return dict(self.thread_vars).get(tag)


def _has_binding(stmt: Stmt) -> bool:
    return any(isinstance(n, For) and n.kind is ForKind.THREAD_BINDING for n in post_order(stmt))


_MARK = "tt_thread_extent"


class _Unbind(Mutator):
    """Replace binding loops by the kernel's tag variables, leaving a marker with the extent."""

    def __init__(self, tag_vars: dict[str, Var]) -> None:
        self.tag_vars = tag_vars
        self.vmap: dict[Var, PrimExpr] = {}

    @handles(For)
    def visit_For(self, node: For) -> Stmt:
        body = self.visit(node.body)
        if node.kind is not ForKind.THREAD_BINDING:
            return node if body is node.body else replace(node, body=body)
        tag = node.thread_tag
        if tag not in LAUNCH_TAGS:
            raise CodegenError(f"unsupported thread tag {tag!r} (vthreads must be injected first)")
        tv = self.tag_vars[tag]
        mn = const_value(node.min, f"min of the loop bound to {tag}")
        ext = _extent(node)
        self.vmap[node.loop_var] = tv if mn == 0 else tv + mn
        return AttrStmt(_MARK, tag, ext, body)


def _has_mark(s: Stmt, memo: dict[int, bool] | None = None) -> bool:
    if isinstance(s, AttrStmt) and s.key == _MARK:
        return True
    if memo is not None and id(s) in memo:
        return memo[id(s)]
    from templtune.codegen.cuda.analysis import node_children

    out = any(_has_mark(c, memo) for c in node_children(s) if isinstance(c, Stmt))
    if memo is not None:
        memo[id(s)] = out
    return out


def _guard(s: Stmt, ctx: dict[str, int | PrimExpr], launch: dict[str, int | PrimExpr],
           tag_vars: dict[str, Var], memo: dict[int, bool] | None = None) -> Stmt:
    """Guard code bound with a smaller extent than the launch dimension by ``tag < extent``.

    A nested binding of the same tag (a cooperative fetch inside the compute's thread loop)
    re-binds the index with its own extent, so guards never cover such a region.
    """
    if isinstance(s, AttrStmt) and s.key == _MARK:
        return _guard(s.body, {**ctx, s.node: s.value}, launch, tag_vars, memo)
    if memo is None:
        memo = {}
    if not _has_mark(s, memo):
        conds = [tag_vars[t] < e for t, e in sorted(ctx.items())
                 if e is not launch[t] and (type(e) is not int or e < launch[t])]
        if not conds:
            return s
        cond = conds[0]
        for c in conds[1:]:
            cond = cond & c
        return IfThenElse(cond, s)
    if isinstance(s, SeqStmt):
        return seq(*(_guard(c, ctx, launch, tag_vars, memo) for c in s.seq))
    if isinstance(s, IfThenElse):
        return replace(s, then_case=_guard(s.then_case, ctx, launch, tag_vars, memo),
                       else_case=None if s.else_case is None
                       else _guard(s.else_case, ctx, launch, tag_vars, memo))
    return replace(s, body=_guard(s.body, ctx, launch, tag_vars, memo))  # type: ignore[attr-defined, type-var]


class _Hoist(Mutator):
    def __init__(self) -> None:
        self.allocs: list[Buffer] = []

    @handles(Allocate)
    def visit_Allocate(self, node: Allocate) -> Stmt:
        if node.buffer.scope == "global":
            raise CodegenError(f"global buffer {node.buffer.name} allocated inside a kernel")
        if node.buffer not in self.allocs:
            self.allocs.append(node.buffer)
        return self.visit(node.body)


def _extent(n: For) -> int | PrimExpr:
    """A binding's extent: an int, or (blockIdx only) an expression of shape variables."""
    ext = const_int(n.extent)
    if ext is not None:
        return ext
    if n.thread_tag not in BLOCK_TAGS:
        raise CodegenError(f"CUDA codegen needs a constant extent of the loop bound to "
                           f"{n.thread_tag}, got {n.extent} (split the symbolic axis and bind "
                           f"its outer part to blockIdx)")
    return n.extent


def _launch_extent(tag: str, old: int | PrimExpr | None, ext: int | PrimExpr) -> int | PrimExpr:
    if old is None:
        return ext
    if type(old) is int and type(ext) is int:
        return max(old, ext)
    if structural_equal(old, ext):
        return old
    raise CodegenError(f"{tag} is bound with the different extents {old} and {ext} in one "
                       f"kernel; a symbolic launch dimension must be the same for every binding")


def _make_kernel(name: str, root: Stmt, outer_allocs: list[Buffer],
                 arg_order: list[Buffer], shape_vars: tuple[Var, ...] = ()) -> Kernel:
    extents: dict[str, int | PrimExpr] = {}
    for n in post_order(root):
        if isinstance(n, For) and n.kind is ForKind.THREAD_BINDING:
            extents[n.thread_tag] = _launch_extent(n.thread_tag, extents.get(n.thread_tag),
                                                   _extent(n))
    tag_vars = {t: Var(t, "int32") for t in LAUNCH_TAGS if t in extents}
    unbind = _Unbind(tag_vars)
    body = _guard(fast_substitute(unbind.visit(root), unbind.vmap), {}, extents, tag_vars)
    hoist = _Hoist()
    body = hoist.visit(body)
    used = accessed_buffers(body)
    allocs = [b for b in outer_allocs if b in used] + hoist.allocs
    seen: set[Buffer] = set(allocs)
    params = tuple(b for b in arg_order if b in used and b not in seen)
    grid = tuple(extents.get(t, 1) for t in BLOCK_TAGS)
    block = tuple(extents.get(t, 1) for t in THREAD_TAGS)
    for tag, ext in extents.items():
        if type(ext) is int and ext <= 0:
            raise CodegenError(f"non-positive launch extent {ext} for {tag}")
    scalars: tuple[Var, ...] = ()
    if shape_vars:
        # NOTE: also those only in the arguments' shapes, so an emulator can size the arrays
        seen_vars: set[Var] = {n for n in iter_nodes(body) if type(n) is Var}
        seen_vars.update(d for b in params for d in b.shape if isinstance(d, Var))
        scalars = tuple(v for v in shape_vars if v in seen_vars)
    return Kernel(name, params, tuple(allocs), body, grid, block,  # type: ignore[arg-type]
                  tuple(tag_vars.items()), scalars)


def specialize(kernel: Kernel, values: dict[Var, int]) -> Kernel:
    """``kernel`` with its shape variables replaced by ``values``: constant launch dimensions
    and no scalar arguments (what the emulators run)."""
    from templtune.te.const_eval import eval_const

    consts: dict[Var, PrimExpr] = {v: IntImm(v.dtype, values[v]) for v in kernel.scalars}
    gx, gy, gz = (g if isinstance(g, int) else int(eval_const(g, values)) for g in kernel.grid)
    return replace(kernel, body=fast_substitute(kernel.body, consts), grid=(gx, gy, gz),
                   scalars=())


def split_kernels(func: PrimFunc) -> tuple[list[Kernel], list[Buffer]]:
    """Split ``func`` into kernels named ``<func.name>_kernel<i>``.

    Returns the kernels in launch order and the global workspace buffers that ``func``
    allocates between kernels (the runtime allocates them; kernels take them as arguments).
    """
    kernels: list[Kernel] = []
    workspace: list[Buffer] = []
    roots: list[tuple[Stmt, list[Buffer]]] = []

    def host(stmt: Stmt, allocs: list[Buffer]) -> None:
        if isinstance(stmt, For) and stmt.kind is ForKind.THREAD_BINDING:
            if stmt.thread_tag not in LAUNCH_TAGS:
                raise CodegenError(f"thread tag {stmt.thread_tag!r} outside any kernel")
            roots.append((stmt, allocs))
        elif isinstance(stmt, SeqStmt):
            for s in stmt.seq:
                host(s, allocs)
        elif isinstance(stmt, Allocate):
            if stmt.buffer.scope == "global":
                workspace.append(stmt.buffer)
                host(stmt.body, allocs)
            else:
                host(stmt.body, allocs + [stmt.buffer])
        elif isinstance(stmt, AttrStmt):
            host(stmt.body, allocs)
        elif isinstance(stmt, LetStmt):
            host(fast_substitute(stmt.body, {stmt.var: stmt.value}), allocs)
        elif (isinstance(stmt, For) and const_int(stmt.extent) == 1
              and stmt.kind is not ForKind.THREAD_BINDING):
            host(fast_substitute(stmt.body, {stmt.loop_var: stmt.min}), allocs)
        elif _has_binding(stmt):
            raise CodegenError(
                f"host-side {type(stmt).__name__} around a GPU kernel is not supported; bind the "
                "outer loops to blockIdx/threadIdx")
        elif accessed_buffers(stmt):
            raise CodegenError(
                "memory is accessed outside any GPU thread binding (did you forget to bind a "
                f"stage to blockIdx/threadIdx?): {type(stmt).__name__} touching "
                f"{sorted(b.name for b in accessed_buffers(stmt))}")

    host(func.body, [])
    if not roots:
        raise CodegenError(f"function {func.name} has no loop bound to blockIdx/threadIdx")
    order = list(func.params) + workspace
    svars = shape_vars(func.params)
    for i, (root, allocs) in enumerate(roots):
        kernels.append(_make_kernel(f"{func.name}_kernel{i}", root, allocs, order, svars))
    return kernels, workspace


__all__ = ["Kernel", "split_kernels", "specialize", "is_vthread", "BLOCK_TAGS", "THREAD_TAGS", "seq"]


class _MergeGuards(Mutator):
    @handles(SeqStmt)
    def visit_SeqStmt(self, node: SeqStmt) -> Stmt:
        from templtune.te.functor import structural_equal

        out: list[Stmt] = []
        for c in (self.visit(x) for x in node.seq):
            prev = out[-1] if out else None
            if (isinstance(c, IfThenElse) and isinstance(prev, IfThenElse)
                    and c.else_case is None and prev.else_case is None
                    and structural_equal(c.condition, prev.condition)):
                out[-1] = IfThenElse(prev.condition, seq(prev.then_case, c.then_case))
            else:
                out.append(c)
        return seq(*out)


def merge_adjacent_guards(kernel: Kernel) -> Kernel:
    """Fuse consecutive ``if`` statements with the same condition (readability only)."""
    return replace(kernel, body=_MergeGuards().visit(kernel.body))
