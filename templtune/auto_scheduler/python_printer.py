"""Render a state's transform steps as Python te schedule code (``print_best``).

The steps may come from a log, so every string goes into the code through ``repr()`` (and the
step decoders admit only known pragma and scope names, and integers elsewhere): printed code
never contains text of the log outside a string literal."""

from __future__ import annotations

import re
from typing import Any

from .loop_state import ANNOTATION_NAMES, State


def _san(name: str) -> str:
    s = re.sub(r"[^0-9a-zA-Z_]", "_", name)
    return s if not s[:1].isdigit() else f"_{s}"


class _Printer:
    def __init__(self, dag: Any, state: State) -> None:
        self.dag = dag
        self.state = state
        self.lines: list[str] = []
        self.cur = dag.get_init_state()
        self.declared: set[int] = set()
        self.stage_names = [st.op_name for st in self.cur.stages]
        self.ivars: list[list[str]] = [[] for _ in self.cur.stages]
        self.redeclare = False

    def line(self, s: str) -> None:
        self.lines.append(s)

    def stage_var(self, k: int) -> str:
        return _san(self.cur.stages[k].op_name)

    def iv(self, k: int, i: int) -> str:
        self.declare(k)
        return self.ivars[k][i]

    def declare(self, k: int) -> None:
        if k in self.declared:
            return
        self.declared.add(k)
        st = self.cur.stages[k]
        sv = self.stage_var(k)
        self.ivars[k] = [f"{sv}_{_san(it.name)}" for it in st.iters]
        if st.op_type == 1 and st.iters:
            # NOTE: re-declarations after cache_write/rfactor read the stage's current op.
            op = f"s[{sv}].op" if self.redeclare else f"{sv}.op"
            self.line(f"{', '.join(self.ivars[k])} = tuple({op}.axis) + "
                      f"tuple({op}.reduce_axis)")

    def split(self, k: int, i: int, lengths: tuple, inner_to_outer: bool) -> None:
        sv, parent = self.stage_var(k), self.iv(k, i)
        n = len(lengths)
        names = [f"{parent}_{j}" for j in range(n + 1)]
        if inner_to_outer:
            cur = parent
            for j in range(n, 0, -1):
                outer = names[0] if j == 1 else f"{parent}_o{j}"
                self.line(f"{outer}, {names[j]} = s[{sv}].split({cur}, factor={lengths[j - 1]})")
                cur = outer
        else:
            cur = parent
            for j in range(n):
                rest = names[n] if j == n - 1 else f"{parent}_r{j}"
                self.line(f"{names[j]}, {rest} = s[{sv}].split({cur}, nparts={lengths[j]})")
                cur = rest
        self.ivars[k][i:i + 1] = names

    def reorder(self, k: int, order: tuple) -> None:
        sv = self.stage_var(k)
        self.declare(k)
        self.ivars[k] = [self.ivars[k][i] for i in order]
        self.line(f"s[{sv}].reorder({', '.join(self.ivars[k])})")

    def fuse(self, k: int, ids: tuple) -> None:
        sv = self.stage_var(k)
        self.declare(k)
        parts = [self.ivars[k][i] for i in ids]
        name = "_".join(parts[:1] + [p.removeprefix(sv + "_") for p in parts[1:]]) + "_fused"
        if len(parts) == 1:
            name = parts[0]
        else:
            self.line(f"{name} = s[{sv}].fuse({', '.join(parts)})")
        self.ivars[k][ids[0]:ids[-1] + 1] = [name]

    def annotate(self, k: int, i: int, ann: int) -> None:
        sv, it = self.stage_var(k), self.iv(k, i)
        name = ANNOTATION_NAMES[ann]
        if name in ("unroll", "vectorize", "parallel", "tensorize"):
            self.line(f"s[{sv}].{name}({it})")
        else:
            self.line(f"s[{sv}].bind({it}, te.thread_axis({name!r}))")

    def pragma(self, k: int, i: int, name: str, val: int) -> None:
        sv, it = self.stage_var(k), self.iv(k, i)
        self.line(f"s[{sv}].pragma({it}, {name!r}, {int(val)})")

    def storage_align(self, k: int, i: int, factor: int, offset: int) -> None:
        sv = self.stage_var(k)
        self.line(f"s[{sv}].storage_align({sv}.op.axis[{i}], {factor}, {offset})")

    def compute_at(self, k: int, t: int, i: int) -> None:
        # NOTE: printed at the end from the final attach map (a later fuse or split of the
        # target moves the attach point; see transform_step's docstring).
        pass

    def _restructure(self, step: Any, insert_at: int) -> None:
        self.cur = step.apply_to_state(self.cur)
        self.ivars.insert(insert_at, [])
        self.declared = {d + 1 if d >= insert_at else d for d in self.declared}

    def cache_read(self, step: Any) -> None:
        src = self.stage_var(step.stage_id)
        readers = ", ".join(self.stage_var(r) for r in step.reader_stage_ids)
        self._restructure(step, step.stage_id + 1)
        k = step.stage_id + 1
        self.line(f"{self.stage_var(k)} = s.cache_read({src}, {step.scope_name!r}, "
                  f"[{readers}])")
        self.declared.discard(k)
        self.declare(k)

    def cache_write(self, step: Any) -> None:
        src = self.stage_var(step.stage_id)
        self._restructure(step, step.stage_id)
        k = step.stage_id
        self.line(f"{self.stage_var(k)} = s.cache_write({src}, {step.scope_name!r})")
        for j in (k, k + 1):
            self.declared.discard(j)
            self.declare(j)

    def rfactor(self, step: Any) -> None:
        src = self.stage_var(step.stage_id)
        it = self.iv(step.stage_id, step.iter_id)
        self._restructure(step, step.stage_id)
        k = step.stage_id
        self.line(f"{self.stage_var(k)} = s.rfactor({src}, {it}, "
                  f"factor_axis={step.factor_iter_id})")
        self.declared.discard(k)
        self.declare(k)
        # the original stage keeps its spatial leaves and gains the new reduce axis
        names = self.ivars[k + 1]
        sv = self.stage_var(k + 1)
        spatial = [n for n, itr in zip(names, self.cur.stages[k + 1].iters[:len(names)])
                   if itr.iter_kind == 0]
        self.ivars[k + 1] = spatial + [f"{sv}_{_san(self.cur.stages[k + 1].iters[-1].name)}"]
        self.line(f"{self.ivars[k + 1][-1]} = s[{sv}].op.reduce_axis[0]")


def print_python(dag: Any, state: State) -> str:
    p = _Printer(dag, state)
    for k in range(len(p.cur.stages)):
        p.declare(k)
    p.redeclare = True
    for step in state.transform_steps:
        from .transform_step import STAGE_CHANGING

        p.state = state
        step.python(p)
        if not isinstance(step, STAGE_CHANGING):
            p.cur = step.apply_to_state(p.cur)
    for k, t, i in state.attach_map:
        p.line(f"s[{p.stage_var(k)}].compute_at(s[{p.stage_var(t)}], {p.iv(t, i)})")
    return "\n".join(p.lines) + "\n"
