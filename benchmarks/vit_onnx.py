"""Write a ViT-B/16 with seeded random weights to an ONNX file, for ``benchmarks/inference.py``.

The model mirrors torchvision's ``vit_b_16`` layer for layer (the same module names, shapes
and initialisation): a 16x16 stride-16 patch convolution to 768 channels, a class token, a
learned position embedding, ``--layers`` encoder blocks (pre-LayerNorm with eps 1e-6,
``torch.nn.MultiheadAttention(768, 12, batch_first=True)``, an MLP 768 -> 3072 -> 768 with exact
GELU), a final LayerNorm and a 768 -> 1000 head on the class token. torchvision itself is not
imported: a CUDA build of its wheel fails to load on CPU-only hosts. Weights are drawn after
``torch.manual_seed(0)``; the head, zero in torchvision, is drawn too, so the logits depend on
every layer. Exported with the TorchScript-based exporter (``dynamo=False``) at opset 17, batch
1, input ``x`` of shape (1, 3, image, image); ``(image / 16)^2 + 1`` tokens.

Run::

    python3 benchmarks/vit_onnx.py [--image 224|384] [--layers 12] [--out /tmp/vit_b16_224.onnx]
    python3 benchmarks/inference.py --models /tmp/vit_b16_224.onnx
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any

HIDDEN, HEADS, MLP, PATCH, CLASSES = 768, 12, 3072, 16, 1000


def build(image: int, layers: int) -> Any:
    """The ViT-B/16 ``torch.nn.Module`` for ``image`` x ``image`` inputs, in eval mode."""
    import torch
    from torch import nn

    def layer_norm() -> nn.LayerNorm:
        return nn.LayerNorm(HIDDEN, eps=1e-6)

    class MLPBlock(nn.Sequential):
        def __init__(self) -> None:
            super().__init__(nn.Linear(HIDDEN, MLP), nn.GELU(), nn.Dropout(0.0),
                             nn.Linear(MLP, HIDDEN), nn.Dropout(0.0))
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)
                    nn.init.normal_(m.bias, std=1e-6)

    class EncoderBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1 = layer_norm()
            self.self_attention = nn.MultiheadAttention(HIDDEN, HEADS, dropout=0.0,
                                                        batch_first=True)
            self.dropout = nn.Dropout(0.0)
            self.ln_2 = layer_norm()
            self.mlp = MLPBlock()

        def forward(self, inp: torch.Tensor) -> torch.Tensor:
            x = self.ln_1(inp)
            x, _ = self.self_attention(x, x, x, need_weights=False)
            x = self.dropout(x) + inp
            return x + self.mlp(self.ln_2(x))

    class Encoder(nn.Module):
        def __init__(self, seq_length: int) -> None:
            super().__init__()
            self.pos_embedding = nn.Parameter(
                torch.empty(1, seq_length, HIDDEN).normal_(std=0.02))
            self.dropout = nn.Dropout(0.0)
            self.layers = nn.Sequential(*(EncoderBlock() for _ in range(layers)))
            self.ln = layer_norm()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.ln(self.layers(self.dropout(x + self.pos_embedding)))

    class VisionTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            n = image // PATCH
            self.conv_proj = nn.Conv2d(3, HIDDEN, PATCH, PATCH, bias=False)
            nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / (3 * PATCH * PATCH)))
            # torchvision's conv bias, zero-initialized (a Conv2d's own is drawn)
            self.conv_proj.bias = nn.Parameter(torch.zeros(HIDDEN))
            self.class_token = nn.Parameter(torch.zeros(1, 1, HIDDEN))
            self.encoder = Encoder(n * n + 1)
            head = nn.Linear(HIDDEN, CLASSES)
            # NOTE: torchvision zeroes the head; a random one makes the logits depend on the
            # encoder, so the cross-check sees every layer
            nn.init.normal_(head.weight, std=0.02)
            nn.init.normal_(head.bias, std=0.02)
            self.heads = nn.Sequential(OrderedDict(head=head))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.conv_proj(x)  # (n, 768, h/16, w/16)
            x = x.reshape(x.shape[0], HIDDEN, -1).permute(0, 2, 1)
            x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
            return self.heads(self.encoder(x)[:, 0])

    return VisionTransformer().eval()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", type=int, default=224, choices=(224, 384))
    ap.add_argument("--layers", type=int, default=12, help="encoder blocks (12: ViT-B)")
    ap.add_argument("--out", default=None, help="default /tmp/vit_b16_<image>.onnx")
    a = ap.parse_args(argv)
    if a.layers < 1:
        ap.error("--layers must be at least 1")

    import torch
    from models import export_onnx

    torch.manual_seed(0)
    model = build(a.image, a.layers)
    out = Path(a.out or f"/tmp/vit_b16_{a.image}.onnx")
    # NOTE: MultiheadAttention's eval-mode fast path is one fused aten op that the exporter
    # cannot write; with it off, the export has the plain MatMul/Softmax graph
    torch.backends.mha.set_fastpath_enabled(False)
    n = export_onnx(model, torch.rand(1, 3, a.image, a.image), out, "logits")
    print(f"ViT-B/16, {a.layers} layers, {a.image}x{a.image} ({(a.image // PATCH) ** 2 + 1} "
          f"tokens), {n / 1e6:.1f} M parameters: written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
