"""PyTorch datasets over datahub versions and a DataLoader helper. See docs/torch.md.

- ``VersionDataset``: a version's raw records through the cache or a mount;
- ``PackedDataset``: a packed version (``datahub pack``) with a global index over shards;
- ``TaskStream``: an IterableDataset pulling tasks (e.g. one per shard) from the task queue;
- ``image_loader``, ``open_file``, ``read_file``: file reads that send a mount no ``isatty()`` ioctl;
- ``recommend_loader_settings`` and ``StepTimer`` (data_time vs compute time per batch).
"""

from datahub.torch.datasets import HintingSampler, PackedDataset, VersionDataset, decode_with_labels
from datahub.torch.files import OPEN_BUFFER, image_loader, open_file, read_file
from datahub.torch.loader import LoaderSettings, StepTimer, available_cpus, recommend_loader_settings
from datahub.torch.sources import CacheSource, MountSource
from datahub.torch.stream import TaskStream, shard_epoch

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
]
