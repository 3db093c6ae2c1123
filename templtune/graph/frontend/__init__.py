"""Model importers (``relay.frontend``)."""

from __future__ import annotations

from .onnx import from_onnx

__all__ = ["from_onnx"]
