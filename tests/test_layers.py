"""Architecture check: imports between templtune's layers go down only (DESIGN.md, "Layers").

Every import form counts: ``import``/``from`` at any depth (function bodies, ``if TYPE_CHECKING``
blocks), relative imports (resolved against the importing module), ``importlib.import_module``
with a string or an f-string whose constant prefix names a module, and string constants that are
exact module paths (the lazy ``_EXPORTS``/``_BACKENDS`` tables that feed ``import_module``).
``templates/`` is checked too and may use only the public API.
"""

from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass

import pytest

import templtune

# NOTE: one rank per layer, in DESIGN.md's order; a layer may import only strictly lower ranks
# (or itself). Within autotvm, task, space and records must not depend on how candidates are
# measured, nor that on a search strategy.
RANK: dict[str, int] = {
    "errors": 0,
    "dtype": 1,
    "config": 2,
    "target": 3,
    "te": 4,
    "topi": 5, "schedule": 5,
    "lower": 6,
    "codegen": 7,
    "runtime": 8,
    "build_module": 9,
    "measure": 10,
    "autotvm": 11,
    "autotvm.measure": 12,
    "autotvm.tuner": 13,
    "auto_scheduler": 14,
    "graph": 15,
    "templates": 16,
    "cli": 17,
    # TVM-name facades (pure re-exports of the layers below, for ported tutorials)
    "testing": 18, "relay": 18, "contrib": 18, "tir": 18,
    "__main__": 19,  # python -m templtune: the CLI entry, above everything
}

# Sub-packages of autotvm with their own rank (issue 14: autotvm -> measure -> tuner). The
# callbacks belong to the tuners (TVM's module is autotvm.tuner.callback).
SUBLAYERS: dict[str, str] = {
    # how AutoTVM rebuilds a candidate (task reference + config index) and its MeasureInput:
    # AutoTVM's side of the shared measurement stack, needed by the records below the runners
    "templtune.autotvm.measure.candidate": "autotvm",
    "templtune.autotvm.measure": "autotvm.measure",
    "templtune.autotvm.tuner": "autotvm.tuner",
    "templtune.autotvm.callback": "autotvm.tuner",
    # TVM's module name for a network-level tool: it reads networks, so it ranks as graph
    "templtune.autotvm.graph_tuner": "graph",
    # TVM's module name for the network conversion and sketch rules of block-sparse dense: a
    # facade over graph and auto_scheduler, as relay is
    "templtune.topi.sparse.utils": "relay",
}

# Modules of templtune that templates may import: the public API a user's own template file has.
TEMPLATE_PUBLIC = {"", "te", "topi", "autotvm", "target", "dtype", "errors", "templates"}

# (importer module, imported module or package) pairs allowed although they go up; each says why.
ALLOWED: dict[tuple[str, str], str] = {
    ("templtune.te", "templtune.schedule"):
        "TVM compatibility: tutorials call te.create_schedule; te/__init__ re-exports it lazily "
        "from the schedule layer on attribute access",
    ("templtune.autotvm", "templtune.autotvm.measure"):
        "TVM compatibility: autotvm.measure_option, autotvm.LocalRunner, ... are top-level names "
        "of the autotvm package (resolved lazily on attribute access)",
    ("templtune.autotvm.strategy", "templtune.templates"):
        "the strategy registry's loader hook imports the template library once (load_all), so "
        "graph and cli never name a template",
}

# NOTE: upward edges that other branches of issue 14 remove (measure package, op-strategy
# registry). The lead empties this set after merging them; any other upward edge fails now.
_PENDING_OTHER_BRANCHES: set[tuple[str, str]] = set()

# The package facade: ``templtune.__init__`` lazily exposes every layer by name, as TVM's does.
FACADE = "templtune"


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int
    form: str


def _package_dirs() -> dict[str, pathlib.Path]:
    """Root folder of each top-level package walked: templtune and its templates."""
    import templtune.templates as tpl

    return {"templtune": pathlib.Path(templtune.__file__).parent,
            "templtune.templates": pathlib.Path(tpl.__file__).parent}


