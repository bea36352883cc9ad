"""Bucket volumes share the node's cache, never what another pod's credentials may read.

A bucket volume reads with its pod's own S3 credentials (its Secret), and the node's disk
cache keeps pages by (URL, etag, page). A pod whose credentials may list the bucket but not
read an object was served the pages another pod had read before, without S3 ever seeing its
credentials for them (audit10's finding). Here S3 is a private moto server with its IAM
authorization on, so a policy can allow ``s3:ListBucket`` and deny ``s3:GetObject``; every
request the volumes send is counted in that server's request log.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import boto3
import grpc
import pytest
import requests

from tests.csi.conftest import CsiEnv, Plugin, make_env
from tests.csi.test_publish import pod_info
from tests.servers import MotoServer, S3Endpoint

pytestmark = pytest.mark.fuse

SMALL = os.urandom(150_000)  # one page: served by passthrough once in the disk tier
LARGE = os.urandom(5 * 1024 * 1024 + 17)  # two pages: read through the daemon
FILES = {"shared/small.bin": SMALL, "shared/large.bin": LARGE}


class IamMoto:
    """A moto server of this module's own, with users whose IAM policies S3 requests obey."""

    def __init__(self) -> None:
        self.server = MotoServer()
        self.url = self.server.endpoint.url
        self.admin = self.user("plugin", ["s3:*"])  # the plugin's own credentials
        self.reader = self.user("team-a", ["s3:ListBucket", "s3:GetObject"])
        self.lister = self.user("team-b", ["s3:ListBucket"])  # may list, may not read
        self.more_users()
        # from now on every request is authenticated and checked against the policies
        assert requests.post(f"{self.url}/moto-api/reset-auth", data=b"0", timeout=30).ok

    def more_users(self) -> None:
        """Users a subclass adds while IAM still accepts any request."""

    def user(self, name: str, actions: list[str], *, denied: tuple[str, ...] = ()) -> dict[str, str]:
        """A user allowed ``actions`` on every resource but the ``denied`` resources' ARNs."""
        iam = boto3.client(
            "iam", endpoint_url=self.url, region_name="us-east-1",
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )  # fmt: skip
        iam.create_user(UserName=name)
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]
            + ([{"Effect": "Deny", "Action": "s3:*", "Resource": list(denied)}] if denied else []),
        }
        iam.put_user_policy(UserName=name, PolicyName="s3", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return {"s3AccessKeyId": key["AccessKeyId"], "s3SecretAccessKey": key["SecretAccessKey"]}

    def endpoint(self) -> S3Endpoint:
        return S3Endpoint("moto", self.url, self.admin["s3AccessKeyId"], self.admin["s3SecretAccessKey"])

    def gets(self, bucket: str, key: str) -> int:
        """GETs of ``key`` the server answered (any status, any range)."""
        pattern = re.compile(rf"GET /{bucket}/{re.escape(key)}\S* HTTP/1\.[01]")
        return len(pattern.findall(Path(self.server.log.name).read_text(errors="replace")))


@pytest.fixture(scope="module")
def iam() -> Iterator[IamMoto]:
    moto = IamMoto()
    try:
        yield moto
    finally:
        moto.server.stop()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, iam: IamMoto) -> CsiEnv:
    env = make_env(tmp_path_factory.mktemp("csi-iam"), iam.endpoint())
    client = env.endpoint.client()
    for key, data in FILES.items():
        client.put_object(Bucket=env.bucket, Key=key, Body=data)
    return env


@pytest.fixture(scope="module")
def plugin(env: CsiEnv) -> Iterator[Plugin]:
    p = Plugin(env.root, env.config_path)
    try:
        yield p.start()
    finally:
        p.teardown()


def bucket_volume(env: CsiEnv, namespace: str) -> dict[str, str]:
    """An inline bucket volume of ``shared/``, without warm-up (each GET is a reader's)."""
    return {
        "bucket": env.bucket,
        "prefix": "shared",
        "prefetch": "false",
        "csi.storage.k8s.io/ephemeral": "true",
        **pod_info(namespace, "trainer"),
    }


