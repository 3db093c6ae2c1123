"""Run a Zen 4 as a full-width AVX-512 host (the Intel family's logs, blocks and code paths).

Put this folder first on ``PYTHONPATH``; Python imports ``sitecustomize`` at start-up, and this
one makes llvmlite report an Ice Lake server (``icelake-server``: AVX-512 on 512-bit FMA units)
with the host's features less AMX, so the Target's capability record, the packaged log
(``x86_avx512.log``) and the generated code are those of ``IsaFamily.AVX512``. The host must
have AVX-512 (a Zen 4 runs every instruction of that code, on its 256-bit units): this is for
checking the family's code and tests on a host of the other AVX-512 family, not for timing it
(a Zen 4 has half the width that family's blocks are chosen for). Run::

    PYTHONPATH=benchmarks/studies/avx512_proxy python3 -m pytest -q
"""

import llvmlite.binding as _llvm

_host_features = _llvm.get_host_cpu_features


def _no_amx():  # type: ignore[no-untyped-def]
    features = _host_features()
    if not features.get("avx512f"):
        raise RuntimeError("avx512_proxy needs a host with AVX-512")
    for name in list(features):
        if name.startswith("amx"):
            features[name] = False
    return features


_llvm.get_host_cpu_name = lambda: "icelake-server"
_llvm.get_host_cpu_features = _no_amx
