"""Pack jobs end to end: the committed version, bad records, idempotence, resume after a kill."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

from datahub.catalog import Catalog
from datahub.cli.main import main as cli
from datahub.config import Config
from datahub.errors import BadImage, Cancelled, InvalidInput
from datahub.pack import INDEX_KEY, PackSpec, pack, start_job, work
from datahub.pack.executor import run_local
from datahub.pack.job import TARGET_DESCRIPTION
from datahub.pack.layout import KIND_IMAGE, KIND_RAW, decode_sample
from datahub.pack.shard import ShardReader
from datahub.pack.worker import PackServices, sweep_scratch
from datahub.storage import StoreRegistry
from datahub.tasks import DOING, DONE, TODO, open_task_queue
from tests.pack.conftest import import_manifest, write_source


def _bomb_png(width: int, height: int) -> bytes:
    """A few bytes of PNG whose header claims ``width`` x ``height`` pixels."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    )


ODD = {
    "img/bad.jpg": b"not a jpeg at all",
    "img/bomb.png": _bomb_png(12_000, 12_000),
    "img/zero.jpg": b"",
    "notes/readme.txt": b"hello",
}


def _download(config: Config, catalog: Catalog, dataset: str, key: str, dest: Path) -> Path:
    record = catalog.get_record(dataset, None, key)
    with StoreRegistry(config) as stores:
        store, object_key = stores.for_url(record.url)
        dest.write_bytes(store.read(object_key, etag=record.etag))
    return dest


def _packed_samples(config: Config, catalog: Catalog, dataset: str, tmp: Path) -> dict[str, object]:
    samples = {}
    for record in catalog.list_records(dataset, None, prefix="shards/"):
        reader = ShardReader(
            _download(config, catalog, dataset, record.key, tmp / record.key.replace("/", "_"))
        )
        for key in reader.iter_keys():
            samples[key] = decode_sample(key, reader.get(key))
        reader.close()
    return samples


def test_pack_commits_shards_and_index_with_lineage(config: Config, catalog: Catalog, tmp_path: Path) -> None:
    seq = import_manifest(catalog, config, write_source(tmp_path / "src", 7, extra=ODD), "photos")
    spec = PackSpec.parse(resize="shorter=64", shard_size="45KB", non_image="copy")
    result = pack(config, catalog, f"photos@v{seq}", "photos-64", spec, workers=0)
    assert (result.samples, result.copied) == (8, 1)  # 7 photos + the copied text file
    reasons = {s["key"]: s["reason"] for s in result.skipped}  # every left-out record, by key
    assert reasons == {
        "img/bad.jpg": "bad_image",
        "img/bomb.png": "image_too_large",
        "img/zero.jpg": "bad_image",
    }

    version = catalog.resolve("photos-64")
    assert version.lineage["source"] == f"photos@v{seq}"
    assert version.lineage["params"]["transform"]["resize"] == "shorter=64"
    assert version.lineage["code_version"].startswith("datahub ")
    keys = [r.key for r in catalog.list_records("photos-64", None)]
    assert (
        keys[0] == INDEX_KEY
        and all(k.startswith("shards/") for k in keys[1:])
        and len(keys) == result.shards + 1
    )

    index = json.loads(
        _download(config, catalog, "photos-64", INDEX_KEY, tmp_path / "index.json").read_text()
    )
    assert index["count"] == 8 and sum(s["count"] for s in index["shards"]) == 8
    assert [k for s in index["shards"] for k in s["keys"]] == sorted(
        [f"img/{i:05d}.jpg" for i in range(7)] + ["notes/readme.txt"]
    )
    assert {s["key"] for s in index["skipped"]} == {"img/bad.jpg", "img/bomb.png", "img/zero.jpg"}
    assert version.lineage["skipped"] == 3

    samples = _packed_samples(config, catalog, "photos-64", tmp_path)
    photo = samples["img/00003.jpg"]
    assert (photo.kind, photo.format, photo.height, dict(photo.labels)) == (
        KIND_IMAGE,
        "jpeg",
        64,
        {"class": 0},
    )
    assert photo.source["url"].endswith("img/00003.jpg")
    text = samples["notes/readme.txt"]
    assert (text.kind, bytes(text.payload)) == (KIND_RAW, b"hello")


