"""The Target's capability record, -mcpu/-mattr validation, and the readers that use them."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys

import llvmlite.binding as llvm
import numpy as np
import pytest

import templtune
from templtune.errors import TargetError
from templtune.target import Target, capabilities, kind_of
from templtune.target.llvm_cpu import _CPU_ISA, TRACKED, host_cpu


def test_kind_has_a_name_and_stays_a_string():
    t = Target("llvm -mcpu=znver3")
    assert t.kind.name == "llvm" and t.kind == "llvm" and str(t.kind) == "llvm"
    assert json.dumps(t.kind) == '"llvm"' and {"llvm": 1}[t.kind] == 1
    assert Target("cuda").kind.name == "cuda"
    assert kind_of("llvm -mcpu=core-avx2 -whatever=1") == "llvm"  # options not parsed


@pytest.mark.parametrize("text,lanes,acc,vnni,amx,fma", [
    ("llvm -mcpu=znver3", 8, 14, False, False, 256),
    ("llvm -mcpu=znver4", 16, 28, True, False, 256),  # 512-bit FMAs in two 256-bit halves
    ("llvm -mcpu=znver5", 16, 28, True, False, 512),
    ("llvm -mcpu=sapphirerapids", 16, 28, True, True, 512),
    ("llvm -mcpu=alderlake", 8, 14, True, False, 256),
    ("llvm -mcpu=znver4 -mattr=-avx512f", 8, 14, False, False, 256),
    ("llvm -mcpu=haswell -mattr=+avx512f", 16, 28, False, False, 512),
])
def test_cpu_records(text, lanes, acc, vnni, amx, fma):
    c = Target(text).capabilities
    assert c.fma_bits == fma
    assert not c.is_gpu and c.keys == ("cpu",) and c.has_avx2 and c.has_fma
    assert (c.lanes("float32"), c.accumulator_registers) == (lanes, acc)
    assert c.vector_registers == (32 if lanes == 16 else 16)
    assert c.lanes("int8") == 4 * lanes and c.lanes("float64") == lanes // 2
    assert (c.has_vnni, c.has_amx) == (vnni, amx)
    # the fallback budget: the register file less four operand registers
    assert c.accumulators(4) == c.vector_registers - 4


def test_record_is_cached_frozen_and_picklable():
    t = Target("llvm -mcpu=znver4 -num-cores=3")
    assert t.capabilities is Target(str(t)).capabilities and t.capabilities.cores == 3
    with pytest.raises(AttributeError):
        t.capabilities.cores = 4  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(t.capabilities)) == t.capabilities


def test_host_record_is_the_host():
    h, c = host_cpu(), capabilities("llvm")
    assert c.cpu == h.name and c.triple == h.triple
    assert c.features == h.enabled & TRACKED
    assert c.has_avx512 == bool(llvm.get_host_cpu_features().get("avx512f", False))
    native = Target("llvm -mcpu=native").capabilities
    assert (native.cpu, native.features) == (h.name, c.features)


def test_cuda_record():
    c = Target("cuda -arch=sm_80").capabilities
    assert c.is_gpu and c.arch == "sm_80" and c.keys == ("cuda", "gpu")
    assert (c.max_threads_per_block, c.max_shared_memory_per_block, c.max_registers_per_block,
            c.warp_size) == (1024, 49152, 65536, 32)
    c = Target("cuda -max_threads_per_block=512 -thread_warp_size=64").capabilities
    assert (c.max_threads_per_block, c.warp_size, c.arch) == (512, 64, None)
    assert c.cpu == host_cpu().name  # CPU facts are the host's
    c = Target("cuda -arch=8.0 -max_shared_memory_per_block=-1").capabilities
    assert (c.arch, c.max_shared_memory_per_block) == ("sm_80", 49152)  # -1: TVM's "unknown"


def test_cuda_limits_read_the_record():
    from templtune.codegen.cuda.build import limits_from_target

    lim = limits_from_target("cuda -arch=sm_80 -max_threads_per_block=256")
    assert (lim.arch, lim.max_threads_per_block, lim.max_shared_memory_per_block) == (
        "sm_80", 256, 49152)
    assert limits_from_target("cuda").arch == "sm_90"  # no -arch: the backend's default


# ------------------------------------------------------------------ -mcpu / -mattr checks
def test_unknown_cpu_raises_and_the_process_survives():
    code = ("from templtune.target import Target\n"
            "from templtune.errors import TargetError\n"
            "try:\n    Target('llvm -mcpu=notacpu')\n"
            "except TargetError as e:\n    print('RAISED', e)\n"
            "print('ALIVE')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "RAISED -mcpu=notacpu" in out.stdout and "ALIVE" in out.stdout
    assert "not a recognized processor" not in out.stderr  # LLVM's note is captured
    with pytest.raises(TargetError, match="-mcpu=notacpu"):
        Target("llvm -mcpu=notacpu")


def test_32bit_cpu_for_a_64bit_triple_raises(monkeypatch):
    from templtune.target import llvm_cpu

    with pytest.raises(TargetError, match="-mcpu=i686 is a 32-bit CPU"):
        Target("llvm -mcpu=i686")
    # names outside the tables are probed in a child process (LLVM aborts on them)
    monkeypatch.setattr(llvm_cpu, "_NO_64BIT", frozenset())
    monkeypatch.setattr(llvm_cpu, "_SSE_64BIT", frozenset())
    probe = llvm_cpu._emits_64bit.__wrapped__
    assert probe(host_cpu().triple, "pentium4") is False
    assert probe(host_cpu().triple, "core2") is True


@pytest.mark.parametrize("mattr,match", [
    ("+avx9", r"feature\(s\) \+avx9"),
    ("+avx2,+avx9,-sse9", r"\+avx9, -sse9"),
    ("avx2", "'avx2' must be '\\+feature' or '-feature'"),
])
def test_unknown_feature_names_the_feature(mattr, match):
    with pytest.raises(TargetError, match=match) as err:
        Target(f"llvm -mcpu=skylake -mattr={mattr}")
    assert "-mcpu" not in str(err.value)


def test_native_builds_and_runs():
    from templtune.codegen.llvm.testing import elementwise

    f = elementwise(lambda a: a * 2.0, ["float32"], "float32", 64)
    mod = templtune.build(f, target="llvm -mcpu=native")
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, dtype=np.float32)
    mod(x, y)
    np.testing.assert_allclose(y, 2 * x)


# ---------------------------------------------------------- the ISA table against LLVM itself
_PROBE = """
define void @f(ptr %p, ptr %q) #0 {
  %a = load <16 x float>, ptr %p
  %b = fadd <16 x float> %a, %a
  store <16 x float> %b, ptr %p
  %i = load <8 x i32>, ptr %q
  %q2 = getelementptr <8 x i32>, ptr %q, i64 1
  %k = load <8 x i32>, ptr %q2
  %j = mul <8 x i32> %i, %k
  store <8 x i32> %j, ptr %q
  %c = load <8 x float>, ptr %p
  %d = call <8 x float> @llvm.fma.v8f32(<8 x float> %c, <8 x float> %c, <8 x float> %c)
  store <8 x float> %d, ptr %p
  ret void
}
declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)
attributes #0 = { "min-legal-vector-width"="512" }
"""


def _asm(cpu: str) -> str:
    # NOTE: without FMA4, which LLVM prefers on the bdver CPUs that have both
    tm = llvm.Target.from_triple(host_cpu().triple).create_target_machine(
        cpu=cpu, features="-fma4", opt=2)
    return tm.emit_assembly(llvm.parse_assembly(_PROBE))


@pytest.mark.parametrize("cpu", sorted({*_CPU_ISA, "x86-64", "core2", "nehalem", "generic"}))
def test_isa_table_matches_llvm_codegen(cpu):
    try:
        c = Target(f"llvm -mcpu={cpu}").capabilities
    except TargetError:
        pytest.skip(f"this LLVM does not know {cpu}")
    asm = _asm(cpu)
    assert bool(re.search(r"%zmm\d", asm)) == c.has_avx512
    assert bool(re.search(r"vpmulld\s+[^\n]*%ymm", asm)) == c.has_avx2
    assert bool(re.search(r"vfmadd\d{3}ps", asm)) == c.has_fma


def _llc_cpus() -> list[str]:
    import shutil

    llc = shutil.which("llc")
    if llc is None:
        return []
    out = subprocess.run([llc, "-march=x86-64", "-mcpu=help"], capture_output=True, text=True,
                         timeout=120)
    text = out.stdout + out.stderr
    block = text.split("Available CPUs for this target:")[-1].split("Available features")[0]
    return [ln.split()[0] for ln in block.splitlines() if ln.strip()]


def test_every_cpu_llc_lists_is_described_or_rejected():
    cpus = _llc_cpus()
    if not cpus:
        pytest.skip("no llc here")
    for cpu in cpus:
        try:
            c = Target(f"llvm -mcpu={cpu}").capabilities
        except TargetError as e:
            assert "32-bit CPU" in str(e), cpu
            continue
        asm = _asm(cpu)
        assert bool(re.search(r"%zmm\d", asm)) == c.has_avx512, cpu
        assert bool(re.search(r"vpmulld\s+[^\n]*%ymm", asm)) == c.has_avx2, cpu


# --------------------------------------------------------------- every reader uses the record
@pytest.mark.parametrize("text", ["llvm", "llvm -mcpu=znver3", "llvm -mcpu=znver4",
                                  "llvm -mcpu=znver4 -mattr=-avx512f"])
def test_readers_agree_with_the_record(text):
    from templtune.auto_scheduler import ComputeDAG, HardwareParams, SearchTask
    from templtune.auto_scheduler.tile_prior import cpu_vector
    from templtune.codegen.llvm.compile import has_avx512, machine_spec
    from templtune.templates.x86._common import host_vector, target_vector

    c = Target(text).capabilities
    assert target_vector(text) == (c.lanes(), c.accumulator_registers)
    assert host_vector(text) == (c.lanes(), c.accumulators(4))
    assert has_avx512(Target(text)) == c.has_avx512
    spec = machine_spec(Target(text))
    assert (spec.triple, spec.cpu, spec.features) == (c.triple, c.cpu, c.llvm_features)
    a = templtune.te.placeholder((8, 8), name="A")
    b = templtune.te.compute((8, 8), lambda i, j: a[i, j] + 1.0, name="B")
    task = SearchTask(compute_dag=ComputeDAG([a, b]), target=text,
                      hardware_params=HardwareParams(1, 64, 64, 0, 0, 0, 0, 0))
    assert cpu_vector(task) == (c.lanes(), c.accumulator_registers)


def test_fallback_block_follows_the_target_not_the_host():
    from templtune.templates.x86._common import host_vector

    with Target("llvm -mcpu=znver3"):
        assert host_vector() == (8, 12)
    with Target("llvm -mcpu=znver4"):
        assert host_vector() == (16, 28)


def test_gpu_decisions_come_from_the_record():
    from templtune.auto_scheduler.search_task import HardwareParams, is_gpu_target
    from templtune.measure.candidate import is_device_target as _is_device

    for text, gpu in (("cuda -arch=sm_90", True), ("llvm", False)):
        assert is_gpu_target(Target(text)) is gpu and _is_device(text) is gpu
    hp = HardwareParams.default_for(Target("cuda -max_threads_per_block=256"))
    assert (hp.num_cores, hp.max_threads_per_block, hp.warp_size) == (-1, 256, 32)


def test_device_takes_the_first_word_and_tvm_aliases():
    assert templtune.device("llvm -mcpu=core-avx2") == templtune.cpu()
    assert templtune.device("cuda -arch=sm_80", 1) == templtune.cuda(1)
    assert templtune.device(Target("cuda")) == templtune.cuda()
    assert templtune.context("cpu") == templtune.cpu() and templtune.gpu(2) == templtune.cuda(2)
    with pytest.raises(ValueError, match="unknown device"):
        templtune.device("vulkan")
