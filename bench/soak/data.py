"""The soak's data, made before the run from the seed: what every read is checked against.

``src`` has three versions (prefixes ``src1/``..``src3/`` of the origin bucket, imported in
turn, so each version's records point at objects of their own and nothing changes behind a
committed version); ``photos`` holds small JPEGs for the pack jobs. The manifest maps each
(dataset, version, key) and each object URL to the sha256 of its bytes, computed here from
the bytes the harness uploaded, never from anything datahub reports.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from PIL import Image

from tests.multihost.cluster import ORIGIN_BUCKET, Cluster, upload_all

PAGE = 4 * 1024**2


def versions(seed: int) -> list[dict[str, bytes]]:
    """Three versions of ``src``: ~40 files from 1 B to 300 KB and one two-page file; each
    version changes, adds and removes some."""
    rng = random.Random(f"{seed}-src")
    files = {
        f"d{i % 4}/f{i:03d}.bin": rng.randbytes(rng.choice([1, 700, rng.randint(1, 300_000)]))
        for i in range(40)
    }
    files["big/blob.bin"] = rng.randbytes(PAGE + rng.randint(1, 400_000))
    out = [dict(files)]
    for v in (2, 3):
        keys = sorted(files)
        for key in rng.sample(keys, 8):
            files[key] = rng.randbytes(rng.randint(1, 200_000))
        for key in rng.sample(keys, 4):
            if key != "big/blob.bin":
                del files[key]
        for i in range(5):
            files[f"v{v}/n{i}.bin"] = rng.randbytes(rng.randint(1, 150_000))
        out.append(dict(files))
    return out


def jpegs(seed: int, count: int = 24) -> dict[str, bytes]:
    rng = random.Random(f"{seed}-photos")
    out = {}
    for i in range(count):
        w, h = rng.randint(64, 128), rng.randint(48, 96)
        buf = io.BytesIO()
        Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3)).save(buf, "JPEG", quality=90)
        out[f"img/{i:04d}.jpg"] = buf.getvalue()
    return out


def _ndjson(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def prepare(cluster: Cluster, seed: int, manifest: Path) -> dict:
    """Upload and import ``src`` (3 versions) and ``photos`` through node A; write the manifest.

    ``src``'s versions are imported in turn (each from its own prefix); each version's export
    runs beside the next version's import, and ``photos``' import and export beside all of
    ``src``'s: a pinned version never changes once committed, and the two datasets are
    independent, so what each command reads and writes is the same as one after another
    (prepare was 15–18 s of a quiet soak, eight CLI processes in turn: docs/benchmarks.md,
    "Suite time, round 6")."""
    doc: dict = {"datasets": {"src": {}}, "urls": {}, "records": []}
    photos = jpegs(seed)
    src = versions(seed)
    # every prefix in one process
    upload_all(cluster, {**{f"src{n}": files for n, files in enumerate(src, start=1)}, "photos": photos})

    def src_chain() -> list[str]:
        with ThreadPoolExecutor(1) as exports:  # the exports in order, each beside the next import
            pending = []
            for n in range(1, len(src) + 1):
                cluster.a.cli("import", f"s3://{ORIGIN_BUCKET}/src{n}", "--to", "src", timeout=300)
                pending.append(exports.submit(cluster.a.cli, "export", f"src@{n}"))
            return [p.result().stdout for p in pending]

    def photos_chain() -> str:
        cluster.a.cli("import", f"s3://{ORIGIN_BUCKET}/photos", "--to", "photos", timeout=300)
        return cluster.a.cli("export", "photos@1").stdout

    with ThreadPoolExecutor(2) as pool:
        src_exports, photos_export = pool.submit(src_chain), pool.submit(photos_chain)
        src_out, photos_out = src_exports.result(), photos_export.result()
    for n, (files, out) in enumerate(zip(src, src_out, strict=True), start=1):
        doc["datasets"]["src"][str(n)] = {
            key: {"sha": hashlib.sha256(data).hexdigest(), "size": len(data)} for key, data in files.items()
        }
        for rec in _ndjson(out):
            sha = doc["datasets"]["src"][str(n)][rec["key"]]["sha"]
            doc["urls"][rec["url"]] = sha
            doc["records"].append({k: rec[k] for k in ("key", "url", "etag", "size")})
    for rec in _ndjson(photos_out):
        doc["urls"][rec["url"]] = hashlib.sha256(photos[rec["key"]]).hexdigest()
    manifest.write_text(json.dumps(doc))
    return doc