def test_pack_again_is_idempotent(config: Config, catalog: Catalog, tmp_path: Path) -> None:
    import_manifest(catalog, config, write_source(tmp_path / "src", 3), "photos")
    spec = PackSpec.parse(resize="shorter=48")
    first = pack(config, catalog, "photos", "small", spec, workers=0)
    again = pack(config, catalog, "photos@latest", "small", spec, workers=0)
    assert again.version.seq == first.version.seq == 1 and again.job == first.job
    assert [v.seq for v in catalog.log("small")] == [1]


def test_non_image_records_need_an_explicit_choice(config: Config, catalog: Catalog, tmp_path: Path) -> None:
    import_manifest(
        catalog, config, write_source(tmp_path / "src", 2, extra={"a/labels.csv": b"x,y"}), "mixed"
    )
    with pytest.raises(InvalidInput, match=r"1 non-image records \(e.g. 'a/labels.csv'\).*--non-image"):
        pack(config, catalog, "mixed", "mixed-packed", PackSpec.parse(resize="shorter=32"), workers=0)
    queue = open_task_queue(config.resolved_catalog_url)
    assert list(queue.tasks("anything")) == []  # refused before any job was planned
    queue.close()
    skipped = pack(config, catalog, "mixed", "mixed-packed", PackSpec.parse(resize="shorter=32", non_image="skip"),
                   workers=0)  # fmt: skip
    assert skipped.samples == 2 and [s["key"] for s in skipped.skipped] == ["a/labels.csv"]
    assert skipped.skipped[0]["reason"] == "non_image"


