"""The gRPC face of the plugin: the only module that imports grpc (and the generated stubs).

Three thin servicers turn protobuf requests into the plain types of ``node``/``controller``
and back; :func:`status_of` is the one translation of ``datahub.errors`` into gRPC status
codes. The server listens on a unix socket (``unix:///csi/csi.sock``), as a CO expects; the socket
is its owner's alone (:data:`SOCKET_MODE`): whoever can connect can publish any volume as
any pod, so the umask must not decide who can.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
import threading
from collections.abc import Callable
from concurrent import futures
from functools import wraps
from typing import Any

import grpc

from csi.controller import CapacityOutOfRange, ControllerService
from csi.node import NodeService, OperationPending, PublishRequest, StageRequest
from csi.proto_gen import csi_pb2 as pb
from csi.proto_gen import csi_pb2_grpc as rpc
from csi.volumes import Capability
from datahub import errors

log = logging.getLogger(__name__)

VENDOR_VERSION = "0.1.0"
# owner only: the kubelet and the sidecars (registrar, livenessprobe, provisioner) connect as
# root, the plugin's own user (the manifests pin runAsUser: 0 on every container of the socket)
SOCKET_MODE = 0o600

# most specific first: the first matching class decides the code
_STATUS: list[tuple[type[errors.DatahubError], grpc.StatusCode]] = [
    (CapacityOutOfRange, grpc.StatusCode.OUT_OF_RANGE),
    (errors.InvalidInput, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.ReadOnly, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.NotFound, grpc.StatusCode.NOT_FOUND),
    (errors.AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (OperationPending, grpc.StatusCode.ABORTED),
    (errors.Conflict, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.ObjectChanged, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (errors.AccessDenied, grpc.StatusCode.PERMISSION_DENIED),
    (errors.StorageError, grpc.StatusCode.UNAVAILABLE),
    (errors.NoSpace, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.Cancelled, grpc.StatusCode.CANCELLED),
]


def status_of(exc: errors.DatahubError) -> grpc.StatusCode:
    """The one translation from the datahub error tree to a gRPC status code."""
    for cls, code in _STATUS:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


def _rpc(fn: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(fn)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return fn(self, request, context)
        except errors.DatahubError as exc:
            code = status_of(exc)
            log.log(logging.ERROR if code == grpc.StatusCode.INTERNAL else logging.INFO,
                    "%s: %s: %s", fn.__name__, code.name, exc.message)  # fmt: skip
            context.abort(code, exc.message)
        except Exception as exc:
            log.exception("%s failed unexpectedly", fn.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"{fn.__name__} failed: {exc}; see the plugin log")

    return wrapper


def _capability(cap: pb.VolumeCapability) -> Capability:
    access_type = cap.WhichOneof("access_type") or ""
    mode = pb.VolumeCapability.AccessMode.Mode.Name(cap.access_mode.mode)
    return Capability(access_type, mode, tuple(cap.mount.mount_flags))


# --- Identity ---------------------------------------------------------------------------------
class IdentityServicer(rpc.IdentityServicer):
    def __init__(self, name: str, *, controller: bool, ready: Callable[[], bool]) -> None:
        self._name = name
        self._controller = controller
        self._ready = ready

    @_rpc
    def GetPluginInfo(self, request, context):
        return pb.GetPluginInfoResponse(name=self._name, vendor_version=VENDOR_VERSION)

    @_rpc
    def GetPluginCapabilities(self, request, context):
        caps = []
        if self._controller:
            service = pb.PluginCapability.Service(type=pb.PluginCapability.Service.CONTROLLER_SERVICE)
            caps.append(pb.PluginCapability(service=service))
        return pb.GetPluginCapabilitiesResponse(capabilities=caps)

    @_rpc
    def Probe(self, request, context):
        response = pb.ProbeResponse()
        response.ready.value = self._ready()
        return response


# --- Node -----------------------------------------------------------------------------------------
class NodeServicer(rpc.NodeServicer):
    def __init__(self, node: NodeService) -> None:
        self._node = node

    @_rpc
    def NodeStageVolume(self, request, context):
        self._node.stage(
            StageRequest(
                volume_id=request.volume_id,
                staging_target_path=request.staging_target_path,
                capability=_capability(request.volume_capability)
                if request.HasField("volume_capability")
                else None,
                context=dict(request.volume_context),
                secrets=dict(request.secrets),
            )
        )
        return pb.NodeStageVolumeResponse()

    @_rpc
    def NodeUnstageVolume(self, request, context):
        self._node.unstage(request.volume_id, request.staging_target_path)
        return pb.NodeUnstageVolumeResponse()

    @_rpc
    def NodePublishVolume(self, request, context):
        self._node.publish(
            PublishRequest(
                volume_id=request.volume_id,
                target_path=request.target_path,
                capability=_capability(request.volume_capability)
                if request.HasField("volume_capability")
                else None,
                readonly=request.readonly,
                context=dict(request.volume_context),
                secrets=dict(request.secrets),
                staging_target_path=request.staging_target_path,
            )
        )
        return pb.NodePublishVolumeResponse()

    @_rpc
    def NodeUnpublishVolume(self, request, context):
        self._node.unpublish(request.volume_id, request.target_path)
        return pb.NodeUnpublishVolumeResponse()

    @_rpc
    def NodeGetVolumeStats(self, request, context):
        stats = self._node.volume_stats(request.volume_id, request.volume_path)
        usage = []
        for unit, values in ((pb.VolumeUsage.BYTES, stats.bytes), (pb.VolumeUsage.INODES, stats.inodes)):
            if values is not None:
                total, available, used = values
                usage.append(pb.VolumeUsage(total=total, available=available, used=used, unit=unit))
        condition = pb.VolumeCondition(abnormal=stats.abnormal, message=stats.message)
        return pb.NodeGetVolumeStatsResponse(usage=usage, volume_condition=condition)

    @_rpc
    def NodeGetCapabilities(self, request, context):
        # staging: one mount process per staged volume, bound into every pod that publishes it;
        # volume stats with a condition: a dead (shared) mount process shows on every pod using it
        rpc_type = pb.NodeServiceCapability.RPC
        types = (rpc_type.STAGE_UNSTAGE_VOLUME, rpc_type.GET_VOLUME_STATS, rpc_type.VOLUME_CONDITION)
        return pb.NodeGetCapabilitiesResponse(
            capabilities=[pb.NodeServiceCapability(rpc=rpc_type(type=t)) for t in types]
        )

    @_rpc
    def NodeGetInfo(self, request, context):
        return pb.NodeGetInfoResponse(node_id=self._node.node_id)


# --- Controller ---------------------------------------------------------------------------------
class ControllerServicer(rpc.ControllerServicer):
    def __init__(self, controller: ControllerService) -> None:
        self._controller = controller

    @_rpc
    def CreateVolume(self, request, context):
        created = self._controller.create_volume(
            request.name,
            [_capability(c) for c in request.volume_capabilities],
            dict(request.parameters),
            required_bytes=request.capacity_range.required_bytes,
            limit_bytes=request.capacity_range.limit_bytes,
            has_content_source=request.HasField("volume_content_source"),
        )
        volume = pb.Volume(
            volume_id=created.volume_id, volume_context=created.context, capacity_bytes=created.capacity_bytes
        )
        return pb.CreateVolumeResponse(volume=volume)

    @_rpc
    def DeleteVolume(self, request, context):
        self._controller.delete_volume(request.volume_id)
        return pb.DeleteVolumeResponse()

    @_rpc
    def ValidateVolumeCapabilities(self, request, context):
        problem = self._controller.validate(
            request.volume_id,
            dict(request.volume_context),
            [_capability(c) for c in request.volume_capabilities],
        )
        if problem is not None:
            return pb.ValidateVolumeCapabilitiesResponse(message=problem)
        confirmed = pb.ValidateVolumeCapabilitiesResponse.Confirmed(
            volume_context=request.volume_context,
            volume_capabilities=request.volume_capabilities,
            parameters=request.parameters,
        )
        return pb.ValidateVolumeCapabilitiesResponse(confirmed=confirmed)

    @_rpc
    def ControllerGetVolume(self, request, context):
        found = self._controller.get_volume(request.volume_id)
        volume = pb.Volume(
            volume_id=found.volume_id, volume_context=found.context, capacity_bytes=found.capacity_bytes
        )
        return pb.ControllerGetVolumeResponse(volume=volume)

    @_rpc
    def ControllerGetCapabilities(self, request, context):
        rpc_type = pb.ControllerServiceCapability.RPC
        caps = [
            pb.ControllerServiceCapability(rpc=rpc_type(type=t))
            for t in (rpc_type.CREATE_DELETE_VOLUME, rpc_type.GET_VOLUME)
        ]
        return pb.ControllerGetCapabilitiesResponse(capabilities=caps)


# --- serving ----------------------------------------------------------------------------------------
def socket_path(endpoint: str) -> str:
    """``unix:///csi/csi.sock`` -> ``/csi/csi.sock`` (only unix sockets are served)."""
    if not endpoint.startswith("unix://"):
        raise errors.InvalidInput(f"endpoint {endpoint!r}: use unix:///path/to/csi.sock")
    path = endpoint[len("unix://") :]
    if not os.path.isabs(path):
        raise errors.InvalidInput(f"endpoint {endpoint!r}: the socket path must be absolute")
    return path


