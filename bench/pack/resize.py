"""Resize throughput on one core: JPEG draft mode against decode-then-resize (goal >= 2x).

    .venv/bin/python bench/pack/resize.py [--photos 12] [--size 1600x1200] [--rounds 3]

Both arms run the same ``transform_image`` on the same photos in this process; the only
difference is ``draft``. Each arm's time is the best of ``--rounds`` interleaved rounds,
which filters out noise from other jobs on a shared machine. PSNR is draft vs reference.
"""

from __future__ import annotations

import argparse
import time

from _setup import MACHINE

from datahub.pack.image import psnr, synthetic_photo, transform_image
from datahub.pack.spec import TransformSpec


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--photos", type=int, default=12)
    p.add_argument("--size", default="1600x1200")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    w, h = map(int, args.size.split("x"))
    photos = [synthetic_photo(w, h, seed) for seed in range(args.photos)]
    mb = sum(map(len, photos)) / 1e6
    print(f"# resize, one core, {args.photos} JPEGs {w}x{h} ({mb:.1f} MB); {MACHINE}")
    print("| transform | decode-then-resize img/s | draft img/s | speed-up | min PSNR dB |")
    print("|---|---|---|---|---|")
    for spec in (TransformSpec(resize="shorter=256"), TransformSpec(resize="224x224", crop="center"),
                 TransformSpec(resize="shorter=512")):  # fmt: skip
        best = {True: float("inf"), False: float("inf")}
        for _ in range(args.rounds):
            for draft in (False, True):
                t = time.perf_counter()
                for i, photo in enumerate(photos):
                    transform_image(photo, spec, key=str(i), draft=draft)
                best[draft] = min(best[draft], time.perf_counter() - t)
        quality = min(psnr(transform_image(x, spec, key="q").data, transform_image(x, spec, key="q", draft=False).data)
                      for x in photos)  # fmt: skip
        ref, fast = args.photos / best[False], args.photos / best[True]
        name = spec.resize + (" crop" if spec.crop else "")
        print(f"| {name} | {ref:.1f} | {fast:.1f} | {fast / ref:.2f}x | {quality:.1f} |")


if __name__ == "__main__":
    main()
