"""The one module of datahub.torch that imports torch; the rest import from here."""

from __future__ import annotations

import warnings
from typing import Any

with warnings.catch_warnings():  # torch warns at import when NumPy is absent; we never need it
    warnings.filterwarnings("ignore", message=".*NumPy.*")
    import torch
    from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler, get_worker_info

from datahub.pack.image import decode_rgb

__all__ = ["DataLoader", "Dataset", "IterableDataset", "Sampler", "cuda_available", "get_worker_info",
           "image_tensor", "torch"]  # fmt: skip


def image_tensor(
    data: bytes | memoryview, size: tuple[int, int] | None = None, *, key: str = "", draft: bool = True
) -> Any:
    """Encoded image -> uint8 tensor of shape (3, H, W), optionally resized to ``size`` (W, H).

    ``draft`` lets JPEGs decode at a reduced DCT scale when ``size`` is smaller.
    """
    width, height, raw = decode_rgb(bytes(data), size, key=key, draft=draft)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(height, width, 3).permute(2, 0, 1)


def cuda_available() -> bool:
    return torch.cuda.is_available()
