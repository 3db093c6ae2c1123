"""Pre-tuned reference logs (TVM's "tophub", offline).

Reference logs are AutoTVM JSON-lines files under ``<dir>/<target key>/*.log``, where the search
directories are, in order, those listed in ``TEMPLTUNE_REFERENCE_LOG_DIR`` (``os.pathsep``
separated), ``templtune/logs`` and the ``logs/`` folder next to the package (a source checkout).

They serve two purposes: the root fallback context answers a miss from them before building a
plain fallback config, and templates may call
``cfg.fallback_with_reference_log(load_reference_log(target, "conv2d_NCHWc.x86"))`` to adapt a
similar workload's config. Both are off with ``TEMPLTUNE_NO_TOPHUB=1`` or
``autotvm.env.set_use_reference_logs(False)``.

CPU logs come per ISA family (:data:`FAMILY_LOGS`: configs tuned on an AVX2 machine are not
the best ones on an AVX-512 machine, and the other way round; nor are those of an AVX-512 CPU
with full-width FMA units on one that splits each 512-bit FMA in two, AMD Zen 4, where
Winograd wins layers that the direct kernel wins elsewhere): of the files named there, only
the target's family's are used, chosen by the Target's capability record; when that family has
no log, the nearest family's that has one serves (:data:`NEAREST`), with a warning. Other
``*.log`` files are always used.
"""

from __future__ import annotations

import enum
import importlib.util
import logging
from pathlib import Path
from typing import Any

from templtune import config
from templtune.autotvm import env
from templtune.autotvm.task.target_compat import as_target, target_keys

logger = logging.getLogger("autotvm")


class IsaFamily(enum.Enum):
    """The x86 vector ISA families that packaged CPU logs are tuned for."""

    AVX2 = "avx2"
    AVX512 = "avx512"
    #: AVX-512 code on 256-bit FMA units (Capabilities.fma_bits): the AVX-512 family's
    #: workloads and blockings, timed on such a CPU
    AVX512_256 = "avx512_256"

    @property
    def isa(self) -> IsaFamily:
        """The family whose code (and so whose workloads and channel blocks) this one runs."""
        return IsaFamily.AVX512 if self is IsaFamily.AVX512_256 else self


#: the packaged log of each family, under ``<dir>/cpu/`` (``x86.log`` predates the families)
FAMILY_LOGS: dict[IsaFamily, str] = {IsaFamily.AVX2: "x86.log",
                                     IsaFamily.AVX512: "x86_avx512.log",
                                     IsaFamily.AVX512_256: "x86_avx512_256.log"}
_FAMILY_OF_FILE = {name: fam for fam, name in FAMILY_LOGS.items()}
#: the families whose log serves, in order, when a family (None: a CPU below AVX2) has none
NEAREST: dict[IsaFamily | None, tuple[IsaFamily, ...]] = {
    IsaFamily.AVX2: (IsaFamily.AVX512_256, IsaFamily.AVX512),
    IsaFamily.AVX512: (IsaFamily.AVX512_256, IsaFamily.AVX2),
    IsaFamily.AVX512_256: (IsaFamily.AVX512, IsaFamily.AVX2),
    None: (IsaFamily.AVX2, IsaFamily.AVX512_256, IsaFamily.AVX512),
}
# NOTE: warn once per (wanted family, file) rather than at every dispatch miss.
_warned: set[tuple[IsaFamily | None, str]] = set()


def isa_family(target: Any) -> IsaFamily | None:
    """The ISA family of a CPU target (AVX-512 F on full-width or on 256-bit FMA units, else
    AVX2), None for other targets."""
    caps = as_target(target).capabilities
    if caps.is_gpu or caps.kind != "llvm":
        return None
    if caps.has_avx512:
        return IsaFamily.AVX512_256 if caps.fma_bits < caps.vector_bits else IsaFamily.AVX512
    return IsaFamily.AVX2 if caps.has_avx2 else None


def _by_family(files: list[Path], family: IsaFamily | None) -> list[Path]:
    """``files`` less the family logs that do not fit ``family`` (see the module doc)."""
    fam_files = [f for f in files if f.name in _FAMILY_OF_FILE]
    if not fam_files:
        return files
    own = [f for f in fam_files if _FAMILY_OF_FILE[f.name] is family]
    if own:
        keep = set(own)
    else:
        # NOTE: no log for this family (or a CPU below AVX2): the nearest family's configs
        # still beat the untuned fallbacks, so they serve, with a warning. One family only:
        # ranking records timed on different CPUs against each other means nothing.
        near = next(fam for fam in NEAREST[family]
                    if any(_FAMILY_OF_FILE[f.name] is fam for f in fam_files))
        keep = {f for f in fam_files if _FAMILY_OF_FILE[f.name] is near}
        for f in sorted(keep):
            key = (family, str(f))
            if key not in _warned:
                _warned.add(key)
                logger.warning("no %s reference log; using %s (tuned for %s)",
                               family.value if family else "baseline x86", f, near.value)
    return [f for f in files if f.name not in _FAMILY_OF_FILE or f in keep]


def reference_log_dirs() -> list[Path]:
    """Directories searched for reference logs (existing ones only)."""
    dirs = list(config.get("TEMPLTUNE_REFERENCE_LOG_DIR"))
    pkg = Path(__file__).resolve().parents[2]  # .../templtune
    dirs += [pkg / "logs", pkg.parent / "logs"]
    # NOTE: the pre-tuned logs ship inside the templates package (templates/logs/<key>/*.log);
    # locate it by spec so autotvm does not import the (higher-level) templates.
    spec = importlib.util.find_spec("templtune.templates")
    if spec is not None and spec.submodule_search_locations:
        dirs += [Path(p) / "logs" for p in spec.submodule_search_locations]
    return [d for d in dirs if d.is_dir()]


def reference_log_files(target: Any) -> list[Path]:
    """Reference log files for the keys of ``target`` (empty when switched off); of the CPU
    family logs, those of the target's ISA family (see the module doc)."""
    if not env.reference_logs_enabled():
        return []
    tgt = as_target(target)
    files: list[Path] = []
    for key in target_keys(tgt):
        for d in reference_log_dirs():
            sub = d / key
            if sub.is_dir():
                files += sorted(sub.glob("*.log"))
    return _by_family(files, isa_family(tgt)) if "cpu" in target_keys(tgt) else files


def load_reference_log(target: Any, workload_name: str) -> list[tuple[Any, Any]]:
    """Successful reference records of task ``workload_name`` for ``target``'s keys."""
    from templtune.autotvm.record import load_from_file

    out = []
    for f in reference_log_files(target):
        for inp, res in load_from_file(f):
            if inp.task.name == workload_name and int(res.error_no) == 0:
                out.append((inp, res))
    return out


def reference_context(target: Any) -> Any:
    """An ``ApplyHistoryBest`` over the reference logs of ``target``, or None if there are
    none."""
    files = reference_log_files(target)
    if not files:
        return None
    from templtune.autotvm.history import ApplyHistoryBest

    logger.debug("reference logs for %s: %s", target, [str(f) for f in files])
    return ApplyHistoryBest([str(f) for f in files])