def read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def test_a_pod_that_may_list_but_not_read_is_never_served_another_pods_cached_pages(
    plugin: Plugin, env: CsiEnv, iam: IamMoto
) -> None:
    a = env.target("team-a")
    plugin.publish(a, bucket_volume(env, "team-a"), volume_id="a", secrets=iam.reader)
    try:
        for key, data in FILES.items():  # cold: fetched with team a's credentials, cached on the node
            assert read(os.path.join(a, key.removeprefix("shared/"))) == data
        assert iam.gets(env.bucket, "shared/small.bin") == 1  # the cold read was its own check
    finally:
        plugin.unpublish(a, "a")
    b = env.target("team-b")
    plugin.publish(b, bucket_volume(env, "team-b"), volume_id="b", secrets=iam.lister)
    try:
        assert sorted(os.listdir(b)) == ["large.bin", "small.bin"]  # team b may list
        for name in ("small.bin", "large.bin"):
            for _ in range(2):  # again: a refusal is not remembered as a grant
                with pytest.raises(OSError) as err:
                    read(os.path.join(b, name))
                assert err.value.errno in (errno.EACCES, errno.EIO), err.value
    finally:
        plugin.unpublish(b, "b")


def test_pods_with_credentials_that_may_read_share_the_cache_for_one_small_get_per_object(
    plugin: Plugin, env: CsiEnv, iam: IamMoto
) -> None:
    """Another mount with reading credentials is served the cached bytes after one 1-byte GET
    per object, however often it opens it; the objects' bytes are not fetched again."""
    warm = env.target("team-a-warm")
    for key, data in FILES.items():  # cached by a first pod (or by the test above)
        first = env.target("team-a-first")
        plugin.publish(first, bucket_volume(env, "team-a"), volume_id="first", secrets=iam.reader)
        try:
            assert read(os.path.join(first, key.removeprefix("shared/"))) == data
        finally:
            plugin.unpublish(first, "first")
    before = {key: iam.gets(env.bucket, key) for key in FILES}
    plugin.publish(warm, bucket_volume(env, "team-a"), volume_id="warm", secrets=iam.reader)
    try:
        for _ in range(3):
            for key, data in FILES.items():
                assert read(os.path.join(warm, key.removeprefix("shared/"))) == data
    finally:
        plugin.unpublish(warm, "warm")
    assert {key: iam.gets(env.bucket, key) - before[key] for key in FILES} == dict.fromkeys(FILES, 1)


def test_a_staged_bucket_volume_is_not_shared_with_a_pod_bringing_other_credentials(
    plugin: Plugin, env: CsiEnv, iam: IamMoto
) -> None:
    staging = env.target("bucket-stage")
    os.makedirs(staging, exist_ok=True)
    context = {"bucket": env.bucket, "prefix": "shared", "prefetch": "false"}
    plugin.stage(staging, context, volume_id="pv-bucket", secrets=iam.reader)
    target = env.target("bucket-stage-pod")
    try:
        with pytest.raises(grpc.RpcError) as err:
            plugin.publish(
                target, {**context, **pod_info("team-b", "trainer")}, volume_id="pv-bucket",
                secrets=iam.lister, staging=staging,
            )  # fmt: skip
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
        assert not os.path.ismount(target)
    finally:
        plugin.unstage(staging, "pv-bucket")


def test_a_bucket_volume_reading_from_an_endpoint_of_its_secrets_keeps_nothing_on_the_nodes_disk(
    plugin: Plugin, env: CsiEnv, iam: IamMoto
) -> None:
    """Pages keep no endpoint in their name: a bucket volume whose Secret names another
    endpoint (here the same server by another name, which the plugin cannot tell apart) reads
    with ``cache: none``, as a dataset volume does (tests/csi/test_secrets.py)."""
    client = env.endpoint.client()
    client.put_object(Bucket=env.bucket, Key="elsewhere/only.bin", Body=b"x" * 70_000)
    disk = env.config.resolved_disk_dir
    before = sorted(str(p) for p in disk.rglob("*.page"))
    target = env.target("own-endpoint")
    context = {**bucket_volume(env, "team-a"), "prefix": "elsewhere"}
    other = {**iam.reader, "s3Endpoint": iam.url.replace("127.0.0.1", "localhost")}
    plugin.publish(target, context, volume_id="own-endpoint", secrets=other)
    try:
        assert read(os.path.join(target, "only.bin")) == b"x" * 70_000
        (record,) = [p for p in plugin.state() if p["target_path"] == target]
        assert record["spec"]["cache"] == "none"
    finally:
        plugin.unpublish(target, "own-endpoint")
    assert sorted(str(p) for p in disk.rglob("*.page")) == before
