"""Write a small LLaMA-style decoder with seeded random weights to an ONNX file (a probe of the
importer and the attention fusion on a modern decoder, for ``benchmarks/inference.py``).

Per block: RMSNorm (eps 1e-6), q/k/v projections 1024 -> 1024 without bias split into 16
heads of 64, rotary position embeddings (precomputed cos/sin buffers, rotate-half form),
``scores = q @ k^T / sqrt(64) + causal`` (an additive ``finfo.min`` mask), softmax, ``@ v``,
an output projection and the residual; then RMSNorm and a SiLU-gated MLP 1024 -> 2816 -> 1024
and its residual; a final RMSNorm. Weights are drawn after ``torch.manual_seed(0)`` (normal,
std 0.02); exported as ``benchmarks/models.py`` exports. Run::

    python3 benchmarks/studies/llama_onnx.py [--tokens 128] [--layers 4] [--out F]
    python3 benchmarks/inference.py --models /tmp/llama_128.onnx --engines ort,openvino --isolate
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HIDDEN, HEADS, MLP = 1024, 16, 2816


def build(tokens: int, layers: int) -> Any:
    """The decoder as a ``torch.nn.Module`` in eval mode."""
    import torch
    from torch import nn

    hd = HIDDEN // HEADS

    class RMSNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(HIDDEN))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        return torch.cat((-x[..., hd // 2:], x[..., :hd // 2]), dim=-1)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = RMSNorm(), RMSNorm()
            self.q, self.k, self.v, self.o = (nn.Linear(HIDDEN, HIDDEN, bias=False)
                                              for _ in range(4))
            self.gate, self.up = (nn.Linear(HIDDEN, MLP, bias=False) for _ in range(2))
            self.down = nn.Linear(MLP, HIDDEN, bias=False)

        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
            h = self.norm1(x)
            q, k, v = (m(h).view(1, tokens, HEADS, hd).transpose(1, 2)
                       for m in (self.q, self.k, self.v))
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            s = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(hd) + mask
            a = torch.matmul(torch.softmax(s, dim=-1), v).transpose(1, 2)
            x = x + self.o(a.reshape(1, tokens, HIDDEN))
            h = self.norm2(x)
            return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = RMSNorm()
            inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
            angles = torch.outer(torch.arange(tokens).float(), inv)
            angles = torch.cat((angles, angles), -1)[None, None]
            self.register_buffer("cos", angles.cos())
            self.register_buffer("sin", angles.sin())
            causal = torch.full((tokens, tokens), torch.finfo(torch.float32).min).triu(1)
            self.register_buffer("mask", causal[None, None])
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                x = block(x, self.cos, self.sin, self.mask)
            return self.norm(x)

    return Decoder().eval()


def main(argv: list[str] | None = None) -> int:
    from models import export_tokens, parse_tokens, token_parser

    a = parse_tokens(token_parser(__doc__, 4, "decoder blocks", "sequence length (prefill)"),
                     argv)

    out = Path(a.out or f"/tmp/llama_{a.tokens}.onnx")
    n = export_tokens(lambda: build(a.tokens, a.layers), a.tokens, HIDDEN, out, "hidden")
    print(f"LLaMA-style decoder, {a.layers} blocks, {a.tokens} tokens, "
          f"{n / 1e6:.1f} M parameters: written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
