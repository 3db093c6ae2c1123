"""Ready-made AutoTVM templates, installed as ``templtune.templates``.

``load("x86")`` imports (and so registers) a target family's templates; :data:`CATALOG`
describes the x86 ones for the command line (argument names, an example workload, the input
layouts) so ``templtune templates`` can list them and ``templtune tune`` can build inputs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TemplateInfo", "CATALOG", "load", "reference_log_dir"]


@dataclass(frozen=True, slots=True)
class TemplateInfo:
    """One template as the command line shows it."""

    name: str
    family: str
    params: tuple[str, ...]
    example: tuple[int, ...]
    summary: str
    n_required: int = -1  # parameters without a default (-1: all)

    def check_args(self, args: tuple[int, ...]) -> None:
        """Raise ``ValueError`` (one clear line) if ``args`` do not fit the parameters."""
        need = len(self.params) if self.n_required < 0 else self.n_required
        if not need <= len(args) <= len(self.params):
            want = ",".join(self.params)
            raise ValueError(f"template {self.name!r} takes {need}"
                             f"{'' if need == len(self.params) else f'-{len(self.params)}'}"
                             f" arguments ({want}), got {len(args)}: "
                             f"{','.join(str(a) for a in args)}")


_CONV = ("N", "H", "W", "CO", "CI", "KH", "KW", "stride", "padding")
CATALOG: dict[str, TemplateInfo] = {
    t.name: t for t in (
        TemplateInfo("conv2d_nchw", "x86", _CONV + ("prepacked",),
                     (1, 7, 7, 512, 512, 3, 3, 1, 1),
                     "direct conv2d, NCHW data / OIHW kernel (or prepacked [CO/b, CI, KH, KW, "
                     "b]), packed output-channel blocks", n_required=9),
        TemplateInfo("conv2d_nchw_wvec", "x86", _CONV, (1, 224, 224, 64, 3, 7, 7, 2, 3),
                     "direct conv2d, NCHW data / OIHW kernel / NCHW output, vectorized along "
                     "the output width (few input channels: the ResNet stem)"),
        TemplateInfo("conv2d_nhwc", "x86", _CONV, (1, 56, 56, 64, 64, 3, 3, 1, 1),
                     "direct conv2d, NHWC data / HWIO kernel"),
        TemplateInfo("depthwise_conv2d_nchw", "x86",
                     ("N", "H", "W", "C", "M", "KH", "KW", "stride", "padding"),
                     (1, 56, 56, 64, 1, 3, 3, 1, 1), "depthwise conv2d, NCHW, [C, M, KH, KW]"),
        TemplateInfo("dense", "x86", ("M", "N", "K", "prepacked"), (1, 1000, 512),
                     "out = data @ weight.T, data [M, K], weight [N, K] (or prepacked "
                     "[N/b, K, b])", n_required=3),
        TemplateInfo("conv2d_winograd", "x86", _CONV + ("pre_transformed", "kblock"),
                     (1, 7, 7, 512, 512, 3, 3, 1, 1),
                     "Winograd F(2x2|4x4, 3x3) conv2d, NCHW, stride 1", n_required=9),
    )
}


def load(family: str = "x86") -> None:
    """Import (and so register) the templates of ``family`` (``"x86"`` or ``"cuda"``)."""
    if family not in ("x86", "cuda"):
        raise ValueError(f"unknown template family {family!r} (x86, cuda)")
    importlib.import_module(f"{__name__}.{family}")


def reference_log_dir() -> Path:
    """The folder of the pre-tuned reference logs shipped with the package
    (``<dir>/<target key>/*.log``)."""
    return Path(__file__).resolve().parent / "logs"