def _modules() -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for templtune (templates excluded) and templtune.templates."""
    dirs = _package_dirs()
    tpl_real = dirs["templtune.templates"].resolve()
    out: dict[str, pathlib.Path] = {}
    for prefix, root in dirs.items():
        for path in sorted(root.rglob("*.py")):
            if prefix == "templtune" and tpl_real in path.resolve().parents:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([prefix, *parts])] = path
    return out


def _resolve_relative(module: str, is_pkg: bool, level: int, name: str | None) -> str:
    base = module.split(".")
    if not is_pkg:
        base.pop()
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _fstring_prefix(node: ast.JoinedStr, module: str) -> str:
    """The constant text before the first placeholder; ``{__name__}`` counts as constant."""
    text = ""
    for v in node.values:
        if isinstance(v, ast.Constant):
            text += str(v.value)
        elif (isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name)
              and v.value.id == "__name__"):
            text += module
        else:
            break
    return text.rsplit(".", 1)[0] if "." in text else text


def _edges(module: str, path: pathlib.Path, known: set[str]) -> list[Edge]:
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef,
                                    ast.ClassDef))
                  and n.body and isinstance(n.body[0], ast.Expr)
                  and isinstance(n.body[0].value, ast.Constant)}
    # NOTE: logger names and ``find_spec`` (locating package data) name modules without
    # importing them.
    not_imports = {id(n.args[0]) for n in ast.walk(tree)
                   if isinstance(n, ast.Call) and n.args
                   and isinstance(n.func, ast.Attribute)
                   and n.func.attr in ("getLogger", "find_spec")}
    out: list[Edge] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [Edge(module, a.name, node.lineno, "import") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (node.module or "") if node.level == 0 else _resolve_relative(
                module, is_pkg, node.level, node.module)
            form = "from" if node.level == 0 else "relative"
            for a in node.names:
                # ``from pkg import sub`` imports the submodule when there is one
                full = f"{base}.{a.name}"
                out.append(Edge(module, full if full in known else base, node.lineno, form))
        elif (isinstance(node, ast.Call) and node.args
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name)
                       and node.func.id in ("import_module", "__import__")))):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.append(Edge(module, arg.value, node.lineno, "import_module"))
            elif isinstance(arg, ast.JoinedStr):
                out.append(Edge(module, _fstring_prefix(arg, module), node.lineno, "f-string"))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in docstrings and id(node) not in not_imports
              and node.value in known and node.value.startswith("templtune.")):
            out.append(Edge(module, node.value, node.lineno, "module-path string"))
    return out


def layer_of(module: str) -> str | None:
    """The layer of a dotted templtune module name (None for the facade or outside names)."""
    parts = module.split(".")
    if parts[0] != "templtune" or len(parts) < 2:
        return None
    for prefix, layer in SUBLAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return layer
    return parts[1]


def _allowed(importer: str, imported: str, table: dict | set) -> bool:
    """``importer`` is an entry's module exactly; ``imported`` is its module or inside it."""
    return any(importer == a and (imported == b or imported.startswith(b + "."))
               for a, b in table)


def violations() -> list[str]:
    """Every upward, sideways or non-public edge that no allow-list entry covers."""
    mods = _modules()
    known = set(mods)
    bad: list[str] = []
    for module, path in mods.items():
        if module == FACADE:
            continue
        src = layer_of(module)
        assert src in RANK, f"{path}: layer {src!r} is not in the layer table"
        for e in _edges(module, path, known):
            dst = layer_of(e.imported)
            if dst is None or dst == src:
                continue
            assert dst in RANK, f"{path}:{e.line}: imports unknown layer {dst!r}"
            public_ok = src != "templates" or dst in TEMPLATE_PUBLIC
            if e.imported == FACADE or (RANK[dst] < RANK[src] and public_ok):
                continue
            if _allowed(module, e.imported, ALLOWED) or _allowed(
                    module, e.imported, _PENDING_OTHER_BRANCHES):
                continue
            why = "non-public API" if not public_ok else f"{src} -> {dst}"
            bad.append(f"{path.name}:{e.line} {module} imports {e.imported} ({e.form}; {why})")
    return bad


def test_imports_go_down_only() -> None:
    bad = violations()
    assert not bad, "upward, sideways or non-public imports:\n" + "\n".join(sorted(bad))


def test_every_allow_list_entry_is_used() -> None:
    # NOTE: a stale entry would silently allow a future regression on that edge.
    mods = _modules()
    known = set(mods)
    edges = [e for m, p in mods.items() for e in _edges(m, p, known)]
    for table in (ALLOWED, _PENDING_OTHER_BRANCHES):
        for a, b in table:
            assert any(_allowed(e.importer, e.imported, {(a, b)}) for e in edges), (
                f"allow-list entry {a} -> {b} matches no import: remove it")


def _scan(tmp_path: pathlib.Path, source: str, module: str = "templtune.lower.fake") -> list[Edge]:
    path = tmp_path / "fake.py"
    path.write_text(source)
    return _edges(module, path, set(_modules()))


@pytest.mark.parametrize("source, expected, form", [
    ("def f():\n    from templtune.autotvm import tuner\n", "templtune.autotvm.tuner", "from"),
    ("import templtune.graph.ir\n", "templtune.graph.ir", "import"),
    ("from ..graph import ir\n", "templtune.graph.ir", "relative"),
    ("from ..runtime.module import Module\n", "templtune.runtime.module", "relative"),
    ("import importlib\nimportlib.import_module('templtune.cli.main')\n", "templtune.cli.main",
     "import_module"),
    ("import importlib\ndef f(n):\n    return importlib.import_module(f'templtune.graph.{n}')\n",
     "templtune.graph", "f-string"),
    ("_T = {'x': 'templtune.runtime.module'}\n", "templtune.runtime.module",
     "module-path string"),
])
def test_every_import_form_is_seen(tmp_path: pathlib.Path, source: str, expected: str,
                                   form: str) -> None:
    edges = _scan(tmp_path, source)
    assert any(e.imported == expected and e.form == form for e in edges), edges


def test_docstrings_and_logger_names_are_not_imports(tmp_path: pathlib.Path) -> None:
    src = ('"""templtune.graph"""\nimport logging\nlog = logging.getLogger("templtune.graph")\n')
    assert _scan(tmp_path, src)[1:] == []  # only ``import logging``
