"""Shared pieces of the workload scripts.

A workload reads the dataset through a *store*, chosen by --root:
  /some/path         a directory: a FUSE mount point or the local copy (plain os/open calls)
  s3://bucket        direct object-store access, no mount; --backend boto3 | fsspec

Every workload prints exactly one JSON object on its last stdout line.
"""

import argparse
import json
import os
import sys
import threading
import time

MiB = 1024 * 1024


def base_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--root", required=True, help="mount point / directory, or s3://bucket")
    p.add_argument(
        "--manifest",
        default=os.path.join(os.environ.get("BENCH_WORK", "/var/tmp/peers-bench"), "manifest.json"),
    )
    p.add_argument("--backend", default="boto3", choices=["boto3", "fsspec"], help="only for s3:// roots")
    p.add_argument("--endpoint", default=os.environ.get("BENCH_ENDPOINT", "http://127.0.0.1:5002"))
    p.add_argument(
        "--max-seconds", type=float, default=300.0, help="stop issuing work after this (result marked capped)"
    )
    p.add_argument("--seed", type=int, default=0)
    return p


def load_manifest(path):
    with open(path) as f:
        return json.load(f)


def images(man):
    return [e for e in man["entries"] if e["kind"] == "image"]


def larges(man):
    return [e for e in man["entries"] if e["kind"] == "large"]


class PathStore:
    kind = "path"

    def __init__(self, root):
        self.root = root

    def path(self, key):
        return os.path.join(self.root, key)

    def read_all(self, key):
        with open(self.path(key), "rb") as f:
            return f.read()

    def open_seq(self, key):
        return open(self.path(key), "rb", buffering=0)

    def open_random(self, key):
        fd = os.open(self.path(key), os.O_RDONLY)
        return (lambda off, n: os.pread(fd, n, off)), (lambda: os.close(fd))


class Boto3Store:
    kind = "boto3"

    def __init__(self, bucket, endpoint):
        self.bucket, self.endpoint = bucket, endpoint
        self._local = threading.local()

    @property
    def client(self):  # created lazily: picklable for DataLoader workers, one per thread
        c = getattr(self._local, "c", None)
        if c is None:
            import boto3
            from botocore.config import Config

            c = boto3.session.Session().client(
                "s3",
                endpoint_url=self.endpoint,
                config=Config(max_pool_connections=32, retries={"max_attempts": 3}),
            )
            self._local.c = c
        return c

    def __getstate__(self):
        return {"bucket": self.bucket, "endpoint": self.endpoint}

    def __setstate__(self, s):
        self.__init__(s["bucket"], s["endpoint"])

    def read_all(self, key):
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def open_seq(self, key):
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"]

    def open_random(self, key):
        def rd(off, n):
            return self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={off}-{off + n - 1}")[
                "Body"
            ].read()

        return rd, (lambda: None)

    def list_all(self):
        keys = 0
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            keys += page.get("KeyCount", 0)
        return keys


class FsspecStore:
    kind = "fsspec"

    def __init__(self, bucket, endpoint):
        self.bucket, self.endpoint = bucket, endpoint
        self._fs = None

    @property
    def fs(self):
        if self._fs is None:
            import s3fs

            self._fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": self.endpoint})
        return self._fs

    def __getstate__(self):
        return {"bucket": self.bucket, "endpoint": self.endpoint}

    def __setstate__(self, s):
        self.__init__(s["bucket"], s["endpoint"])

    def read_all(self, key):
        return self.fs.cat_file(f"{self.bucket}/{key}")

    def open_seq(self, key):
        return self.fs.open(
            f"{self.bucket}/{key}", "rb"
        )  # fsspec defaults (readahead cache, default block size)

    def open_random(self, key):
        p = f"{self.bucket}/{key}"
        return (lambda off, n: self.fs.cat_file(p, start=off, end=off + n)), (lambda: None)

    def list_all(self):
        return len(self.fs.find(self.bucket))


def make_store(a):
    if a.root.startswith("s3://"):
        bucket = a.root[5:].strip("/")
        return (Boto3Store if a.backend == "boto3" else FsspecStore)(bucket, a.endpoint)
    return PathStore(a.root)


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def emit(result):
    print(json.dumps(result), flush=True)


def fail(msg):
    emit({"ok": False, "error": msg})
    sys.exit(1)


class Deadline:
    def __init__(self, seconds):
        self.t0 = time.perf_counter()
        self.end = self.t0 + seconds
        self.hit = False

    def passed(self):
        if time.perf_counter() >= self.end:
            self.hit = True
        return self.hit

    def elapsed(self):
        return time.perf_counter() - self.t0
