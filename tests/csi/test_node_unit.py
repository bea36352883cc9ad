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
