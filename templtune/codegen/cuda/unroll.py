"""Loop unrolling driven by the ``auto_unroll_max_step`` / ``unroll_explicit`` pragmas.

A pragma sits on one loop (``For.annotations`` or an enclosing ``AttrStmt``) and governs every loop
below it. A constant-extent serial loop whose whole subtree executes at most ``max_step`` leaf
statements per entry is unrolled: with ``unroll_explicit`` its body is replicated in the IR (the
renderer sees straight-line code); otherwise it becomes an ``UNROLLED`` loop that renders with
``#pragma unroll``. A loop enclosing a loop that stays rolled is never unrolled.
"""

from __future__ import annotations

from dataclasses import replace

from templtune.codegen.cuda.analysis import fast_substitute
from templtune.lower.ir import AttrStmt, For, ForKind, IfThenElse, SeqStmt, Stmt, seq
from templtune.te.expr import const, const_int

_INF = 1 << 60


def _pragmas(items: tuple[tuple[str, object], ...] | list[tuple[str, object]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, value in items:
        k = key.removeprefix("pragma_")
        if k in ("auto_unroll_max_step", "unroll_explicit"):
            v = const_int(value) if not isinstance(value, (bool, int)) else int(value)
            if v is not None:
                out[k] = v
    return out


class _Unroller:
    def __init__(self) -> None:
        self.max_step = 0
        self.explicit = False

    def run(self, s: Stmt) -> tuple[Stmt, int]:
        """Returns the new statement and its leaf-step count (``_INF`` if it keeps a loop)."""
        if isinstance(s, AttrStmt):
            prag = _pragmas([(s.key, s.value)])
            if prag:
                saved = (self.max_step, self.explicit)
                self.max_step = prag.get("auto_unroll_max_step", self.max_step)
                self.explicit = bool(prag.get("unroll_explicit", self.explicit))
                body, n = self.run(s.body)
                self.max_step, self.explicit = saved
                return body, n
            body, n = self.run(s.body)
            return replace(s, body=body), n
        if isinstance(s, SeqStmt):
            parts = [self.run(c) for c in s.seq]
            return seq(*(p for p, _ in parts)), min(_INF, sum(n for _, n in parts))
        if isinstance(s, IfThenElse):
            t, nt = self.run(s.then_case)
            e, ne = (None, 0) if s.else_case is None else self.run(s.else_case)
            return replace(s, then_case=t, else_case=e), max(nt, ne) + 1
        if isinstance(s, For):
            return self.loop(s)
        inner = getattr(s, "body", None)
        if isinstance(inner, Stmt):
            nb, n = self.run(inner)
            return replace(s, body=nb), n  # type: ignore[call-arg, type-var]
        return s, 1

    def loop(self, s: For) -> tuple[Stmt, int]:
        prag = _pragmas(s.annotations)
        saved = (self.max_step, self.explicit)
        if prag:
            self.max_step = prag.get("auto_unroll_max_step", self.max_step)
            self.explicit = bool(prag.get("unroll_explicit", self.explicit))
        body, n = self.run(s.body)
        max_step, explicit = self.max_step, self.explicit
        self.max_step, self.explicit = saved
        ext, mn = const_int(s.extent), const_int(s.min)
        if s.kind is ForKind.THREAD_BINDING:
            return replace(s, body=body), _INF
        if ext is None or mn is None or s.kind not in (ForKind.SERIAL, ForKind.UNROLLED):
            return replace(s, body=body), _INF
        steps = ext * n if n < _INF else _INF
        wanted = s.kind is ForKind.UNROLLED or (max_step > 0 and steps <= max_step)
        if not wanted:
            return replace(s, body=body), _INF
        if explicit and steps <= max(max_step, 1):
            copies = [fast_substitute(body, {s.loop_var: const(mn + i, s.loop_var.dtype)})
                      for i in range(ext)]
            return seq(*copies) if copies else SeqStmt(()), steps
        return replace(s, body=body, kind=ForKind.UNROLLED), steps


def apply_unroll(stmt: Stmt) -> Stmt:
    """Apply the unroll pragmas of ``stmt`` (see the module docstring)."""
    return _Unroller().run(stmt)[0]
