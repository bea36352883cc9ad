"""End to end: import generated photos, pack them, train a tiny CNN for one epoch from the pack.

    .venv/bin/python examples/train_packed.py [--home DIR] [--images 256] [--workers 2]

Everything lives under ``--home`` (a fresh temporary directory by default): the SQLite
catalog, the object store (file://), the cache. The same steps on the command line:

    datahub import ./photos.jsonl --to photos
    datahub pack photos@v1 --to photos-64 --resize 64x64 --crop center --workers 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

# datahub and torch are imported by the functions that use them: `--help` answered after
# 4 CPU-s of `import torch` (a test asks every documented script for its flags)
if TYPE_CHECKING:
    from torch import nn

CLASSES = 4


def _torch():
    """torch, ``torch.nn`` and ``DataLoader``, imported quietly (NumPy's warning is not ours)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*NumPy.*")
        import torch
        from torch import nn
        from torch.utils.data import DataLoader
    return torch, nn, DataLoader


def make_photos(root: Path, count: int) -> Path:
    """``count`` photo-like JPEGs with a class label each, and a manifest naming them."""
    from datahub.pack.image import synthetic_photo

    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(count):
        path = root / f"class{i % CLASSES}" / f"{i:05d}.jpg"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(synthetic_photo(320, 240, i))
        lines.append(json.dumps({"url": path.as_uri(), "key": path.relative_to(root).as_posix(),
                                 "labels": {"class": i % CLASSES}}))  # fmt: skip
    manifest = root.parent / "photos.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def to_training_pair(data, labels):
    """Packed JPEG bytes -> (float image in [0, 1], class index)."""
    from datahub.torch._torch import image_tensor

    return image_tensor(data).float().div_(255), labels["class"]


def tiny_cnn() -> nn.Module:
    _, nn, _ = _torch()
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, CLASSES),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", help="state directory (default: a new temporary directory)")
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2, help="pack worker processes")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    from datahub.catalog import open_catalog
    from datahub.config import load_config
    from datahub.ingest.importer import import_source
    from datahub.pack import PackSpec, pack
    from datahub.storage import StoreRegistry
    from datahub.torch import CacheSource, PackedDataset, StepTimer, recommend_loader_settings

    torch, nn, DataLoader = _torch()
    home = Path(args.home or tempfile.mkdtemp(prefix="datahub-example-"))
    config = load_config(env={}, overrides={"home": str(home / "var")})
    catalog = open_catalog(config.resolved_catalog_url)
    t0 = time.perf_counter()

    manifest = make_photos(home / "photos", args.images)
    with StoreRegistry(config) as stores:
        imported = import_source(catalog, config, stores, str(manifest), "photos")
    print(
        f"imported {imported.scanned} photos as photos@v{imported.version.seq} ({time.perf_counter() - t0:.1f}s)"
    )

    t1 = time.perf_counter()
    spec = PackSpec.parse(resize="64x64", crop="center", shard_size="4MiB")
    result = pack(config, catalog, "photos@latest", "photos-64", spec, workers=args.workers)
    v = result.version
    print(f"packed {result.samples} samples into {result.shards} shards as {v.dataset}@v{v.seq} "
          f"({result.samples / (time.perf_counter() - t1):.0f} images/s with {args.workers} workers)")  # fmt: skip
    print(f"lineage: {v.lineage['source']} job {v.lineage['job']}")

    source = CacheSource(config)
    dataset = PackedDataset.open(catalog, source, "photos-64", cache_dir=home / "var" / "shards",
                                 transform=to_training_pair)  # fmt: skip
    source.close()
    settings = recommend_loader_settings(packed=True)
    print(f"DataLoader settings: {settings.kwargs()}")
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, **settings.kwargs())

    torch.manual_seed(0)
    model = tiny_cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    timer = StepTimer()
    loss = torch.tensor(0.0)
    for images, classes in timer.iterate(loader):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(images), classes)
        loss.backward()
        optimizer.step()
    report = timer.report()
    print(f"trained 1 epoch: {report['samples']} images in {report['batches']} batches, "
          f"{report['samples_per_second']:.0f} images/s, data_time {report['data_time_per_batch'] * 1000:.1f} ms/batch "
          f"vs compute {report['compute_time_per_batch'] * 1000:.1f} ms/batch "
          f"(data fraction {report['data_fraction']:.1%}), final loss {loss.item():.3f}")  # fmt: skip
    catalog.close()
    print(f"total {time.perf_counter() - t0:.1f}s; state in {home}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
