"""Write torchvision's image classifiers, with seeded random weights, to ONNX files for
``benchmarks/inference.py``: the CNNs beyond ResNet that users bring (squeeze-excitation,
SiLU and hard-swish, depthwise, channel concatenation, channel shuffle, grouped convolutions).

Each model is ``torchvision.models.<name>(weights=None)`` in eval mode after
``torch.manual_seed(0)`` (no download), exported with the TorchScript-based exporter at opset
17, batch 1, input ``x`` of shape (1, 3, image, image), to ``--out-dir/<name>.onnx``. Where the
installed torchvision wheel was built for another torch variant (a CUDA wheel beside a CPU
torch) its C++ operators fail to load; the model definitions are pure Python, so the package
is then imported without them. Run::

    python3 benchmarks/torchvision_onnx.py [--models mobilenet_v3_large,efficientnet_b0]
        [--image 224] [--out-dir /tmp/zoo]
    python3 benchmarks/inference.py --models /tmp/zoo/efficientnet_b0.onnx --isolate
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from models import export_onnx  # noqa: E402

#: the default set: one of each family the ResNet benchmarks do not cover
MODELS = ("squeezenet1_1", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0",
          "mnasnet1_0", "shufflenet_v2_x1_0", "regnet_y_400mf", "densenet121", "googlenet",
          "resnext50_32x4d", "convnext_tiny")


def torchvision_models() -> Any:
    """``torchvision.models``, imported without torchvision's C++ operators if they fail to
    load."""
    try:
        import torchvision.models
    except (RuntimeError, OSError):
        spec = importlib.util.find_spec("torchvision")
        if spec is None:
            raise
        for name in [m for m in sys.modules if m == "torchvision" or
                     m.startswith("torchvision.")]:
            del sys.modules[name]
        pkg = types.ModuleType("torchvision")
        pkg.__path__ = list(spec.submodule_search_locations or [])
        pkg.__spec__ = spec
        sys.modules["torchvision"] = pkg
        import torchvision.models
    return torchvision.models


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated names")
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--out-dir", default="/tmp/zoo")
    a = ap.parse_args(argv)
    import torch

    tvm = torchvision_models()
    for name in a.models.split(","):
        if not hasattr(tvm, name):
            ap.error(f"torchvision.models has no {name!r}")
        torch.manual_seed(0)
        model = getattr(tvm, name)(weights=None).eval()
        out = Path(a.out_dir) / f"{name}.onnx"
        n = export_onnx(model, torch.randn(1, 3, a.image, a.image), out, "logits")
        print(f"{out}: {n / 1e6:.1f} M parameters", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
