#!/usr/bin/env python3
"""Deterministic synthetic dataset: N JPEG images (~50-200 KB) + large random blobs.

Writes the files to a local directory (this copy is also the "local disk" baseline),
writes a manifest (key, size) used by every workload, and uploads everything to the
S3 bucket. Same seed + same Pillow/libjpeg build => byte-identical files; the manifest
records a digest so two runs can be compared.

  python gen_data.py                 # generate (if missing) + upload
  python gen_data.py --upload-only   # after restarting moto (it keeps objects in memory)
"""

import argparse
import hashlib
import io
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import PIL
from PIL import Image, ImageDraw, ImageFilter

KB = 1024
MiB = 1024 * 1024


def make_image(args):
    """Return (key, jpeg bytes) for image i; depends only on (seed, i)."""
    seed, i, n_classes, lo_kb, hi_kb = args
    rng = np.random.default_rng([seed, i])
    target = rng.uniform(lo_kb * 1.1, hi_kb * 0.9) * KB
    w = int(rng.integers(448, 801))
    h = int(w * rng.choice([0.75, 1.0, 1.333]))
    base = rng.integers(0, 256, size=(int(rng.integers(3, 9)), int(rng.integers(3, 9)), 3), dtype=np.uint8)
    img = Image.fromarray(base).resize((w, h), Image.BICUBIC)
    d = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(3, 12))):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        x1, y1 = x0 + int(rng.integers(10, w // 2)), y0 + int(rng.integers(10, h // 2))
        col = tuple(int(c) for c in rng.integers(0, 256, 3))
        (d.ellipse if rng.random() < 0.5 else d.rectangle)([x0, y0, x1, y1], fill=col)
    a = np.asarray(img.filter(ImageFilter.GaussianBlur(1.5)), dtype=np.float32)
    noise = rng.standard_normal(size=a.shape, dtype=np.float32)
    sigma, q = 10.0, 90
    best = None
    for _ in range(6):  # adjust texture (noise level) until the JPEG size is near the target
        im = Image.fromarray(np.clip(a + sigma * noise, 0, 255).astype(np.uint8))
        b = io.BytesIO()
        im.save(b, "JPEG", quality=q)
        data = b.getvalue()
        if best is None or abs(len(data) - target) < abs(len(best) - target):
            best = data
        if abs(len(data) - target) <= 0.12 * target:
            break
        sigma = float(np.clip(sigma * (target / len(data)) ** 1.5, 0.5, 80.0))
    key = f"train/class_{i % n_classes:03d}/img_{i:05d}.jpg"
    return key, best


def write_large(out, seed, k, mib):
    key = f"large/blob_{k}.bin"
    path = os.path.join(out, key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rng = np.random.default_rng([seed, 10_000_000 + k])
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = mib * MiB
        while left:
            n = min(left, 64 * MiB)
            chunk = rng.bytes(n)
            h.update(chunk)
            f.write(chunk)
            left -= n
    return key, mib * MiB, h.hexdigest()


def generate(a):
    os.makedirs(a.out, exist_ok=True)
    entries, digest = [], hashlib.sha256()
    t0 = time.time()
    jobs = [(a.seed, i, a.classes, a.min_kb, a.max_kb) for i in range(a.n)]
    with ProcessPoolExecutor(a.workers) as ex:
        for key, data in ex.map(make_image, jobs, chunksize=32):
            path = os.path.join(a.out, key)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
            entries.append({"key": key, "size": len(data), "kind": "image"})
            digest.update(key.encode() + hashlib.sha256(data).digest())
    print(f"images: {a.n} in {time.time() - t0:.1f}s", file=sys.stderr)
    for k in range(a.large):
        key, size, hx = write_large(a.out, a.seed, k, a.large_mib)
        entries.append({"key": key, "size": size, "kind": "large"})
        digest.update(key.encode() + bytes.fromhex(hx))
    sizes = [e["size"] for e in entries if e["kind"] == "image"]
    man = {
        "seed": a.seed,
        "n": a.n,
        "classes": a.classes,
        "large": a.large,
        "large_mib": a.large_mib,
        "pillow": PIL.__version__,
        "numpy": np.__version__,
        "digest": digest.hexdigest(),
        "image_bytes": sum(sizes),
        "image_kb_min": min(sizes) // KB,
        "image_kb_max": max(sizes) // KB,
        "image_kb_median": int(np.median(sizes)) // KB,
        "entries": entries,
    }
    with open(a.manifest, "w") as f:
        json.dump(man, f)
    print(
        f"manifest {a.manifest}: digest {man['digest'][:16]} images {len(sizes)} "
        f"{sum(sizes) / MiB:.0f} MiB, KB min/median/max {man['image_kb_min']}/{man['image_kb_median']}/{man['image_kb_max']}",
        file=sys.stderr,
    )
    return man


def upload(a, man):
    import boto3
    from boto3.s3.transfer import TransferConfig

    s3 = boto3.client("s3", endpoint_url=a.endpoint)
    try:
        s3.create_bucket(Bucket=a.bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    t0 = time.time()

    def put(e):
        path = os.path.join(a.out, e["key"])
        if e["kind"] == "large":
            s3.upload_file(
                path,
                a.bucket,
                e["key"],
                Config=TransferConfig(multipart_chunksize=64 * MiB, max_concurrency=4),
            )
        else:
            with open(path, "rb") as f:
                s3.put_object(Bucket=a.bucket, Key=e["key"], Body=f.read(), ContentType="image/jpeg")

    with ThreadPoolExecutor(16) as ex:
        list(ex.map(put, man["entries"]))
    n = sum(p.get("KeyCount", 0) for p in s3.get_paginator("list_objects_v2").paginate(Bucket=a.bucket))
    print(
        f"uploaded {len(man['entries'])} objects in {time.time() - t0:.1f}s; bucket has {n}", file=sys.stderr
    )
    if n != len(man["entries"]):
        sys.exit("bucket object count mismatch")


def main():
    work = os.environ.get("BENCH_WORK", "/var/tmp/peers-bench")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=5000)
    p.add_argument("--classes", type=int, default=50)
    p.add_argument("--large", type=int, default=2)
    p.add_argument("--large-mib", type=int, default=512)
    p.add_argument("--min-kb", type=int, default=50)
    p.add_argument("--max-kb", type=int, default=200)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--out", default=os.path.join(work, "data"))
    p.add_argument("--manifest", default=os.path.join(work, "manifest.json"))
    p.add_argument("--endpoint", default=os.environ.get("BENCH_ENDPOINT", "http://127.0.0.1:5002"))
    p.add_argument("--bucket", default=os.environ.get("BENCH_BUCKET", "bench"))
    p.add_argument("--force", action="store_true", help="regenerate even if the manifest exists")
    p.add_argument("--upload-only", action="store_true")
    p.add_argument("--no-upload", action="store_true")
    a = p.parse_args()
    if os.path.exists(a.manifest) and not a.force:
        with open(a.manifest) as f:
            man = json.load(f)
        if a.upload_only or (man["n"], man["seed"], man["large"], man["large_mib"]) == (
            a.n,
            a.seed,
            a.large,
            a.large_mib,
        ):
            print(f"reusing {a.manifest} (digest {man['digest'][:16]})", file=sys.stderr)
        else:
            man = generate(a)
    else:
        if a.upload_only:
            sys.exit("no manifest; run without --upload-only first")
        man = generate(a)
    if not a.no_upload:
        upload(a, man)


if __name__ == "__main__":
    main()
