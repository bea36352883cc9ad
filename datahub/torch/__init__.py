"""PyTorch datasets over datahub versions and a DataLoader helper. See docs/torch.md.

- ``VersionDataset``: a version's raw records through the cache or a mount;
- ``PackedDataset``: a packed version (``datahub pack``) with a global index over shards;
- ``TaskStream``: an IterableDataset pulling tasks (e.g. one per shard) from the task queue;
- ``image_loader``, ``open_file``, ``read_file``: file reads that send a mount no ``isatty()`` ioctl;
- ``recommend_loader_settings`` and ``StepTimer`` (data_time vs compute time per batch).

The names load on first use (PEP 562): importing ``torch`` costs 2-3 CPU-s, and the file
helpers (``datahub.torch.files``) and the sources need none of it, so a program or a test
module that only opens files, or only builds a ``MountSource``, does not pay for torch.
``from datahub.torch import VersionDataset`` imports torch as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the type checker sees the names; the interpreter loads them in __getattr__
    from datahub.torch.datasets import HintingSampler, PackedDataset, VersionDataset, decode_with_labels
    from datahub.torch.files import OPEN_BUFFER, image_loader, open_file, read_file
    from datahub.torch.loader import LoaderSettings, StepTimer, available_cpus, recommend_loader_settings
    from datahub.torch.sources import CacheSource, MountSource
    from datahub.torch.stream import TaskStream, shard_epoch

#: public name -> the submodule defining it (only datasets, loader and stream import torch)
_WHERE = {
    "HintingSampler": "datasets",
    "PackedDataset": "datasets",
    "VersionDataset": "datasets",
    "decode_with_labels": "datasets",
    "OPEN_BUFFER": "files",
    "image_loader": "files",
    "open_file": "files",
    "read_file": "files",
    "LoaderSettings": "loader",
    "StepTimer": "loader",
    "available_cpus": "loader",
    "recommend_loader_settings": "loader",
    "CacheSource": "sources",
    "MountSource": "sources",
    "TaskStream": "stream",
    "shard_epoch": "stream",
}

__all__ = [
    "CacheSource",
    "HintingSampler",
    "LoaderSettings",
    "MountSource",
    "OPEN_BUFFER",
    "PackedDataset",
    "StepTimer",
    "TaskStream",
    "VersionDataset",
    "available_cpus",
    "decode_with_labels",
    "image_loader",
    "open_file",
    "read_file",
    "recommend_loader_settings",
    "shard_epoch",
]  # the keys of _WHERE (tests/test_collect21_lazy_torch.py)


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'datahub.torch' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"datahub.torch.{where}"), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
