"""DataLoader settings from the machine, and per-batch data_time vs compute time.

The point of packing is that the loader keeps up: ``StepTimer`` measures, for each
batch, how long the training loop waited for data (``data_time``) and how long it
worked on the batch (``compute_time``). A data fraction near zero means the GPU/CPU is
never starved; a large one says add workers, pack, or warm the cache.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from datahub.torch._torch import cuda_available


@dataclass(frozen=True)
class LoaderSettings:
    num_workers: int
    pin_memory: bool
    prefetch_factor: int | None
    persistent_workers: bool

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``torch.utils.data.DataLoader``."""
        out = asdict(self)
        if self.num_workers == 0:  # torch refuses these without workers
            out.pop("prefetch_factor")
            out["persistent_workers"] = False
        return out


def available_cpus() -> int:
    """CPUs this process may run on (cgroup/affinity aware, unlike os.cpu_count)."""
    return len(os.sched_getaffinity(0))


def recommend_loader_settings(
    *, cpus: int | None = None, cuda: bool | None = None, packed: bool = True, max_workers: int = 16
) -> LoaderSettings:
    """One worker per available CPU minus one for the training loop itself (capped).

    Packed shards are cheap to read, so two batches in flight per worker suffice; raw
    records read through a mount or the network get four to hide latency. Pinned memory
    only helps when batches go to a GPU.
    """
    cpus = available_cpus() if cpus is None else cpus
    workers = max(0, min(max_workers, cpus - 1))
    return LoaderSettings(
        num_workers=workers,
        pin_memory=cuda_available() if cuda is None else cuda,
        prefetch_factor=(2 if packed else 4) if workers else None,
        persistent_workers=workers > 0,
    )


@dataclass
class StepTimer:
    """Times each batch: ``data_time`` waiting for it, ``compute_time`` until the next request."""

    clock: Callable[[], float] = time.perf_counter
    data_times: list[float] = field(default_factory=list)
    compute_times: list[float] = field(default_factory=list)
    samples: int = 0

    def iterate(self, loader: Iterable[Any], batch_size: Callable[[Any], int] | None = None) -> Iterator[Any]:
        it = iter(loader)
        start = self.clock()
        while True:
            try:
                batch = next(it)
            except StopIteration:
                return
            got = self.clock()
            self.data_times.append(got - start)
            self.samples += batch_size(batch) if batch_size else _batch_len(batch)
            yield batch
            start = self.clock()  # the loop asks for the next batch: its compute step is over
            self.compute_times.append(start - got)

    def report(self) -> dict[str, float]:
        data, compute = sum(self.data_times), sum(self.compute_times)
        n = max(1, len(self.data_times))
        total = data + compute
        return {
            "batches": len(self.data_times),
            "samples": self.samples,
            "data_time_per_batch": data / n,
            "compute_time_per_batch": compute / n,
            "data_fraction": data / total if total else 0.0,
            "samples_per_second": self.samples / total if total else 0.0,
        }


def _batch_len(batch: Any) -> int:
    """Samples in a collated batch: the length of its first field.

    Why a mapping's first value: a transform returning ``{"image": …, "label": …}`` is
    collated into a dict of batched tensors, and ``len`` of the dict counted its keys."""
    if isinstance(batch, Mapping):
        batch = next(iter(batch.values()))
    first = batch[0] if isinstance(batch, (list, tuple)) else batch
    return len(first)
