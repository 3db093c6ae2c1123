"""Where worker threads run under ``TEMPLTUNE_BIND_THREADS``: one logical CPU each, the calling
thread left free. templtune's own pool pins its workers itself, in the order of
:func:`cpu_order`; for libgomp (``TEMPLTUNE_THREAD_POOL=gomp``) this module sets its places.

Why: on a small KVM guest the Linux scheduler sees a halted vCPU as preempted, so a worker
woken by a parallel call is often queued on the *caller's* vCPU, where it waits until the caller
has done its share and spun at the barrier for libgomp's spin count (milliseconds). Pinning each
worker to its own CPU makes the wake-up an IPI to that CPU instead (measured in
benchmarks/results/scaling.txt).

How: libgomp reads ``OMP_PROC_BIND``/``OMP_PLACES`` once, when it is loaded, so they are set
around that load only (and restored, so other OpenMP runtimes loaded later never see them).
Place 0 is every CPU the process may use and places 1.. are single CPUs, with ``close``
binding: the team's master (whichever thread calls the kernel, bound by libgomp to place 0)
stays as free as it was, and worker ``i`` is pinned to place ``i``. Users' own OpenMP settings
win: nothing is set where any of them is present.

Off by default (``TEMPLTUNE_BIND_THREADS``): in a process whose other thread pools pin and
spin on the same CPUs (ONNX Runtime and OpenVINO beside templtune, as in
``benchmarks/inference.py``), a pinned worker waits for them where a free one moves.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from templtune import config

__all__ = ["binding_active", "binding_environment", "cpu_order", "worker_places"]

#: OpenMP settings of the user's that turn templtune's own binding off.
USER_OMP_VARIABLES = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY")

_TOPOLOGY = Path("/sys/devices/system/cpu")


def _core_key(cpu: int, topology: Path) -> tuple[str, str] | None:
    """``(package, core)`` of a logical CPU from sysfs; None where sysfs does not say."""
    try:
        d = topology / f"cpu{cpu}" / "topology"
        return ((d / "physical_package_id").read_text().strip(),
                (d / "core_id").read_text().strip())
    except OSError:
        return None


def cpu_order(cpus: Iterable[int], topology: Path = _TOPOLOGY) -> list[int]:
    """``cpus`` with one logical CPU of each physical core first, then their SMT siblings.

    Workers take places in this order, so a team smaller than the CPU count spreads over
    physical cores before it doubles up on hyperthreads. Without topology information the
    CPUs keep their numeric order.
    """
    seen: set[tuple[str, str]] = set()
    first, rest = [], []
    for cpu in sorted(cpus):
        key = _core_key(cpu, topology)
        if key is None or key not in seen:
            first.append(cpu)
            if key is not None:
                seen.add(key)
        else:
            rest.append(cpu)
    return first + rest


def worker_places(cpus: Iterable[int], topology: Path = _TOPOLOGY) -> str | None:
    """``OMP_PLACES`` text: place 0 all of ``cpus``, then one place per CPU in
    :func:`cpu_order`; None for fewer than two CPUs (no workers to place)."""
    order = cpu_order(cpus, topology)
    if len(order) < 2:
        return None
    everything = ",".join(str(c) for c in sorted(order))
    return ",".join([f"{{{everything}}}"] + [f"{{{c}}}" for c in order])


@contextlib.contextmanager
def binding_environment() -> Iterator[bool]:
    """Set the binding variables for a libgomp load inside the block; yields whether it did.

    Nothing is set when ``TEMPLTUNE_BIND_THREADS`` is off, when the user set any of
    :data:`USER_OMP_VARIABLES`, or when the process may use one CPU only. The previous
    environment is restored on exit.
    """
    places = None
    if config.get("TEMPLTUNE_BIND_THREADS") and not any(
            config.get(v) for v in USER_OMP_VARIABLES) and hasattr(os, "sched_getaffinity"):
        places = worker_places(os.sched_getaffinity(0))
    if places is None:
        yield False
        return
    with config.process_environment(OMP_PROC_BIND="close", OMP_PLACES=places):
        yield True


def binding_active(lib: ctypes.CDLL) -> bool:
    """Whether the loaded libgomp binds threads to more than one place (its settings were
    read at its first load, so a copy another package loaded earlier may have none)."""
    try:
        return bool(lib.omp_get_proc_bind()) and int(lib.omp_get_num_places()) > 1
    except AttributeError:  # an OpenMP runtime older than 4.5
        return False
