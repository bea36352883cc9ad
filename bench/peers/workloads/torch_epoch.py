#!/usr/bin/env python3
"""torch DataLoader epoch: map-style Dataset that opens each image from the root, decodes with Pillow,
resizes to 224x224; batch 64, num_workers 2, shuffle with a fixed seed. Reports images/s."""

import io

import numpy as np
from common import Deadline, base_args, emit, images, load_manifest, make_store
from PIL import Image


def main():
    p = base_args(__doc__)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args()
    try:
        import torch
        from torch.utils.data import DataLoader, Dataset
    except ImportError as ex:  # optional workload
        emit({"ok": False, "workload": "torch", "skipped": f"torch not importable: {ex}"})
        return
    files = images(load_manifest(a.manifest))
    store = make_store(a)

    class Images(Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            key = files[i]["key"]
            if store.kind == "path":
                img = Image.open(store.path(key))  # opened from the mount path, like ImageFolder
            else:
                img = Image.open(io.BytesIO(store.read_all(key)))
            img = img.convert("RGB").resize((224, 224), Image.BILINEAR)
            x = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1)
            return x, int(key.split("/")[1].split("_")[1])

    g = torch.Generator().manual_seed(a.seed)
    dl_ = DataLoader(Images(), batch_size=a.batch, shuffle=True, num_workers=a.workers, generator=g)
    dl = Deadline(a.max_seconds)
    n = 0
    for x, _y in dl_:
        n += x.shape[0]
        if dl.passed():
            break
    el = dl.elapsed()
    emit(
        {
            "ok": True,
            "workload": "torch",
            "images": n,
            "of": len(files),
            "seconds": el,
            "images_per_s": n / el,
            "capped": dl.hit,
            "batch": a.batch,
            "workers": a.workers,
            "torch": torch.__version__,
        }
    )


if __name__ == "__main__":
    main()
