"""Write a BERT-base encoder with seeded random weights to an ONNX file, for ``benchmarks/inference.py``.

The model mirrors Hugging Face's ``BertModel`` past its embeddings, layer for layer, with the
"eager" attention its ONNX exports have carried for years: per layer, query/key/value
projections 768 -> 768 split into 12 heads of 64, ``scores = q @ k^T / sqrt(64) + mask``,
softmax, ``@ v``, an output projection with the residual and a post-LayerNorm (eps 1e-12), an
MLP 768 -> 3072 -> 768 with exact GELU, its residual and LayerNorm; then the pooler (the first
token through a 768 -> 768 dense and tanh). The benchmarks feed one float input, so the model
starts at the embeddings' output ``x`` of shape (1, tokens, 768); the attention mask is a
padding mask held by the model (the last ``--pad`` tokens masked out, HF's additive
``(1 - mask) * -10000`` form), as a request padded to a fixed length has. With ``--ids`` it
starts at the token ids instead, int64 of shape (1, tokens), through HF's ``BertEmbeddings``
(word embeddings of a 30522-token vocabulary, learned positions, token type 0, LayerNorm):
what an export of the whole ``BertModel`` feeds. transformers itself is not imported. Weights are drawn after ``torch.manual_seed(0)`` (normal, std 0.02, as HF
initialises); exported with the TorchScript-based exporter (``dynamo=False``) at opset 17.

Run::

    python3 benchmarks/bert_onnx.py [--tokens 128] [--pad 16] [--layers 12] [--ids] [--out F]
    python3 benchmarks/inference.py --models /tmp/bert_base_128.onnx
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

HIDDEN, HEADS, MLP = 768, 12, 3072
#: BERT-base's vocabulary and position table
VOCAB, POSITIONS = 30522, 512


def build(tokens: int, pad: int, layers: int, ids: bool = False) -> Any:
    """The BERT-base encoder and pooler as a ``torch.nn.Module`` in eval mode."""
    import torch
    from torch import nn

    head_dim = HIDDEN // HEADS

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query = nn.Linear(HIDDEN, HIDDEN)
            self.key = nn.Linear(HIDDEN, HIDDEN)
            self.value = nn.Linear(HIDDEN, HIDDEN)

        def heads(self, t: torch.Tensor) -> torch.Tensor:
            return t.view(t.shape[0], t.shape[1], HEADS, head_dim).permute(0, 2, 1, 3)

        def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            q, k, v = self.heads(self.query(h)), self.heads(self.key(h)), self.heads(self.value(h))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(head_dim) + mask
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3)
            return ctx.reshape(h.shape[0], h.shape[1], HIDDEN)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = SelfAttention()
            self.attention_output = nn.Linear(HIDDEN, HIDDEN)
            self.attention_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
            self.intermediate = nn.Linear(HIDDEN, MLP)
            self.output = nn.Linear(MLP, HIDDEN)
            self.output_norm = nn.LayerNorm(HIDDEN, eps=1e-12)

        def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            a = self.attention_norm(self.attention_output(self.attention(h, mask)) + h)
            inter = nn.functional.gelu(self.intermediate(a))
            return self.output_norm(self.output(inter) + a)

    class Embeddings(nn.Module):
        """HF's ``BertEmbeddings`` for one segment (token type 0)."""

        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Embedding(VOCAB, HIDDEN)
            self.position = nn.Embedding(POSITIONS, HIDDEN)
            self.token_type = nn.Embedding(2, HIDDEN)
            self.norm = nn.LayerNorm(HIDDEN, eps=1e-12)
            self.register_buffer("position_ids", torch.arange(tokens)[None])
            self.register_buffer("token_type_ids", torch.zeros(1, tokens, dtype=torch.long))
            for e in (self.word, self.position, self.token_type):
                nn.init.normal_(e.weight, std=0.02)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.norm(self.word(input_ids) + self.token_type(self.token_type_ids)
                             + self.position(self.position_ids))

    class Bert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embeddings = Embeddings() if ids else None
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.pooler = nn.Linear(HIDDEN, HIDDEN)
            keep = torch.ones(1, tokens)
            keep[:, tokens - pad:] = 0.0
            # HF's extended mask: 0 where a token is kept, -10000 where it is padding
            self.register_buffer("mask", ((1.0 - keep) * -10000.0)[:, None, None, :])
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, std=0.02)
                    nn.init.normal_(m.bias, std=0.02)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.embeddings is not None:
                x = self.embeddings(x)
            for layer in self.layers:
                x = layer(x, self.mask)
            return torch.tanh(self.pooler(x[:, 0]))

    return Bert().eval()


def main(argv: list[str] | None = None) -> int:
    from models import export_tokens, parse_tokens, token_parser

    ap = token_parser(__doc__, 12, "encoder layers (12: BERT-base)")
    ap.add_argument("--pad", type=int, default=16, help="masked padding tokens at the end")
    ap.add_argument("--ids", action="store_true",
                    help="start at the int64 token ids, through the embeddings")
    a = parse_tokens(ap, argv, POSITIONS)
    if not 0 <= a.pad < a.tokens:
        ap.error("need 0 <= --pad < --tokens")

    out = Path(a.out or f"/tmp/bert_base_{a.tokens}{'_ids' if a.ids else ''}.onnx")
    n = export_tokens(lambda: build(a.tokens, a.pad, a.layers, a.ids), a.tokens, HIDDEN, out,
                      "pooled", VOCAB if a.ids else 0)
    print(f"BERT-base, {a.layers} layers, {a.tokens} tokens ({a.pad} padding), "
          f"{'from token ids, ' if a.ids else ''}{n / 1e6:.1f} M parameters: written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
