"""Workloads of the packaged reference logs: the workload file and the networks' layers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# NOTE: loaded by logs/reference_logs.py, which puts this checkout first on sys.path and sets the
# thread count before templtune is imported
from templtune.autotvm.task.reference import IsaFamily

WORKLOADS = Path(__file__).resolve().parent / "reference_workloads.txt"
NETWORKS = ("resnet-18", "resnet-50", "mobilenet")
BENCH_SECTION = "# section: benchmarks"
#: a target of each ISA family: the networks' workloads are extracted for both, and a
#: family's log is tuned for its target (``--target`` may name another CPU of the family)
FAMILY_TARGETS = {IsaFamily.AVX2: "llvm -mcpu=haswell",
                  IsaFamily.AVX512: "llvm -mcpu=skylake-avx512",
                  IsaFamily.AVX512_256: "llvm -mcpu=znver4"}


def pipeline_block(target: str) -> int:
    """The channel block of the networks' convolutions in ``target``'s packaged log: two
    vector registers of float32 lanes (16 with AVX2, 32 with AVX-512), the fallback's block."""
    from templtune.target import capabilities

    return 2 * capabilities(target).lanes("float32")


@dataclass(frozen=True, slots=True)
class Workload:
    """One line of the workload file."""

    template: str
    args: tuple[int, ...]
    note: str = ""

    @property
    def stem(self) -> str:
        return f"{self.template}_{'_'.join(map(str, self.args))}"

    def line(self) -> str:
        text = f"{self.template} {','.join(map(str, self.args))}"
        return f"{text:56s} # {self.note}" if self.note else text


def read_workloads(path: Path = WORKLOADS) -> list[Workload]:
    """The workloads of ``path`` in file order (duplicates dropped)."""
    out: dict[tuple[str, tuple[int, ...]], Workload] = {}
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        body, _, note = raw.partition("#")
        if not body.strip():
            continue
        parts = body.split()
        if len(parts) != 2:
            raise ValueError(f"{path}:{n}: expected 'template a,b,c', got {raw!r}")
        try:
            args = tuple(int(a) for a in parts[1].split(","))
        except ValueError:
            raise ValueError(f"{path}:{n}: arguments must be integers: {raw!r}") from None
        out.setdefault((parts[0], args), Workload(parts[0], args, note.strip()))
    return list(out.values())


def network_workloads(target: str, all_candidates: bool) -> list[Workload]:
    """The AutoTVM workloads building the zoo networks instantiates (see the module doc)."""
    from templtune import autotvm, graph
    from templtune.autotvm import env
    from templtune.graph.alter_layout import blockable_convs, other_blocked
    from templtune.graph.autotvm_integration import candidates
    from templtune.graph.fuse import partition

    found: dict[tuple[str, tuple[int, ...]], list[str]] = {}
    block = pipeline_block(target)

    def add(name: str, args: tuple[int, ...], net_name: str) -> None:
        nets = found.setdefault((name, tuple(int(a) for a in args)), [])
        if net_name not in nets:
            nets.append(net_name)

    for net_name in NETWORKS:
        net, params, _, _ = graph.testing.get_network(net_name, 1, "NCHW")
        for refs in (False, True):
            env.set_use_reference_logs(refs)
            try:
                for t in autotvm.task.extract_from_program(net, params, target):
                    add(t.name, t.args, net_name)
            finally:
                env.set_use_reference_logs(True)
        # NOTE: the blocked convolutions' other implementations (Winograd) at the pipeline's
        # block: a record of theirs replaces the direct kernel of a layer where it is faster
        for conv in blockable_convs(net, set(params), target):
            for _, impl in other_blocked(conv, target, (block,)):
                add(impl.template, impl.args, net_name)
        if all_candidates:
            for g in partition(net):
                for c in candidates(g.calls[0], target):
                    add(c.template, c.args, net_name)
    return [Workload(n, a, " ".join(nets)) for (n, a), nets in found.items()]


def family_workloads(all_candidates: bool) -> list[Workload]:
    """The networks' workloads of every ISA family (:data:`FAMILY_TARGETS`); each one's note
    names its networks, then its families after a ``;`` (a family that runs another's code,
    ``IsaFamily.isa``, shares that one's workloads and is not named)."""
    found: dict[tuple[str, tuple[int, ...]], tuple[set[str], list[str]]] = {}
    for family, target in FAMILY_TARGETS.items():
        if family.isa is not family:
            continue
        for w in network_workloads(target, all_candidates):
            nets, fams = found.setdefault((w.template, w.args), (set(), []))
            nets.update(w.note.split())
            fams.append(family.value)
    order = {n: i for i, n in enumerate(NETWORKS)}
    return [Workload(t, a, " ".join(sorted(nets, key=order.__getitem__)) + "; " + " ".join(fams))
            for (t, a), (nets, fams) in found.items()]


def families_of(w: Workload) -> set[str]:
    """The ISA families whose builds instantiate ``w`` (every family when its note names
    none, as the benchmark section's); a family that runs another's code
    (``IsaFamily.isa``) has that one's workloads."""
    _, sep, fams = w.note.partition(";")
    if not sep:
        return {f.value for f in IsaFamily}
    named = set(fams.split())
    return named | {f.value for f in IsaFamily if f.isa.value in named}


def refresh(all_candidates: bool, path: Path = WORKLOADS) -> list[Workload]:
    """Add to the network section of ``path`` every family's workloads it does not list yet
    (a line already there stays as it is: the file only grows); the benchmark section is
    kept."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    cut = lines.index(BENCH_SECTION) if BENCH_SECTION in lines else len(lines)
    head, bench = lines[:cut], lines[cut:]
    if not head:
        head = ["# Workloads of the packaged reference logs (logs/reference_logs.py).",
                "# section: networks (added by --refresh-workloads: resnet-18, resnet-50,",
                "# mobilenet, batch 1, NCHW 224x224, as relay.build instantiates them for each",
                "# ISA family's target; the families follow the ';', none: every family)"]
    while head and not head[-1].strip():
        head.pop()
    listed = {(w.template, w.args) for w in read_workloads(path)} if path.exists() else set()
    new = [w.line() for w in family_workloads(all_candidates)
           if (w.template, w.args) not in listed]
    path.write_text("\n".join(head + new + [""] + bench) + "\n", encoding="utf-8")
    return read_workloads(path)


def competing_layers(target: str) -> list[list[tuple[str, tuple[int, ...]]]]:
    """``(template, args)`` of the implementations of each blocked conv layer of the
    networks that has more than one at the pipeline's block, layer by layer."""
    from templtune import graph
    from templtune.graph.alter_layout import blockable_convs, nchwc_implementation, other_blocked

    block = pipeline_block(target)
    layers: dict[tuple, list[tuple[str, tuple[int, ...]]]] = {}
    for net_name in NETWORKS:
        net, params, _, _ = graph.testing.get_network(net_name, 1, "NCHW")
        for conv in blockable_convs(net, set(params), target):
            direct = nchwc_implementation(conv, target)
            others = other_blocked(conv, target, (block,), direct)
            if direct is None or not others:
                continue
            impls = [direct, *(impl for _, impl in others)]
            layers.setdefault(tuple(direct.args),
                              [(i.template, tuple(int(a) for a in i.args)) for i in impls])
    return list(layers.values())

