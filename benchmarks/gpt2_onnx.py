"""Write a GPT-2 small decoder with seeded random weights to an ONNX file, for ``benchmarks/inference.py``.

The model mirrors Hugging Face's ``GPT2Model`` past its embeddings, block for block, as its
"eager" ONNX exports carry it: per block a pre-LayerNorm (eps 1e-5), one ``Conv1D`` projection
768 -> 2304 (``addmm`` with the weight stored ``[in, out]``) split into query, key and value of
12 heads of 64, ``scores = q @ k^T / sqrt(64)``, the causal mask, softmax, ``@ v``, an output
projection and the residual; then a pre-LayerNorm MLP 768 -> 3072 -> 768 with the tanh GELU
(``gelu_new``) and its residual; a final LayerNorm. The causal mask takes either of the two
forms HF's exports have had: ``where`` (``torch.where(causal, scores, finfo.min)`` over a
boolean buffer, transformers up to 4.47) or ``add`` (a float mask of 0 and ``finfo.min``
added to the scores, later versions). The benchmarks feed one float input, so the model starts
at the embeddings' output ``x`` of shape (1, tokens, 768): a prefill of ``tokens`` tokens.
transformers itself is not imported. Weights are drawn after ``torch.manual_seed(0)`` (normal,
std 0.02, as HF initialises); exported with the TorchScript-based exporter at opset 17.

Run::

    python3 benchmarks/gpt2_onnx.py [--tokens 128] [--mask where|add] [--layers 12] [--out F]
    python3 benchmarks/inference.py --models /tmp/gpt2_128.onnx
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

HIDDEN, HEADS, MLP = 768, 12, 3072


def build(tokens: int, mask: str, layers: int) -> Any:
    """The GPT-2 small decoder as a ``torch.nn.Module`` in eval mode."""
    import torch
    from torch import nn

    head_dim = HIDDEN // HEADS
    minimum = torch.finfo(torch.float32).min

    class Conv1D(nn.Module):
        """HF's ``Conv1D``: a dense layer whose weight is stored ``[in, out]``."""

        def __init__(self, nx: int, nf: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.empty(nx, nf).normal_(std=0.02))
            self.bias = nn.Parameter(torch.empty(nf).normal_(std=0.02))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
            return out.view(x.size()[:-1] + (self.weight.size(-1),))

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_attn = Conv1D(HIDDEN, 3 * HIDDEN)
            self.c_proj = Conv1D(HIDDEN, HIDDEN)

        def heads(self, t: torch.Tensor) -> torch.Tensor:
            return t.view(t.shape[0], t.shape[1], HEADS, head_dim).permute(0, 2, 1, 3)

        def forward(self, h: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
            q, k, v = (self.heads(t) for t in self.c_attn(h).split(HIDDEN, dim=2))
            scores = torch.matmul(q, k.transpose(-1, -2))
            scores = scores / torch.full([], head_dim ** 0.5, dtype=scores.dtype)
            if mask == "where":
                scores = torch.where(causal, scores, torch.full([], minimum))
            else:
                scores = scores + causal
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3)
            return self.c_proj(ctx.reshape(h.shape[0], h.shape[1], HIDDEN))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(HIDDEN, eps=1e-5)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(HIDDEN, eps=1e-5)
            self.c_fc = Conv1D(HIDDEN, MLP)
            self.c_proj = Conv1D(MLP, HIDDEN)

        def forward(self, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln_1(x), causal)
            u = self.c_fc(self.ln_2(x))
            # HF's gelu_new: the tanh approximation
            g = 0.5 * u * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                            * (u + 0.044715 * torch.pow(u, 3.0))))
            return x + self.c_proj(g)

    class GPT2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(HIDDEN, eps=1e-5)
            keep = torch.tril(torch.ones(tokens, tokens, dtype=torch.bool))[None, None]
            if mask == "where":
                self.register_buffer("causal", keep)
            else:
                self.register_buffer("causal", torch.zeros(keep.shape).masked_fill(~keep,
                                                                                    minimum))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.h:
                x = block(x, self.causal)
            return self.ln_f(x)

    return GPT2().eval()


def main(argv: list[str] | None = None) -> int:
    from models import export_tokens, parse_tokens, token_parser

    ap = token_parser(__doc__, 12, "blocks (12: GPT-2 small)", "sequence length (prefill)")
    ap.add_argument("--mask", choices=("where", "add"), default="where",
                    help="the causal mask's form (default: where)")
    a = parse_tokens(ap, argv)

    out = Path(a.out or f"/tmp/gpt2_{a.tokens}.onnx")
    n = export_tokens(lambda: build(a.tokens, a.mask, a.layers), a.tokens, HIDDEN, out, "hidden")
    print(f"GPT-2 small, {a.layers} blocks, {a.tokens} tokens ({a.mask} mask), "
          f"{n / 1e6:.1f} M parameters: written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