def _make_dirs(path: str) -> None:
    """``os.makedirs`` giving 0755 to every directory it makes, not the umask's mode (0777
    under umask 0): whoever may write a directory on the socket's path may put their own
    socket there and receive the kubelet's calls, secrets included."""
    if os.path.isdir(path):
        return
    _make_dirs(os.path.dirname(path))
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o755)


def check_socket_dir(directory: str) -> None:
    """Make the socket's ``directory`` writable by its owner alone, and refuse (InvalidInput)
    a directory above it that another user may write (unless sticky, as ``/tmp`` is: nobody
    renames another's entry there) or that another user owns.

    Why: whoever may write a directory on the socket's path may rename the plugin's socket
    away and bind their own at the endpoint (or rename a directory above it), and then
    receives the kubelet's calls, the Secrets of NodePublishVolume included. ``_make_dirs``
    gives 0755 to the directories it makes, but one that already existed was taken as it was:
    the socket served from a 0777 directory (a controller's ``emptyDir`` is one) could be
    replaced by anyone who reached it. The socket's own directory holds nothing but the
    socket, whose every client connects as root (docs/csi.md), so the plugin tightens it when
    it owns it; one it does not own, or a loose one above it, it cannot fix, and refuses."""
    me = os.geteuid()
    current = os.path.realpath(directory)
    own = True
    while True:
        info = os.stat(current)
        mode = stat.S_IMODE(info.st_mode)
        loose = bool(mode & 0o022) and not mode & stat.S_ISVTX
        if own and loose and info.st_uid == me:
            log.warning("CSI socket directory %s was mode %04o: made %04o", current, mode, mode & ~0o022)
            os.chmod(current, mode & ~0o022)
            loose = False
        if loose or info.st_uid not in (0, me):
            raise errors.InvalidInput(
                f"CSI socket directory {current!r} is {'writable by others' if loose else 'owned by another user'} "
                f"(mode {mode:04o}, uid {info.st_uid}): whoever may write it can replace the socket and receive "
                f"the kubelet's calls, Secrets included; make it writable by its owner alone (chmod go-w {current}), "
                "owned by root or the plugin's user, or choose another --endpoint",
                path=current,
            )
        parent = os.path.dirname(current)
        if parent == current:
            return
        current, own = parent, False


