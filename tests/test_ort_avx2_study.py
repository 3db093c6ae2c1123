"""benchmarks/studies/ort_avx2.py: the patch it applies to a copy of ONNX Runtime (the AVX2
proxy's peer), checked on a synthetic module, by the disassembler and on the installed ORT."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import ort_avx2  # noqa: E402


def test_patch_replaces_every_xcr0_read_in_the_copy_only(tmp_path: Path) -> None:
    src = tmp_path / "site" / "onnxruntime"
    (src / "capi").mkdir(parents=True)
    body = b"\x90" * 7 + ort_avx2.XCR0_READ + b"\xc3" * 5 + ort_avx2.XCR0_READ + b"\x0f\x01\xd0"
    lib = src / "capi" / "onnxruntime_pybind11_state.so"
    lib.write_bytes(body)
    (src / "__init__.py").write_text("")
    sites = ort_avx2.patch(src, tmp_path / "out")
    assert sites == [(lib.name, 7), (lib.name, 7 + len(ort_avx2.XCR0_READ) + 5)]
    patched = (tmp_path / "out" / "onnxruntime" / "capi" / lib.name).read_bytes()
    assert len(patched) == len(body)
    assert ort_avx2.XCR0_READ not in patched and patched.count(ort_avx2.AVX2_XCR0) == 2
    # a lone xgetbv (its result tested, not combined into XCR0) is left as it is
    assert patched.endswith(b"\x0f\x01\xd0")
    assert lib.read_bytes() == body
    mark = tmp_path / "out" / "onnxruntime" / ort_avx2.MARK
    assert mark.read_text().split() == [lib.name, "0x7", lib.name, f"{7 + 12 + 5:#x}"]


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs binutils' objdump")
@pytest.mark.parametrize("code", ["XCR0_READ", "AVX2_XCR0"])
def test_replacement_is_the_same_length_and_sets_xcr0_to_avx_state(tmp_path: Path,
                                                                   code: str) -> None:
    raw = tmp_path / "code.bin"
    raw.write_bytes(getattr(ort_avx2, code))
    text = subprocess.run(["objdump", "-D", "-b", "binary", "-m", "i386:x86-64", str(raw)],
                          check=True, capture_output=True, text=True).stdout
    insns = [line.split("\t")[-1].strip() for line in text.splitlines() if ":\t" in line]
    if code == "XCR0_READ":
        assert insns == ["xgetbv", "mov    %eax,%eax", "shl    $0x20,%rdx", "or     %rax,%rdx"]
    else:
        # eax = edx = 7: x87 | SSE | AVX; rdx as the original leaves it (XCR0) reads 7 too
        assert insns == ["mov    $0x7,%eax", "mov    $0x7,%edx", "xchg   %ax,%ax"]
    assert len(ort_avx2.AVX2_XCR0) == len(ort_avx2.XCR0_READ)


def test_installed_onnxruntime_has_the_xcr0_reads(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    sites = ort_avx2.patch(Path(ort.__file__).parent, tmp_path)
    assert any(name.startswith("onnxruntime_pybind11_state") for name, _ in sites), sites
    import inference

    assert inference.ORT_AVX2_MARK == ort_avx2.MARK
