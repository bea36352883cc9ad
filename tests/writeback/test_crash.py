"""Promise 3 with real processes: SIGKILL mid-write and mid-flush, reopen, flush, compare checksums.

The overlap tests kill a new file's first close between its two concurrent durable steps
(record journaled but chunk missing, torn or wrong; chunk stored but record not
journaled) while an acknowledged file is being overwritten: recovery must end with no
trace of the new file and the old file's acknowledged content.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from datahub.writeback import workspace_dir
from datahub.writeback.journal import Journal
from tests import zygote
from tests.writeback.conftest import LAYOUTS, make_env, objects_of
from tests.writeback.crash_worker import small_bytes

REPO = Path(__file__).resolve().parents[2]
MiB = 1024**2


def run_until(spec: dict, marker: str | set[str]) -> dict[str, str]:
    """Start the worker, collect its ACKs until ``marker`` (every one of a set), SIGKILL it;
    returns path -> sha256."""
    waiting = {marker} if isinstance(marker, str) else set(marker)
    # a fork of the worker's pre-imported zygote (tests/zygote.py), not a fresh interpreter:
    # its imports (datahub.writeback, boto3) were ~0.3 s of every test's wall, spent waiting
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        cmd = [sys.executable, "-m", "tests.writeback.crash_worker", json.dumps(spec)]
        proc = zygote.popen(cmd, stdout=out_w, stderr=err_w, cwd=REPO)
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    stdout, stderr = open(out_r), open(err_r)  # noqa: SIM115 - closed below
    acked: dict[str, str] = {}
    try:
        for line in stdout:
            if line.startswith("ACK "):
                _, path, digest = line.split()
                acked[path] = digest
            elif line.strip() == "V-CLOSED":
                raise AssertionError("the worker's stuck close returned")
            elif line.strip() in waiting:
                waiting.discard(line.strip())
                if not waiting:
                    break
        else:
            raise AssertionError(f"worker ended before {marker}: {stderr.read()[-3000:]}")
    finally:
        proc.send_signal(signal.SIGKILL)  # a no-op once it exited, as os.kill was not
        proc.wait(30)
        stdout.close()
        stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return acked


def recover_and_check(env, acked: dict[str, str]) -> None:
    ws = env.open()  # replays the journal; the lock of the dead process is gone
    ws.flush()
    assert ws.dirty() == []
    store = env.origin()
    for path, digest in acked.items():
        assert hashlib.sha256(store.read(path)).hexdigest() == digest, path
    assert sorted(info.key for info in store.list()) == sorted(acked)  # "fresh" was never acknowledged
    for obj in ws.flushed_objects():
        assert obj.sha256 == acked[obj.path]
    with ws.journal.read() as txn:
        referenced = {k for _, rec in txn.files() for k, _ in rec["chunks"].values()}
        assert not [rec for _, rec in txn.files() if rec.get("unverified")]  # verified or dropped
        assert sorted(path for path, _ in txn.tree_files()) == sorted(acked)
    assert set(env.shared_keys()) <= objects_of(ws, referenced)  # no orphan chunk (or pack) of a dead writer
    ws.close()


def spec_for(env, mode: str, **extra) -> dict:
    cache = {"page_size": MiB, "flush_interval": 3600, "shared_url": env.config.cache.shared_url,
             "writeback_pack_bytes": env.config.cache.writeback_pack_bytes}  # fmt: skip
    overrides = {"home": env.config.home, "cache": cache}
    overrides.update({"s3": {k: v for k, v in vars(env.config.s3).items() if v is not None}})
    return {"overrides": overrides, "target_url": env.target_url, "mode": mode, **extra}


@pytest.mark.slow
def test_sigkill_mid_write_keeps_every_acknowledged_file(tmp_path: Path, s3_endpoint) -> None:
    env = make_env(tmp_path, s3_endpoint, shared_s3=True, origin_s3=True)
    try:
        acked = run_until(spec_for(env, "write", files=4, size=3 * MiB + 17), "WRITING")
        assert len(acked) == 5
        recover_and_check(env, acked)
    finally:
        env.close()


@pytest.mark.slow
def test_sigkill_mid_flush_then_restart_uploads_everything(tmp_path: Path, s3_endpoint) -> None:
    env = make_env(tmp_path, s3_endpoint, shared_s3=True, origin_s3=True)
    try:
        spec = spec_for(env, "flush", files=5, size=2 * MiB + 3, block_after=5 * MiB)
        spec["overrides"]["cache"]["origin_concurrency"] = 1
        acked = run_until(spec, "MIDFLUSH")
        assert len(acked) == 5
        recover_and_check(env, acked)
    finally:
        env.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_sigkill_among_four_writers_of_small_files_loses_no_acknowledged_one(
    tmp_path: Path, layout: str
) -> None:
    """Small files' first commits are covered (their records go into the packs and the journal
    flushes no meta page for them): killed at any moment among four writers, every file whose
    close returned is there whole, and a file whose close had not returned yet is there whole
    or not at all."""
    env = make_env(tmp_path, **LAYOUTS[layout])
    try:
        acked = run_until(spec_for(env, "small", files=0, size=100_000), "MANY")
        assert len(acked) >= 40
        ws = env.open()
        for path, digest in acked.items():
            with ws.open(path) as fh:
                assert hashlib.sha256(fh.read(0, 200_000)).hexdigest() == digest, path
        for path, _ in ws.listdir(""):
            if path not in acked:  # closed, its ACK not read before the kill
                with ws.open(path) as fh:
                    assert fh.read(0, 200_000) == small_bytes(path, 100_000), path
        with ws.journal.read() as txn:
            assert not [rec for _, rec in txn.files() if rec.get("unverified")]
        ws.close()
    finally:
        env.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_sigkill_mid_write_local_default(tmp_path: Path, layout: str) -> None:
    env = make_env(tmp_path, **LAYOUTS[layout])
    try:
        acked = run_until(spec_for(env, "write", files=3, size=MiB + 5), "WRITING")
        recover_and_check(env, acked)
    finally:
        env.close()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("size", [100_000, MiB + 5])
def test_sigkill_while_a_staged_file_is_written_on_after_its_fsync(
    tmp_path: Path, layout: str, size: int
) -> None:
    """Passthrough writes (staged files): every acknowledged file survives, and the file
    written on in place after its fsync keeps exactly its acknowledged bytes (the staged
    file is copied into new chunks at fsync; it is never an acknowledged object itself)."""
    env = make_env(tmp_path, **LAYOUTS[layout])
    try:
        acked = run_until(spec_for(env, "staged", files=3, size=size), "WRITING")
        assert len(acked) == 4
        recover_and_check(env, acked)
    finally:
        env.close()


@pytest.mark.slow
def test_sigkill_while_a_staged_file_is_written_on_s3(tmp_path: Path, s3_endpoint) -> None:
    env = make_env(tmp_path, s3_endpoint, shared_s3=True, origin_s3=True)
    try:
        acked = run_until(spec_for(env, "staged", files=2, size=MiB + 5), "WRITING")
        assert len(acked) == 3
        recover_and_check(env, acked)
    finally:
        env.close()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("block", ["put", "torn", "garbage", "journal"])
def test_sigkill_between_the_overlapped_steps_of_a_first_close(
    tmp_path: Path, block: str, layout: str
) -> None:
    env = make_env(tmp_path, **LAYOUTS[layout])
    try:
        markers = (
            {"OLD-BLOCKED", "STORED", "JOURNAL-BLOCKED"}
            if block == "journal"
            else {"OLD-BLOCKED", "JOURNALED"}
        )
        acked = run_until(spec_for(env, "overlap", files=2, size=MiB + 7, block=block), markers)
        assert sorted(acked) == ["f0", "f1", "old"]
        journal = Journal(workspace_dir(env.config, "ws") / "lmdb", "workspace 'ws'", readonly=True)
        try:
            with journal.read() as txn:
                names = {path: file_id for path, file_id in txn.tree_files()}
                flagged = [file_id for file_id, rec in txn.files() if rec.get("unverified")]
        finally:
            journal.close()
        if block == "journal":
            assert "v" not in names  # its chunk is stored, its record never committed
        else:
            assert names["v"] in flagged  # its record is journaled, its chunk missing or not whole
        recover_and_check(env, acked)  # "v" vanished, "old" kept its acknowledged bytes
    finally:
        env.close()


@pytest.mark.slow
def test_sigkill_between_the_overlapped_steps_on_s3(tmp_path: Path, s3_endpoint) -> None:
    env = make_env(tmp_path, s3_endpoint, shared_s3=True, origin_s3=True)
    try:
        for block, markers in (
            ("put", {"OLD-BLOCKED", "JOURNALED"}),
            ("journal", {"OLD-BLOCKED", "STORED", "JOURNAL-BLOCKED"}),
        ):
            acked = run_until(
                spec_for(env, "overlap", files=1, size=100_000, block=block, seed=len(block)), markers
            )
            recover_and_check(env, acked)
    finally:
        env.close()