def _listen_privately(server: grpc.Server, path: str) -> None:
    """Listen on ``path`` with :data:`SOCKET_MODE`, never reachable by anyone else meanwhile.

    gRPC binds and listens in ``add_insecure_port``, with the mode the process umask gives
    (0777 under umask 0), and has no option for it; ``fchmod`` on a socket's fd changes the
    socket's own inode, not the bound path's. So the socket is bound in a fresh 0700
    directory beside ``path`` (nobody else can reach it there), chmod-ed on its path, then
    renamed over ``path`` (atomic; it also replaces a socket left by a previous run)."""
    private = tempfile.mkdtemp(prefix=".s", dir=os.path.dirname(path))  # 0700 whatever the umask
    bound = os.path.join(private, "s")  # short: unix socket paths hold 107 bytes
    try:
        server.add_insecure_port(f"unix://{bound}")
        os.chmod(bound, SOCKET_MODE)
        os.replace(bound, path)
    finally:
        if os.path.lexists(bound):
            os.unlink(bound)
        os.rmdir(private)


def serve(
    endpoint: str,
    *,
    name: str,
    node: NodeService | None,
    controller: ControllerService | None,
    stop: threading.Event,
    workers: int = 8,
) -> None:
    """Serve until ``stop`` is set (the entry point sets it on SIGTERM/SIGINT)."""
    path = socket_path(endpoint)
    _make_dirs(os.path.dirname(path))
    check_socket_dir(os.path.dirname(path))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="csi-rpc"))

    def ready() -> bool:
        return node is None or node.ready.is_set()

    rpc.add_IdentityServicer_to_server(
        IdentityServicer(name, controller=controller is not None, ready=ready), server
    )
    if node is not None:
        rpc.add_NodeServicer_to_server(NodeServicer(node), server)
    if controller is not None:
        rpc.add_ControllerServicer_to_server(ControllerServicer(controller), server)
    _listen_privately(server, path)
    server.start()
    log.info("serving CSI %s on %s", name, endpoint)
    stop.wait()
    server.stop(grace=5).wait()
    log.info("stopped serving on %s", endpoint)
