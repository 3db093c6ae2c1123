"""Run an AVX-512 host as an AVX2 one (a proxy for the AVX2 family's logs and kernels).

Put this folder first on ``PYTHONPATH``; Python imports ``sitecustomize`` at start-up, and this
one makes llvmlite report a Zen 3 (``znver3``) without the AVX-512, AVX10 and AMX features, so
the Target's capability record, the packaged log (``x86.log``) and the generated code are the
AVX2 family's. It also sets ``ONEDNN_MAX_CPU_ISA=AVX2`` (unless set), which OpenVINO's CPU
plugin obeys (its convolutions become ``brgconv_avx2``), so OpenVINO runs AVX2 code on the same
cores. ONNX Runtime has no such switch: ``../ort_avx2.py`` makes a copy of it that takes its AVX2
kernels, to put on the path after this folder. The ratios are still a stand-in for a real AVX2
host, not its figures: Zen 4's caches are larger than Zen 3's. Run::

    python3 benchmarks/studies/ort_avx2.py /tmp/ort_avx2
    PYTHONPATH=benchmarks/studies/avx2_proxy:/tmp/ort_avx2 python3 benchmarks/inference.py \
        --models resnet-50 --engines ort,openvino --isolate
"""

import os as _os

import llvmlite.binding as _llvm

_os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")

_host_features = _llvm.get_host_cpu_features


def _avx2_features():  # type: ignore[no-untyped-def]
    features = _host_features()
    for name in list(features):
        if name.startswith(("avx512", "avx10", "amx", "evex512")):
            features[name] = False
    return features


_llvm.get_host_cpu_name = lambda: "znver3"
_llvm.get_host_cpu_features = _avx2_features
