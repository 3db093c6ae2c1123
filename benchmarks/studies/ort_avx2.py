"""A copy of the installed ONNX Runtime that runs its AVX2 kernels on an AVX-512 host.

ONNX Runtime has no switch to cap its ISA (OpenVINO has ``ONEDNN_MAX_CPU_ISA``), so the AVX2
proxy (``avx2_proxy/sitecustomize.py``) compared templtune's AVX2 code with ORT's AVX-512
kernels. MLAS, ORT's kernel library, picks its kernels once, from ``cpuid`` and the OS's
enabled register state (``xgetbv``): AVX-512 kernels only where XCR0 enables the ZMM state
(bits 5-7), AMX only where it enables the tile state (bits 17-18). This script copies the
installed ``onnxruntime`` package to ``OUT/onnxruntime`` and, in the copy's shared libraries,
replaces each ``xgetbv`` whose result is combined into a 64-bit XCR0 value (two per library in
ORT 1.32: MLAS's platform set-up and one other CPU-feature probe) by constants reporting
x87 + SSE + AVX state only::

    xgetbv; mov eax,eax; shl rdx,32; or rdx,rax   ->   mov eax,7; mov edx,7; nop

so MLAS takes the path it takes on an AVX2 machine (its FMA3 / AVX2 kernels). The original
installation is left alone. Run::

    python3 benchmarks/studies/ort_avx2.py /tmp/ort_avx2
    PYTHONPATH=benchmarks/studies/avx2_proxy:/tmp/ort_avx2 python3 benchmarks/inference.py ...

and check which kernels ran with ``--check`` (``perf`` samples a conv and counts the hot
instructions that name ``zmm`` and ``ymm`` registers in both copies).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: xgetbv; mov eax,eax; shl rdx,32; or rdx,rax (the 64-bit XCR0 read)
XCR0_READ = bytes.fromhex("0f01d0" "89c0" "48c1e220" "4809c2")
#: mov eax,7; mov edx,7; 2-byte nop: XCR0 = x87 | SSE | AVX, the same length
AVX2_XCR0 = bytes.fromhex("b807000000" "ba07000000" "6690")

#: the file left in the copy (benchmarks/inference.py's ORT_AVX2_MARK): the patched sites
MARK = "AVX2_KERNELS"

CHECK = """
import numpy as np, onnx, onnxruntime as ort
from onnx import helper, TensorProto
w = np.random.default_rng(0).standard_normal((256, 256, 3, 3)).astype("float32")
g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "c",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 28, 28])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    [onnx.numpy_helper.from_array(w, "w")])
so = ort.SessionOptions(); so.intra_op_num_threads = 1
s = ort.InferenceSession(helper.make_model(g).SerializeToString(), so)
x = np.ones((1, 256, 28, 28), "float32")
for _ in range(300):
    s.run(None, {"x": x})
"""


def patch(src: Path, out: Path) -> list[tuple[str, int]]:
    """Copy the package at ``src`` to ``out/onnxruntime``; patch its modules' XCR0 reads."""
    dst = out / "onnxruntime"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    done: list[tuple[str, int]] = []
    for lib in sorted(dst.rglob("*.so*")):
        data = bytearray(lib.read_bytes())
        sites = []
        at = data.find(XCR0_READ)
        while at >= 0:
            data[at:at + len(XCR0_READ)] = AVX2_XCR0
            sites.append(at)
            at = data.find(XCR0_READ, at + len(XCR0_READ))
        if sites:
            lib.write_bytes(bytes(data))
            done += [(lib.name, s) for s in sites]
    if done:  # benchmarks/inference.py reports the ORT it runs as this copy
        (dst / MARK).write_text("".join(f"{name} {at:#x}\n" for name, at in done))
    return done


def vector_shares(package: Path, pythonpath: str) -> dict[str, float]:
    """Shares of a conv's perf samples in the ORT ``package`` (the one ``pythonpath`` imports)
    on instructions naming zmm / ymm."""
    module = next((package / "capi").glob("onnxruntime_pybind11_state*.so"))
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        env = {**os.environ, "PYTHONPATH": pythonpath}
        subprocess.run(["perf", "record", "-q", "-o", data, sys.executable, "-c", CHECK],
                       check=True, env=env, capture_output=True)
        # the module is stripped: perf names each sampled instruction by its file offset
        text = subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "sym",
                               "--dsos", module.name], check=True, capture_output=True,
                              text=True).stdout
    sample = r"([\d.]+)%\s+\[\.\]\s+0x([0-9a-f]+)"
    hot = {int(m[2], 16): float(m[1]) for m in re.finditer(sample, text)}
    hot = dict(sorted(hot.items(), key=lambda kv: -kv[1])[:200])
    if not hot:
        raise RuntimeError("perf recorded no samples in ORT's module")
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={min(hot)}",
                          f"--stop-address={max(hot) + 16}", str(module)], check=True,
                         capture_output=True, text=True).stdout
    insn = {int(m[1], 16): m[2] for m in re.finditer(r"^\s*([0-9a-f]+):\s*(.*)$", asm, re.M)}
    total = sum(hot.values())
    return {reg: sum(pct for at, pct in hot.items() if reg in insn.get(at, "")) / total
            for reg in ("zmm", "ymm")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder to put on PYTHONPATH")
    ap.add_argument("--check", action="store_true",
                    help="perf a conv in both copies: the zmm and ymm shares of its samples")
    a = ap.parse_args()
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or spec.origin is None:
        sys.exit("onnxruntime is not installed")
    src = Path(spec.origin).parent
    if src.resolve().is_relative_to(a.out.resolve()):
        sys.exit(f"{src} is already the patched copy: run without {a.out} on PYTHONPATH")
    sites = patch(src, a.out)
    if not sites:
        sys.exit("no 64-bit XCR0 read found: this ONNX Runtime build differs; nothing patched")
    for name, at in sites:
        print(f"patched {name} at {at:#x}")
    print(f"PYTHONPATH={a.out} runs ORT's AVX2 kernels")
    if a.check:
        for label, package, path in (("installed", src, ""),
                                     ("patched", a.out / "onnxruntime", str(a.out))):
            shares = vector_shares(package, path)
            print(f"{label}: a 3x3 conv's samples in ORT on zmm instructions "
                  f"{shares['zmm']:.1%}, on ymm {shares['ymm']:.1%}")


if __name__ == "__main__":
    main()
