"""A pack job split across workers on both compute nodes, through the service host's API.

Node A plans the job and runs a ``pack-worker`` with a short lease; once it is writing a
shard (its scratch LMDB file exists and the task table, read through the API, shows the
task DOING under A's name) it is frozen with SIGSTOP. Then either it is killed (SIGKILL)
or it stays hung; node B's worker does the rest and, once A's lease has expired, takes
A's task over and commits the version. The version is read back shard by shard from the
object store: every source sample is in it exactly once, byte for byte, and nothing A
wrote for its task is referenced. A hung worker that wakes up afterwards loses the task
(LeaseLost through the API), discards its work and finds the same single version.

See tests/multihost/conftest.py for the cluster and docs/architecture.md ("Testing across
hosts"). Every wait here is a hang guard, never a timing goal.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
from PIL import Image

from datahub.pack.layout import KIND_IMAGE, decode_sample
from datahub.pack.shard import ShardReader
from tests.multihost.conftest import ORIGIN_BUCKET, Cluster, Node
from tests.multihost.test_cluster import upload
from tests.zygote import ZygoteProcess

pytestmark = [pytest.mark.netns]

IMAGES = 36
LEASE = "3"  # seconds: B steals A's task soon after A's death (renewed every second while alive)
LONG_LEASE = "15"  # A's lease in the kill test: B does its own tasks while A's lease is still live
SHARD_SIZE = "200KiB"  # ~8 images per task, so the job has several tasks


def jpegs(seed: int) -> dict[str, bytes]:
    """Small real JPEGs (noise, so they do not compress to nothing), keyed ``img/NNNN.jpg``."""
    rng = random.Random(seed)
    out = {}
    for i in range(IMAGES):
        w, h = rng.randint(96, 160), rng.randint(72, 120)
        img = Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3))
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=90)
        out[f"img/{i:04d}.jpg"] = buf.getvalue()
    return out


def task_table(node: Node, job: str) -> list[dict]:
    """The job's tasks as the service's queue holds them, read through the API from ``node``."""
    code = (
        "import dataclasses, json, sys\n"
        "from datahub.tasks.http import HttpTaskQueue\n"
        "q = HttpTaskQueue(sys.argv[1])\n"
        "print(json.dumps([dataclasses.asdict(t) for t in q.tasks(sys.argv[2])]))\n"
    )
    url = tomllib.loads(node.config_path.read_text())["catalog_url"]  # the service host's API
    return json.loads(node.host.run_module("-c", [code, url, job], env=node.env).stdout)


@contextlib.contextmanager
def task_tables(node: Node, job: str, every: float = 0.1) -> Iterator[Callable[[], tuple[float, list[dict]]]]:
    """The job's task table read through the API from ``node`` again and again, by one process.

    Yields ``next_table()``: the next table and the wall-clock time its answer arrived (so a
    check against a lease compares with when the table was true, as ``task_table`` followed
    by ``time.time()`` does). Why one process: a ``task_table`` call is a Python start and
    imports (~0.4 CPU-s) per look; a loop of them took a core from the very pack-worker the
    test waits for, and this samples the table more often for less.
    """
    code = (
        "import dataclasses, json, sys, time\n"
        "from datahub.tasks.http import HttpTaskQueue\n"
        "q = HttpTaskQueue(sys.argv[1])\n"
        "while True:\n"
        "    tasks = [dataclasses.asdict(t) for t in q.tasks(sys.argv[2])]\n"
        "    print(json.dumps({'t': time.time(), 'tasks': tasks}), flush=True)\n"
        "    time.sleep(float(sys.argv[3]))\n"
    )
    url = tomllib.loads(node.config_path.read_text())["catalog_url"]
    argv = node.host.argv([sys.executable, "-c", code, url, job, str(every)])
    errors = node.root / f"task-tables-{job}.err"
    with open(errors, "wb") as err:  # a file, not a pipe nobody reads while the test waits
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=node.env, text=True)

    def next_table() -> tuple[float, list[dict]]:
        line = proc.stdout.readline()
        if not line:
            tail = errors.read_text(errors="replace")[-2000:]
            raise AssertionError(f"the task table reader on {node.host.name} exited: {tail}")
        doc = json.loads(line)
        return doc["t"], doc["tasks"]

    try:
        yield next_table
    finally:
        proc.kill()
        proc.wait(30)


def json_docs(text: str) -> list:
    """The JSON documents printed one after another (``--json`` output, NDJSON); a line that
    starts no document (a log line in a worker's combined output) is skipped."""
    decoder, docs, pos = json.JSONDecoder(), [], 0
    while pos < len(text):
        if text[pos] in "{[":
            doc, pos = decoder.raw_decode(text, pos)
            docs.append(doc)
        elif text[pos].isspace():
            pos += 1
        else:
            end = text.find("\n", pos)
            pos = len(text) if end < 0 else end + 1
    return docs


def freeze_mid_task(
    node: Node, proc: subprocess.Popen | ZygoteProcess, job: str, guard: float = 120.0
) -> tuple[int, float]:
    """SIGSTOP ``proc`` (a pack-worker on ``node``) while it writes a shard.

    Returns the task's index and its ``lease_until`` as the task table showed it then (a
    renewal still in flight can only make the real lease later).

    Its scratch shard file shows it is inside a task; SIGSTOP then holds it there while the
    task table confirms, through the API, that the task is DOING under its name. If it was
    between tasks after all, it is resumed and watched again.
    """
    worker = f"{socket.gethostname()}:{proc.pid}"  # a zygote fork (or nsenter's exec): the worker's own pid
    scratch = node.root / "var" / "pack" / "scratch"
    deadline = time.monotonic() + guard
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"pack-worker on {node.host.name} exited {proc.returncode} mid-job")
        if time.monotonic() > deadline:
            raise AssertionError(f"pack-worker on {node.host.name} held no task within {guard}s")
        files = sorted(scratch.glob(f"{job}-*-{proc.pid}@*.lmdb.scratch")) if scratch.is_dir() else []
        if not files:
            time.sleep(0.002)
            continue
        os.kill(proc.pid, signal.SIGSTOP)
        index = int(files[0].name[len(job) + 1 :].split("-")[0])
        held = [t for t in task_table(node, job) if t["state"] == "DOING" and t["owner"] == worker]
        if files[0].exists() and [t["index"] for t in held] == [index]:
            return index, held[0]["lease_until"]
        os.kill(proc.pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def photos(cluster: Cluster) -> dict[str, bytes]:
    """Dataset ``photos@v1``: small JPEGs imported from the origin bucket; returns them by key."""
    src = jpegs(16)
    upload(cluster, "photos", src)
    cluster.a.cli("import", f"s3://{ORIGIN_BUCKET}/photos", "--to", "photos")
    return src


def plan_on_a(cluster: Cluster, target: str) -> tuple[str, int]:
    """``datahub pack --plan-only`` on A: the job id and its number of tasks."""
    argv = ["--json", "pack", "photos@v1", "--to", target, "--shard-size", SHARD_SIZE, "--plan-only"]
    plan = json.loads(cluster.a.cli(*argv).stdout)
    assert plan["tasks"] >= 3, plan  # several tasks, so B has work of its own besides A's task
    return plan["job"], plan["tasks"]


def start_worker(
    node: Node, job: str, log: Path, lease: str
) -> tuple[subprocess.Popen | ZygoteProcess, IO[bytes]]:
    fh = open(log, "w+b")  # noqa: SIM115 - closed by the caller
    return node.popen_cli("--json", "pack-worker", "--job", job, "--lease", lease, log=fh), fh


def finish_on_b(
    cluster: Cluster, job: str, total: int, taken: int, target: str, held: tuple[str, float]
) -> dict:
    """Run B's pack-worker to the end; it must take task ``taken`` over (attempt 2) and commit.

    ``held`` is A's worker name and the task's ``lease_until`` when A stopped: while B runs,
    the task table (read through the API) must show the task A's as long as that lease lasts,
    so B waits for the lease rather than taking a live worker's task.
    """
    owner_a, lease_until = held
    worker_b, log = start_worker(cluster.b, job, cluster.root / f"pack-worker-b-{target}.log", LEASE)
    try:
        deadline = time.monotonic() + 300  # a hang guard
        with task_tables(cluster.b, job) as next_table:
            while worker_b.poll() is None:
                seen_at, tasks = next_table()
                owner = tasks[taken]["owner"]
                assert owner == owner_a or seen_at >= lease_until, (
                    f"{owner} took task {taken} from a live lease"
                )
                assert time.monotonic() < deadline, f"B's pack-worker still runs after 300s: {log.name}"
        assert worker_b.returncode == 0, log.name
        log.seek(0)
        out = json_docs(log.read().decode())
    finally:
        if worker_b.poll() is None:
            worker_b.kill()
            worker_b.wait(30)
        log.close()
    report, result = out[0], out[-1]
    assert taken in report["done"] and report["lost"] == []
    assert result["version"] == f"{target}@v1" and result["samples"] == IMAGES and result["skipped"] == 0
    tasks = task_table(cluster.b, job)
    assert [t["state"] for t in tasks] == ["DONE"] * total
    assert tasks[taken]["owner"] == report["worker"] and tasks[taken]["attempts"] == 2
    assert sorted(t["index"] for t in tasks if t["owner"] == report["worker"]) == sorted(report["done"])
    return report


def read_back(cluster: Cluster, version: str, total: int, src: dict[str, bytes]) -> list[dict]:
    """Check ``version`` holds every sample of ``src`` exactly once, byte for byte; its shard records."""
    records = {r["key"]: r for r in json_docs(cluster.b.cli("export", version).stdout)}
    shard_keys = [f"shards/{i:05d}-of-{total:05d}.lmdb" for i in range(total)]  # shard i = task i
    assert sorted(records) == sorted([*shard_keys, "index.json"])
    seen: dict[str, bytes] = {}
    per_shard: list[list[str]] = []
    local = cluster.root / "readback" / version
    fetch(cluster, {records[key]["url"]: local / key for key in records})
    for key in shard_keys:
        rec = records[key]
        path = local / key
        assert "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest() == rec["checksum"], key
        reader = ShardReader(path)
        try:
            keys = list(reader.iter_keys())
            for sample_key in keys:
                assert sample_key not in seen, f"{sample_key} is in two shards of {version}"
                sample = decode_sample(sample_key, reader.get(sample_key))
                assert sample.kind == KIND_IMAGE
                seen[sample_key] = bytes(sample.payload)
            assert reader.index()["count"] == len(keys)
        finally:
            reader.close()
        per_shard.append(keys)
    assert seen == src  # every sample exactly once, byte for byte (small upright JPEGs pass through)
    index = json.loads((local / "index.json").read_bytes())
    assert [s["keys"] for s in index["shards"]] == per_shard and index["count"] == IMAGES
    return [records[key] for key in shard_keys]


def job_folder(shards: list[dict]) -> str:
    """The folder below ``packs/`` of a job's shards (``datahub.pack.job.objects_dir``: a random
    name in the job's meta, not the job id, which a reader of the target must not learn)."""
    folders = {r["url"].split("/packs/", 1)[1].split("/", 1)[0] for r in shards}
    assert len(folders) == 1, folders  # every shard of the job under its one folder
    return folders.pop()


def uploaded_by(cluster: Cluster, node: Node, folder: str, index: int) -> int:
    """How many shard objects of task ``index`` ``node`` uploaded (under its objects prefix)."""
    prefix = f"objects/{node.root.name}/packs/{folder}/shard-{index:05d}-"
    out = cluster.s3(
        f"r = s3.list_objects_v2(Bucket='{ORIGIN_BUCKET}', Prefix='{prefix}')\nprint(r.get('KeyCount', 0))"
    )
    return int(out.strip())


def b_url(cluster: Cluster, folder: str) -> str:
    return f"s3://{ORIGIN_BUCKET}/objects/{cluster.b.root.name}/packs/{folder}/"


def test_pack_worker_killed_on_a_is_finished_by_b(cluster: Cluster, photos: dict[str, bytes]) -> None:
    job, total = plan_on_a(cluster, "packed")
    worker_a, log_a = start_worker(cluster.a, job, cluster.root / "pack-worker-a-killed.log", LONG_LEASE)
    try:
        taken, lease_until = freeze_mid_task(cluster.a, worker_a, job)
        name_a = f"{socket.gethostname()}:{worker_a.pid}"
        worker_a.kill()  # SIGKILL: no handler runs, the task is not handed back
        worker_a.wait(30)
    finally:
        if worker_a.poll() is None:
            worker_a.kill()
            worker_a.wait(30)
        log_a.close()
    scratch = cluster.a.root / "var" / "pack" / "scratch"
    assert list(scratch.glob(f"{job}-{taken:05d}-{worker_a.pid}@*"))  # A died with a half-written shard

    # B joins after A's death; A's task comes back to it only once A's lease has expired
    report_b = finish_on_b(cluster, job, total, taken, "packed", (name_a, lease_until))
    assert {t["owner"] for t in task_table(cluster.b, job)} <= {name_a, report_b["worker"]}

    shards = read_back(cluster, "packed@v1", total, photos)
    folder = job_folder(shards)
    assert shards[taken]["url"].startswith(b_url(cluster, folder)), shards[taken]  # B's shard ...
    assert uploaded_by(cluster, cluster.a, folder, taken) == 0  # ... and A uploaded none for it


def test_pack_worker_hung_on_a_loses_its_task_to_b(cluster: Cluster, photos: dict[str, bytes]) -> None:
    job, total = plan_on_a(cluster, "packed-hung")
    worker_a, log_a = start_worker(cluster.a, job, cluster.root / "pack-worker-a-hung.log", LEASE)
    try:
        taken, lease_until = freeze_mid_task(cluster.a, worker_a, job)
        name_a = f"{socket.gethostname()}:{worker_a.pid}"
        report_b = finish_on_b(
            cluster, job, total, taken, "packed-hung", (name_a, lease_until)
        )  # A stays frozen
        os.kill(worker_a.pid, signal.SIGCONT)  # A wakes up: its lease is gone, the job is done
        assert worker_a.wait(120) == 0, log_a.name
        log_a.seek(0)
        out_a = json_docs(log_a.read().decode())
    finally:
        if worker_a.poll() is None:
            worker_a.kill()
            worker_a.wait(30)
        log_a.close()
    report_a, result_a = out_a[0], out_a[-1]
    assert taken in report_a["lost"] and taken not in report_a["done"]  # its work was discarded
    # A, finding the job finished, commits too: the same version (the job id is the commit id)
    assert result_a["version"] == "packed-hung@v1"
    assert len(json_docs(cluster.b.cli("--json", "log", "packed-hung").stdout)[0]) == 1

    tasks = task_table(cluster.b, job)
    assert tasks[taken]["owner"] == report_b["worker"]
    shards = read_back(cluster, "packed-hung@v1", total, photos)
    assert shards[taken]["url"].startswith(b_url(cluster, job_folder(shards))), shards[taken]


def fetch(cluster: Cluster, files: dict[str, Path]) -> None:
    """Download each ``s3://bucket/key`` into its path, through the storage host's moto (one call)."""
    pairs = []
    for url, dest in files.items():
        bucket, _, key = url.removeprefix("s3://").partition("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        pairs.append((bucket, key, str(dest)))
    cluster.s3(f"for bucket, key, dest in {pairs!r}:\n    s3.download_file(bucket, key, dest)")
