"""The plugin's S3 keys never go to an endpoint a pod's Secret names (caller71).

A volume's secrets overlay the plugin's ``[s3]`` (docs/csi.md, "Credentials"). A Secret in
the pod's namespace that set ``s3Endpoint`` alone kept the plugin's access key and secret, so
the mount process signed each read of the dataset's records outside the platform's objects
bucket with the plugin's keys and sent it to that endpoint: whoever ran it read the plugin's
access key id in every ``Authorization`` header (and its session token, with temporary
credentials). Such a publish is now PERMISSION_DENIED before anything is mounted, naming the
keys to give; nothing reaches the endpoint.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.csi.conftest import CsiEnv, Plugin

pytestmark = pytest.mark.fuse


class _Recorder(http.server.ThreadingHTTPServer):
    """An S3 endpoint run by whoever wrote a pod's Secret: it answers nothing and keeps the
    ``Authorization`` header of every request it gets."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        super().__init__(("127.0.0.1", 0), _RecordingHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _RecordingHandler(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        self.server.seen.append(self.headers.get("Authorization", ""))  # type: ignore[attr-defined]
        self.send_error(403)

    do_GET = do_HEAD = do_PUT = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    server = _Recorder()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_secret_naming_an_endpoint_without_keys_gets_none_of_the_plugins(
    plugin: Plugin, csi_env: CsiEnv, recorder: _Recorder
) -> None:
    seq = csi_env.commit("endpoint-keys", {"train/x.bin": b"the real bytes\n"})
    target = csi_env.target("endpoint-keys")
    context = {"dataset": "endpoint-keys", "version": str(seq)}
    refused = None
    try:
        plugin.publish(target, context, volume_id="endpoint-keys", secrets={"s3Endpoint": recorder.url})
    except grpc.RpcError as exc:
        refused = exc
    else:  # the base: published with the plugin's keys aimed at the pod's endpoint
        try:
            Path(target, "train", "x.bin").read_bytes()
        except OSError:
            pass  # the endpoint answers 403: the read fails, its Authorization header was sent
        finally:
            plugin.unpublish(target, "endpoint-keys")
    key_id = csi_env.config.s3.access_key_id
    leaked = [header for header in recorder.seen if f"Credential={key_id}/" in header]
    assert not leaked, f"the plugin's access key id reached the pod's endpoint: {leaked[:1]}"
    assert refused is not None, "published with the plugin's S3 keys aimed at the pod's endpoint"
    assert refused.code() == grpc.StatusCode.PERMISSION_DENIED, refused.details()
    details = refused.details()
    assert "s3AccessKeyId" in details and "s3SecretAccessKey" in details and "endpoint-keys" in details
    assert key_id not in details
    assert not plugin.state() and not recorder.seen


def test_a_secret_with_its_own_keys_may_name_its_endpoint(
    plugin: Plugin, csi_env: CsiEnv, recorder: _Recorder
) -> None:
    """What a Secret naming another endpoint brings is what that endpoint gets: its own keys."""
    seq = csi_env.commit("endpoint-own-keys", {"y.txt": b"y\n"})
    target = csi_env.target("endpoint-own-keys")
    secrets = {"s3Endpoint": recorder.url, "s3AccessKeyId": "their-key", "s3SecretAccessKey": "their-secret"}
    plugin.publish(
        target, {"dataset": "endpoint-own-keys", "version": str(seq)}, volume_id="own-keys", secrets=secrets
    )
    try:
        with pytest.raises(OSError):
            Path(target, "y.txt").read_bytes()  # the endpoint refuses: its business
    finally:
        plugin.unpublish(target, "own-keys")
    assert recorder.seen and all("Credential=their-key/" in header for header in recorder.seen)
