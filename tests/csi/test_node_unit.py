"""NodeService and the error translation without a socket: one operation per target, codes."""

from __future__ import annotations

import grpc
import pytest

from csi.node import NodeService, OperationPending
from csi.server import status_of
from datahub import errors
from datahub.config import load_config


def test_a_second_operation_on_a_busy_target_is_refused_not_queued(tmp_path) -> None:
    node = NodeService(
        load_config(env={}, overrides={"home": str(tmp_path / "home")}), tmp_path / "state", "n"
    )
    with node._target("/pods/a/mount"):
        with pytest.raises(OperationPending), node._target("/pods/a/mount"):
            pass
        with node._target("/pods/b/mount"):  # other targets are independent
            pass
    with node._target("/pods/a/mount"):  # released afterwards
        pass


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.InvalidName("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (errors.VersionNotFound("x"), grpc.StatusCode.NOT_FOUND),
        (errors.AlreadyExists("x"), grpc.StatusCode.ALREADY_EXISTS),
        (OperationPending("x"), grpc.StatusCode.ABORTED),
        (errors.Conflict("x"), grpc.StatusCode.FAILED_PRECONDITION),
        (errors.AccessDenied("x"), grpc.StatusCode.PERMISSION_DENIED),
        (errors.TransientStorageError("x"), grpc.StatusCode.UNAVAILABLE),
        (errors.NoSpace("x"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (errors.DatahubError("x"), grpc.StatusCode.INTERNAL),
    ],
)
def test_errors_become_grpc_codes(error: errors.DatahubError, code: grpc.StatusCode) -> None:
    assert status_of(error) == code


def test_a_state_file_written_before_staging_loads_as_targets_with_their_own_process(tmp_path) -> None:
    """An upgraded plugin must recover what the previous one published (format 1, no stage fields)."""
    import json

    from csi.state import StateFile

    spec = {"kind": "dataset", "dataset": "imgs", "version": "1", "bucket": "", "prefix": "", "refresh": False,
            "workspace": "", "commit_to": "", "cache": "read-only", "uid": None, "gid": None, "quota_bytes": 0,
            "prefetch": None}  # fmt: skip
    old = {"target_path": "/pods/a/mount", "volume_id": "v", "spec": spec, "readonly": True, "fingerprint": "f",
           "sources": ["imgs@1"], "subdir": "imgs/v1", "volume_dir": str(tmp_path / "volumes" / "k"),
           "resolved": "imgs@v1", "pid": 42, "unpublishing": False, "published_at": 1.0,
           "extra": {"requested_readonly": False}}  # fmt: skip
    (tmp_path / "published.json").write_text(json.dumps({"format": 1, "published": [old]}))
    [p] = StateFile(tmp_path / "published.json").load().values()
    assert p.owns_process and not p.staged and p.staging_path == "" and p.pid == 42


def test_a_publish_may_wait_briefly_for_its_stage_but_not_for_a_target(tmp_path) -> None:
    import threading

    node = NodeService(
        load_config(env={}, overrides={"home": str(tmp_path / "home")}), tmp_path / "state", "n"
    )
    held, release = threading.Event(), threading.Event()

    def bind() -> None:  # another publish holding the stage for its bind
        with node._target("/stage"):
            held.set()
            release.wait(10)

    worker = threading.Thread(target=bind)
    worker.start()
    held.wait(10)
    with pytest.raises(OperationPending), node._target("/stage"):
        pass
    threading.Timer(0.2, release.set).start()
    with node._target("/stage", wait=10):  # got it once the bind was done
        pass
    worker.join()
