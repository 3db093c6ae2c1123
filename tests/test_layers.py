"""Architecture check: module-level imports between templtune's layers go down only.

The layer order is the one in DESIGN.md. Function-local (lazy) imports are allowed to go up: they
are how a lower layer offers a convenience entry (``te.create_schedule``) without an import cycle.
"""

from __future__ import annotations

import ast
import pathlib

import templtune

RANK = {
    "errors": 0,
    "dtype": 1, "config": 1, "target": 1,
    "te": 2,
    "topi": 3, "schedule": 3,
    "lower": 4,
    "codegen": 5,
    "runtime": 6,
    "build_module": 7,
    "autotvm": 8,
    "auto_scheduler": 9,
    "graph": 10,
    "cli": 11,
    "__main__": 12,  # python -m templtune: the CLI entry, above everything
}


def _module_level_imports(tree: ast.Module) -> list[str]:
    out: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
    return out


def test_imports_go_down_only() -> None:
    root = pathlib.Path(templtune.__file__).parent
    bad: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.name == "__init__.py" and len(rel.parts) == 1:
            continue
        layer = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        assert layer in RANK, f"{rel}: layer {layer!r} is not in the layer table"
        for name in _module_level_imports(ast.parse(path.read_text())):
            parts = name.split(".")
            if parts[0] != "templtune" or len(parts) < 2 or parts[1] == layer:
                continue
            target = parts[1]
            if target not in RANK:
                continue
            if RANK[target] >= RANK[layer]:
                bad.append(f"{rel} imports {name} ({layer} -> {target})")
    assert not bad, "upward or sideways imports:\n" + "\n".join(bad)
