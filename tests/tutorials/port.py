"""Port a TVM tutorial script to templtune by changing its import lines, and nothing else.

The rule a TVM user follows: ``import tvm`` becomes ``import templtune as tvm``, ``from tvm[.x]
import y`` becomes ``from templtune[.x] import y``, ``import tvm.x`` becomes ``import
templtune.x`` (with ``tvm`` bound to templtune by the first rule). :func:`port` refuses a script
in which any other line would have to change."""

from __future__ import annotations

import re

_IMPORT = re.compile(r"^(\s*)import tvm(\.[\w.]+)?(\s+as\s+\w+)?\s*$")
_FROM = re.compile(r"^(\s*)from tvm((?:\.[\w.]+)?)\s+import\s+(.+)$")


def port_line(line: str) -> str:
    m = _IMPORT.match(line)
    if m:
        indent, sub, alias = m.group(1), m.group(2) or "", m.group(3) or ""
        if not sub:
            return f"{indent}import templtune as {alias.split()[-1] if alias else 'tvm'}"
        if alias:
            return f"{indent}import templtune{sub}{alias}"
        # ``import tvm.testing`` binds ``tvm``: keep that name bound to templtune
        return f"{indent}import templtune{sub}; import templtune as tvm"
    m = _FROM.match(line)
    if m:
        return f"{m.group(1)}from templtune{m.group(2)} import {m.group(3)}"
    return line


def port(source: str) -> tuple[str, int]:
    """The ported script and the number of lines changed (import lines only, by construction)."""
    lines = source.splitlines()
    out = [port_line(x) for x in lines]
    changed = [(a, b) for a, b in zip(lines, out) if a != b]
    for a, _ in changed:
        assert a.lstrip().startswith(("import ", "from ")), a
    leftover = [x for x in out if re.search(r"\b(import|from)\s+tvm\b", x)]
    assert not leftover, f"import lines the port did not handle: {leftover}"
    return "\n".join(out) + "\n", len(changed)