def test_corrupt_image_fails_the_job_then_resumes_with_skip(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    extra = {"img/00002x.jpg": b"\xff\xd8\xff garbage"}  # sorts right after img/00002.jpg
    import_manifest(catalog, config, write_source(tmp_path / "src", 6, extra=extra), "photos")
    strict = PackSpec.parse(resize="shorter=40", shard_size="1B", on_corrupt="fail")  # one record per task
    with pytest.raises(BadImage, match=r"img/00002x.jpg.*--on-corrupt skip"):
        pack(config, catalog, "photos", "out", strict, workers=0)
    with pytest.raises(Exception, match="no versions|not found"):
        catalog.resolve("out")  # nothing committed
    queue = open_task_queue(config.resolved_catalog_url)
    job = start_job(catalog, queue, "photos", "out", strict).job
    done_before = {t.index: t.attempts for t in queue.tasks(job) if t.state == DONE}
    assert done_before  # the tasks before the corrupt record finished
    lenient = PackSpec.parse(resize="shorter=40", shard_size="1B", on_corrupt="skip")
    result = pack(config, catalog, "photos", "out", lenient, workers=0)
    assert (
        result.job == job and result.samples == 6 and [s["key"] for s in result.skipped] == ["img/00002x.jpg"]
    )
    after = {t.index: t.attempts for t in queue.tasks(job)}
    assert all(after[i] == n for i, n in done_before.items())  # DONE tasks were not redone
    queue.close()


_KILLABLE_WORKER = """
import sys, threading
from pathlib import Path
from datahub.config import load_config
from datahub.pack.worker import PackServices, work
config = load_config(env={}, overrides={"home": sys.argv[1]})
services = PackServices.open(config)
seen = 0
def on_sample(n):
    global seen
    seen += n
    if seen == 3:  # third task (one record each): announce, then hang holding its lease
        Path(sys.argv[3]).write_text("holding")
        threading.Event().wait()
work(services, sys.argv[2], worker="doomed", lease_seconds=1.5, on_sample=on_sample)
"""


def test_pack_interrupted_by_a_killed_worker_resumes(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    import_manifest(catalog, config, write_source(tmp_path / "src", 6), "photos")
    spec = PackSpec.parse(resize="shorter=40", shard_size="1B")  # six tasks, one photo each
    queue = open_task_queue(config.resolved_catalog_url)
    job = start_job(catalog, queue, "photos", "out", spec).job
    marker = tmp_path / "holding"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", _KILLABLE_WORKER, config.home, job, str(marker)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "worker never reached task 2"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    states = {t.index: (t.state, t.owner) for t in queue.tasks(job)}
    assert states[0][0] == states[1][0] == DONE and states[2] == ("DOING", "doomed")
    scratch = Path(config.home) / "pack" / "scratch"
    assert [p.name for p in scratch.glob(f"{job}-00002-*")]  # the dead worker's half-written shard

    services = PackServices.open(config)
    assert not list(scratch.glob(f"{job}-*"))  # the next worker on this host removed it
    try:
        report = work(services, job, worker="rescuer", lease_seconds=30, poll_seconds=0.1)
    finally:
        services.close()
    assert sorted(report.done) == [2, 3, 4, 5]  # the dead worker's task came back after its lease expired
    tasks = {t.index: t for t in queue.tasks(job)}
    assert tasks[0].attempts == tasks[1].attempts == 1 and tasks[0].owner == "doomed"  # not redone
    assert tasks[2].attempts == 2 and tasks[2].owner == "rescuer"
    queue.close()
    result = pack(config, catalog, "photos", "out", spec, workers=0)
    assert result.samples == 6 and result.shards == 6


def test_sweep_scratch_removes_only_dead_workers_files_of_this_host(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that has just exited (a killed worker's)
    host = socket.gethostname()
    names = {
        "dead": f"pack-0123456789abcdef-00002-{dead.pid}@{host}.lmdb.scratch",
        "dead_tmp": f"pack-0123456789abcdef-00002-{dead.pid}@{host}.lmdb.tmp",
        "live": f"pack-0123456789abcdef-00003-{os.getpid()}@{host}.lmdb.scratch",
        "other_host": f"pack-0123456789abcdef-00004-{dead.pid}@not-{host}.lmdb.scratch",
        "unknown": "notes.txt",
    }
    for name in names.values():
        (tmp_path / name).write_bytes(b"x")
    gone = sweep_scratch(tmp_path)
    assert sorted(p.name for p in gone) == sorted([names["dead"], names["dead_tmp"]])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [names["live"], names["other_host"], names["unknown"]]
    )


@pytest.mark.slow
def test_cli_pack_with_two_worker_processes(config: Config, catalog: Catalog, tmp_path: Path, capsys) -> None:
    import_manifest(catalog, config, write_source(tmp_path / "src", 8), "photos")
    argv = ["--home", config.home, "--json", "pack", "photos@v1", "--to", "photos-small", "--resize", "32x32",
            "--crop", "center", "--shard-size", "40KB", "--workers", "2"]  # fmt: skip
    assert cli(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["version"] == "photos-small@v1" and out["samples"] == 8 and out["shards"] >= 3
    queue = open_task_queue(config.resolved_catalog_url)
    owners = {t.owner for t in queue.tasks(out["job"])}
    queue.close()
    assert all(":local" in o for o in owners)


def test_cli_plan_only_then_pack_worker(config: Config, catalog: Catalog, tmp_path: Path, capsys) -> None:
    import_manifest(catalog, config, write_source(tmp_path / "src", 3), "photos")
    base = ["--home", config.home, "--json"]
    assert cli([*base, "pack", "photos", "--to", "p2", "--resize", "shorter=30", "--plan-only"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["counts"] == {"TODO": planned["tasks"]}
    assert cli([*base, "pack-worker", "--job", planned["job"]]) == 0
    assert catalog.resolve("p2").lineage["job"] == planned["job"]
    assert cli([*base, "pack-worker", "--job", "pack-unknown"]) == 3  # not found: a clear error
    assert "pack-unknown" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["photos", "--to", "out", "--resize", "huge"], 2, "invalid --resize 'huge'"),
        (["photos", "--to", "out", "--resize", "shorter=64", "--crop", "center"], 2, "--crop center needs"),
        (["photos", "--to", "photos"], 2, "must differ from the source"),
        (["photos@", "--to", "out"], 2, "use DATASET@REF"),
        (["photos@v9", "--to", "out"], 3, "9"),
        (["nope", "--to", "out"], 3, "nope"),
        (["photos", "--to", "Bad Name"], 2, "invalid dataset name"),
    ],
)
def test_cli_bad_arguments_change_nothing(
    config: Config, catalog: Catalog, tmp_path: Path, capsys, args: list[str], code: int, message: str
) -> None:
    import_manifest(catalog, config, write_source(tmp_path / "src", 1), "photos")
    assert cli(["--home", config.home, "pack", *args, "--workers", "0"]) == code
    assert message in capsys.readouterr().err
    assert [d.name for d in catalog.list_datasets()] == ["photos"]
    queue = open_task_queue(config.resolved_catalog_url)
    with queue._conn() as conn:
        assert conn.execute("SELECT count(*) FROM datahub_task_jobs").fetchone() == (0,)
    queue.close()


def test_a_finalize_repeated_on_the_head_it_made_answers_with_that_version(tmp_path) -> None:
    """A second finalize of one pack job (say, racing the first) sees the job's own version as the
    head, so its change set has no deletes: the catalog answers 409 commit_id_reused and the job
    takes that version, instead of failing or committing again."""
    from datahub.catalog import Catalog, Put, Record
    from datahub.catalog.sqlite_store import SQLiteCatalogStore
    from datahub.pack.job import _commit

    with Catalog(SQLiteCatalogStore(tmp_path / "c.db")) as catalog:
        catalog.create_dataset("packed")
        catalog.commit("packed", [Put(Record("old/shard", "memory://x/old", "e0", 1))])
        records = [Record(f"shards/{i}", f"memory://x/{i}", f"e{i}", 10) for i in range(3)]
        first = _commit(catalog, "packed", records, "src@v1", {"pack": "src@v1"}, "job-1", "me")
        again = _commit(catalog, "packed", records, "src@v1", {"pack": "src@v1"}, "job-1", "me")
        assert first.seq == again.seq == 2 and first.removed == 1
        assert [v.seq for v in catalog.log("packed")] == [2, 1]


def test_cli_packed_versions_record_an_author_as_imports_do(
    config: Config, catalog: Catalog, tmp_path: Path, capsys, monkeypatch
) -> None:
    """With no --author both name the login user, even where $USER is unset (cron, containers)."""
    for var in ("USER", "LOGNAME", "LNAME", "USERNAME"):
        monkeypatch.delenv(var, raising=False)
    base = ["--home", config.home, "--json"]
    manifest = write_source(tmp_path / "src", 2)
    assert cli([*base, "import", str(manifest), "--to", "photos", "-m", "m"]) == 0
    imported = catalog.resolve("photos").author
    assert imported  # the login name, from the password database
    assert cli([*base, "pack", "photos", "--to", "packed", "--resize", "shorter=30", "--workers", "0"]) == 0
    assert catalog.resolve("packed").author == imported
    capsys.readouterr()
    assert cli([*base, "pack", "photos", "--to", "p2", "--resize", "shorter=30", "--plan-only"]) == 0
    job = json.loads(capsys.readouterr().out)["job"]
    assert cli([*base, "pack-worker", "--job", job]) == 0
    assert catalog.resolve("p2").author == imported
    assert cli([*base, "pack", "photos", "--to", "p3", "--workers", "0", "--author", "ci-bot"]) == 0
    assert catalog.resolve("p3").author == "ci-bot"


def test_starting_a_job_creates_its_target_so_no_other_caller_can_take_the_name(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    """The workers' shards become the target's records and a worker needs the writer role on
    it. Created only at the finalize, the target's name stayed free while the job ran: another
    token could create it first, own it, work the job and read a packed source it may not read."""
    from datahub.errors import AlreadyExists

    import_manifest(catalog, config, write_source(tmp_path / "src", 2), "photos")
    queue = open_task_queue(config.resolved_catalog_url)
    start_job(catalog, queue, "photos", "out", PackSpec.parse(resize="shorter=40"))
    queue.close()
    made = catalog.get_dataset("out")
    # it names no source: the target's readers may not read it (tests/pack/test_caller31_hidden_source.py)
    assert made.description == TARGET_DESCRIPTION and "photos" not in made.description

    with pytest.raises(AlreadyExists):
        catalog.create_dataset("out", owner="squatter")
    assert catalog.get_dataset("out").owner == made.owner


# A task long enough (100 photos, about a second to pack) that the child still holds it when
# the executor stops it: with one photo per task, a child could finish its task between the
# moment it was seen holding it and the stop, and there was then nothing to hand back.
SLOW_TASK_PHOTOS = 100


def _cancel_once_a_child_holds_a_task(queue, job: str, cancel: threading.Event):
    """An ``on_progress`` that sets ``cancel`` once a child holds a task: the executor's next
    poll then stops the children, which hand their tasks back."""

    def on_progress(done: int, total: int) -> None:
        deadline = time.monotonic() + 120  # a hang guard
        while not any(t.state == DOING for t in queue.tasks(job)):
            assert time.monotonic() < deadline, "no worker ever claimed a task"
            time.sleep(0.01)
        cancel.set()

    return on_progress


def test_a_cancelled_local_run_over_a_remote_catalog_hands_tasks_back_at_once(
    config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HTTP a listing never shows a lease id, so the executor cannot hand its children's
    tasks back itself: each child, stopped by SIGTERM, unwinds and releases its own task by its
    lease. Before, the children died at SIGTERM and their tasks waited for the lease (60 s)."""
    from datahub.catalog import open_catalog
    from tests.catalog.remote import serve

    server, backing, admin = serve(tmp_path)
    try:
        import_manifest(backing, config, write_source(tmp_path / "src", SLOW_TASK_PHOTOS), "photos")
        monkeypatch.setenv("DATAHUB_API_TOKEN", admin)
        remote = config.model_copy(update={"catalog_url": server.url})
        catalog = open_catalog(server.url)
        queue = open_task_queue(server.url)
        spec = PackSpec.parse(resize="shorter=40", shard_size="64MB")  # one task of them all
        job = start_job(catalog, queue, "photos", "out", spec).job
        cancel = threading.Event()
        with pytest.raises(Cancelled):
            run_local(
                remote, queue, job, workers=2, lease_seconds=600,
                on_progress=_cancel_once_a_child_holds_a_task(queue, job, cancel), cancel=cancel,
            )  # fmt: skip
        tasks = list(queue.tasks(job))
        assert not [t.index for t in tasks if t.state == DOING], "a task waits for its lease to expire"
        assert [t for t in tasks if t.state == TODO and t.attempts == 1]
        queue.close()
        catalog.close()
    finally:
        server.stop()
        backing.close()


def test_a_cancelled_local_run_hands_its_workers_tasks_back_by_their_leases(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    """The local executor stops its children on Ctrl-C and releases the tasks they held, at once:
    it presents each child's lease id (its listing of the same database shows them), since a
    worker's name no longer releases anything."""
    import_manifest(catalog, config, write_source(tmp_path / "src", SLOW_TASK_PHOTOS), "photos")
    spec = PackSpec.parse(resize="shorter=40", shard_size="64MB")  # one task of them all
    queue = open_task_queue(config.resolved_catalog_url)
    job = start_job(catalog, queue, "photos", "out", spec).job
    cancel = threading.Event()
    cancel_once_a_child_holds_a_task = _cancel_once_a_child_holds_a_task(queue, job, cancel)
    try:
        with pytest.raises(Cancelled):
            run_local(
                config, queue, job, workers=1, on_progress=cancel_once_a_child_holds_a_task, cancel=cancel
            )
        tasks = list(queue.tasks(job))
        assert not [t.index for t in tasks if t.state == DOING]  # nothing waits for a lease to expire
        released = [t for t in tasks if t.state == TODO and t.attempts == 1]
        assert released and all(t.owner == "" and t.lease == "" for t in released)
    finally:
        queue.close()
