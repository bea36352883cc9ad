"""probe21: two ways an acknowledged write-back file was lost.

1. A covered first close on S3/RGW (ceph41) is acknowledged by one PUT whose user metadata
   carries the file's cover record, its journal change deferred. On a store that drops user
   metadata, a crash before the deferred commit lost the file: recovery found no record. The
   store is now probed first (``S3Writes.keeps_records``); here a real moto server behind a
   proxy that strips ``x-amz-meta-*`` from every PUT, and a kill -9 (``abandon``) before any
   deferred commit: every acknowledged file must come back.
2. The Workspace API took a name over 255 bytes (the journal keeps paths of 511): its flush
   to a local origin then failed forever. Such a name is refused at create, mkdir and rename.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from datahub.errors import InvalidInput
from tests.faults import FlakyProxy
from tests.writeback.conftest import Env, make_env, write


class MetadataDroppingProxy(FlakyProxy):
    """Forwards everything to moto, but a PUT's ``x-amz-meta-*`` headers dropped, or with
    ``keep`` their values cut to that many characters: a store that drops or limits user
    metadata (moto does not check signatures, so the request still lands)."""

    keep: int | None = None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        base, keep = super()._handler_class(), self.keep

        class Handler(base):  # type: ignore[misc, valid-type]
            def do_PUT(self) -> None:
                for name in [n for n in self.headers if n.lower().startswith("x-amz-meta-")]:
                    value = self.headers[name]
                    del self.headers[name]
                    if keep is not None:
                        self.headers[name] = value[:keep]
                self._relay()

        return Handler


class MetadataCuttingProxy(MetadataDroppingProxy):
    keep = 1024  # half of S3's 2 KB: a short record would fit, the probe's does not


@pytest.fixture(params=[MetadataDroppingProxy, MetadataCuttingProxy])
def dropping_env(
    tmp_path: Path, moto_endpoint, request: pytest.FixtureRequest
) -> Iterator[tuple[Env, MetadataDroppingProxy]]:
    with request.param(moto_endpoint.url) as proxy:
        env = make_env(tmp_path, dataclasses.replace(moto_endpoint, url=proxy.url), shared_s3=True)
        try:
            yield env, proxy
        finally:
            env.close()


def _read(ws, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, 1 << 30)


def _probes(proxy: FlakyProxy, method: str) -> list[str]:
    return [path for m, path in proxy.requests if m == method and "/probe-" in path]


def test_a_store_that_drops_user_metadata_loses_no_acknowledged_file_in_a_kill(
    dropping_env: tuple[Env, MetadataDroppingProxy], caplog: pytest.LogCaptureFixture
) -> None:
    env, proxy = dropping_env
    ws = env.open()
    ws.journal.defer_seconds = 3600.0  # a deferred commit would stay out of LMDB to the kill
    expected = {f"f{i}": bytes([i + 1]) * (100 + i) for i in range(5)}
    ws.mkdir("é" * 100)  # JSON writes each as 6 bytes: this record is past the cut proxy's 1 KB
    expected[f"{'é' * 100}/{'é' * 100}"] = b"a long record"
    with caplog.at_level(logging.WARNING, logger="datahub.storage.s3"):
        for path, data in expected.items():
            write(ws, path, data)
    assert ws.journal.deferred() == 0  # every close took the synced commit
    said = [r for r in caplog.records if "does not give back the user metadata" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
    assert len(_probes(proxy, "PUT")) == 1 and len(_probes(proxy, "DELETE")) == 1  # one probe
    ws.abandon()  # kill -9
    ws = env.open()  # the same store object: its answer is remembered, no second probe
    for path, data in expected.items():
        assert _read(ws, path) == data, path
    write(ws, "after", b"acknowledged after the reopen")
    assert ws.journal.deferred() == 0
    assert len(_probes(proxy, "PUT")) == 1
    ws.abandon()
    ws = env.open()
    assert _read(ws, "after") == b"acknowledged after the reopen"
    assert not [key for key in env.shared_keys() if "/probe-" in key]  # the probe left nothing


def test_a_store_that_keeps_user_metadata_still_covers_first_closes(tmp_path: Path, moto_endpoint) -> None:
    with FlakyProxy(moto_endpoint.url) as proxy:
        env = make_env(tmp_path, dataclasses.replace(moto_endpoint, url=proxy.url), shared_s3=True)
        try:
            ws = env.open()
            ws.journal.defer_seconds = 3600.0
            for i in range(3):
                write(ws, f"f{i}", b"x" * (10 + i))
            assert ws.journal.deferred() == 3  # covered by their PUTs, as ceph41 made them
            assert len(_probes(proxy, "PUT")) == 1 and len(_probes(proxy, "HEAD")) == 1
            assert len(_probes(proxy, "DELETE")) == 1
            assert not [key for key in env.shared_keys() if "/probe-" in key]
            ws.abandon()
            ws = env.open()
            assert {path: _read(ws, path) for path in ("f0", "f1", "f2")} == {
                f"f{i}": b"x" * (10 + i) for i in range(3)
            }
        finally:
            env.close()


@pytest.fixture
def local_env(tmp_path: Path) -> Iterator[Env]:
    env = make_env(tmp_path)
    yield env
    env.close()


@pytest.mark.parametrize("name", ["n" * 256, "é" * 128, "\U0001f600" * 64])
def test_a_name_over_255_bytes_is_refused_at_create_mkdir_and_rename(local_env: Env, name: str) -> None:
    ws = local_env.open()
    ws.mkdir("d")
    write(ws, "d/kept", b"k")
    for attempt in (
        lambda: ws.open(f"d/{name}", create=True),
        lambda: ws.mkdir(f"d/{name}"),
        lambda: ws.rename("d/kept", f"d/{name}"),
        lambda: ws.open(f"{name}/x", create=True),  # a long directory name on the way too
    ):
        with pytest.raises(InvalidInput) as caught:
            attempt()
        assert "255 bytes" in str(caught.value) and name[:10] in str(caught.value)
    assert [n for n, _ in ws.listdir("d")] == ["kept"]
    longest = "m" * 255  # at the limit: taken, and flushed to the local origin
    write(ws, f"d/{longest}", b"fits")
    ws.rename(f"d/{longest}", "d/" + "é" * 127)  # 254 bytes
    report = ws.flusher.flush()
    assert not report.errors and report.still_dirty == 0 and report.uploaded == 2, report
    assert _read(ws, "d/" + "é" * 127) == b"fits"
    assert any(key.endswith("é" * 127) for key in local_env.origin_files())


def test_a_probe_that_fails_is_tried_again_and_its_closes_commit_synced_meanwhile(
    tmp_path: Path, moto_endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    def probe_put(method: str, path: str) -> bool:
        return method == "PUT" and "/probe-" in path

    with FlakyProxy(moto_endpoint.url, fail_first=1, status=403, match=probe_put) as proxy:
        env = make_env(tmp_path, dataclasses.replace(moto_endpoint, url=proxy.url), shared_s3=True)
        try:
            ws = env.open()
            ws.journal.defer_seconds = 3600.0
            with caplog.at_level(logging.WARNING, logger="datahub.storage.s3"):
                write(ws, "during", b"closed while the probe failed")
            assert proxy.failed == 1 and ws.journal.deferred() == 0  # synced: no answer yet
            assert any("could not probe" in r.getMessage() for r in caplog.records)
            write(ws, "after", b"closed after a probe that succeeded")
            assert ws.journal.deferred() == 1  # probed again, and covered
            assert len(_probes(proxy, "PUT")) == 2 and len(_probes(proxy, "DELETE")) == 1
            ws.abandon()
            ws = env.open()
            assert _read(ws, "during") == b"closed while the probe failed"
            assert _read(ws, "after") == b"closed after a probe that succeeded"
        finally:
            env.close()
