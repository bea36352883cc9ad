"""A bucket mount whose first LIST is refused fails at once (newuser24), on real moto servers.

Before, ``datahub mount MNT s3://no-such-bucket`` (or a bucket the credentials may not list,
or no credentials at all) said "mounted" and showed an empty directory whose every lookup
failed (EIO) while the loader retried forever. Now the first page is asked for before
mounting (``fuse_adapter.layout.first_listing``): a refusal no retry mends fails the command
with a message naming the bucket and what to do, mounts nothing and makes no snapshot
dataset; a bucket that answers is listed from that same answer (one LIST in all).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.config import load_config
from datahub.errors import AccessDenied, ObjectNotFound, TransientStorageError
from datahub.storage.base import ObjectInfo
from fuse_adapter.daemon import is_mounted
from fuse_adapter.layout import first_listing
from tests.csi.test_bucket_cache_access import IamMoto
from tests.fuse.conftest import REPO, FuseEnv, make_env, read_tree, wait_until
from tests.servers import MotoServer, S3Endpoint

pytestmark = [pytest.mark.fuse, pytest.mark.slow]


def _mount_background(env: FuseEnv, mnt: Path, url: str, *, environ: dict[str, str] | None = None):
    """``datahub mount --background MNT URL``; whatever it did is undone afterwards by the caller."""
    cmd = [sys.executable, "-m", "fuse_adapter", "--config", str(env.config_path)]
    cmd += ["mount", "--background", "--no-prefetch", str(mnt), url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO, env=environ)


def _datasets(env: FuseEnv) -> list[str]:
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        return [d.name for d in catalog.list_datasets()]
    finally:
        catalog.close()


def _refused(env: FuseEnv, url: str, *, environ: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    mnt = env.mountpoint("refused")
    try:
        proc = _mount_background(env, mnt, url, environ=environ)
        assert not is_mounted(str(mnt)), f"mounted anyway: {proc.stdout}{proc.stderr}"
    finally:
        env.teardown(mnt, None)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Nothing is mounted" in proc.stderr, proc.stderr
    assert not [d for d in _datasets(env) if d.startswith("s3.")]  # no snapshot dataset made
    return proc


def test_a_bucket_that_does_not_exist_fails_the_mount(tmp_path: Path, moto_endpoint: S3Endpoint) -> None:
    env = make_env(tmp_path, moto_endpoint)
    proc = _refused(env, "s3://no-such-bucket-24/data")
    assert proc.returncode == ObjectNotFound.exit_code, proc.stderr
    assert "'no-such-bucket-24'" in proc.stderr and "cannot mount s3://no-such-bucket-24/data" in proc.stderr
    assert moto_endpoint.url in proc.stderr and "s3.endpoint_url" in proc.stderr  # where it looked


def test_no_credentials_fail_the_mount(tmp_path: Path, moto_endpoint: S3Endpoint) -> None:
    env = make_env(tmp_path, moto_endpoint)
    text = env.config_path.read_text()
    text = re.sub(r"^(access_key_id|secret_access_key) = .*\n", "", text, flags=re.M)
    env.config_path.write_text(text)
    home = tmp_path / "home"  # no ~/.aws
    home.mkdir()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    environ.update(HOME=str(home), AWS_EC2_METADATA_DISABLED="true")  # loopback only: no IMDS
    proc = _refused(env, f"s3://{env.bucket}", environ=environ)
    assert proc.returncode == AccessDenied.exit_code, proc.stderr
    assert "no usable S3 credentials" in proc.stderr and f"'{env.bucket}'" in proc.stderr
    assert "s3.access_key_id" in proc.stderr  # where to set them


class _NoListMoto(IamMoto):
    def more_users(self) -> None:
        self.reader_only = self.user("no-list", ["s3:GetObject"])


@pytest.fixture(scope="module")
def iam() -> Iterator[_NoListMoto]:
    moto = _NoListMoto()
    try:
        yield moto
    finally:
        moto.server.stop()


def test_credentials_that_may_not_list_fail_the_mount(tmp_path: Path, iam: _NoListMoto) -> None:
    env = make_env(tmp_path, iam.endpoint())
    env.endpoint.client().put_object(Bucket=env.bucket, Key="data/x.bin", Body=b"x")
    text = env.config_path.read_text()
    for name, value in iam.admin.items():
        text = text.replace(value, iam.reader_only[name])
    env.config_path.write_text(text)
    env.config = load_config(env.config_path, env={})
    proc = _refused(env, f"s3://{env.bucket}/data")
    assert proc.returncode == AccessDenied.exit_code, proc.stderr
    assert "access denied" in proc.stderr and f"'{env.bucket}'" in proc.stderr
    assert "s3:ListBucket" in proc.stderr


@pytest.fixture(scope="module")
def own_moto() -> Iterator[MotoServer]:
    server = MotoServer()
    try:
        yield server
    finally:
        server.stop()


def test_a_mount_that_works_lists_its_bucket_once(tmp_path: Path, own_moto: MotoServer) -> None:
    """The first page, asked for before mounting, is the listing's first page: no LIST twice."""
    env = make_env(tmp_path, own_moto.endpoint)
    objects = {f"data/d{i % 3}/f{i}.bin": bytes([i]) * (i + 1) for i in range(12)}
    own_moto.put_objects(env.bucket, objects.items())
    since = own_moto.log_size()
    mnt = env.mountpoint("works")
    with env.mounted(mnt, f"s3://{env.bucket}/data", "--no-prefetch"):
        assert read_tree(mnt) == {k.removeprefix("data/"): v for k, v in objects.items()}
        wait_until(lambda: '"state": "ready"' in (mnt / ".datahub").read_text(), 60)
    lists = [t for m, t, _ in own_moto.answered(env.bucket, since=since) if m == "GET" and "list-type=2" in t]
    assert len(lists) == 1, lists
    assert [d for d in _datasets(env) if d.startswith("s3.")]  # its snapshot, from that one listing


# --- first_listing without FUSE ----------------------------------------------------------------------
class _Store:
    """A store whose listing fails with ``error`` at its first page (or answers ``keys``)."""

    root_url = "s3://b/p"

    def __init__(self, keys: list[str], error: Exception | None = None) -> None:
        self.keys, self.error, self.lists = keys, error, 0

    def identity(self) -> str:
        return f"http://127.0.0.1:9 {self.root_url}"

    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo]:
        self.lists += 1
        if self.error is not None:
            raise self.error
        yield from (ObjectInfo(k, 1, "e", 0.0) for k in self.keys if k > start_after)


def test_first_listing_goes_on_from_its_first_answer() -> None:
    store = _Store(["a", "b", "c"])
    listing = first_listing(store, "s3://b/p")
    assert listing is not None and store.lists == 1
    assert [o.key for o in listing] == ["a", "b", "c"] and store.lists == 1
    empty = first_listing(_Store([]), "s3://b/p")
    assert empty is not None and list(empty) == []


def test_first_listing_leaves_a_transient_failure_to_the_loader() -> None:
    assert first_listing(_Store([], TransientStorageError("S3 is unavailable")), "s3://b/p") is None


def test_first_listing_refuses_a_missing_bucket_naming_it() -> None:
    missing = ObjectNotFound("bucket 'b' not found (s3://b): check the bucket name and endpoint", bucket="b")
    with pytest.raises(ObjectNotFound) as err:
        first_listing(_Store([], missing), "s3://b/p")
    assert "cannot mount s3://b/p" in err.value.message and "at http://127.0.0.1:9" in err.value.message
    assert err.value.details["bucket"] == "b" and err.value.exit_code == 3
