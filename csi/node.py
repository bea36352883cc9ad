"""The Node service's behaviour, in plain Python: stage, publish, unpublish, unstage, and healing.

* NodeStageVolume mounts a volume once per node: one mount process on a private dir of the
  state dir, its view bound onto the CO's staging path. Every NodePublishVolume that names
  that staging path is then a bind mount of the same view: eight pods on a node reading one
  PV share one daemon and one namespace. Each publish still checks the pod's access
  (csi/access.py) itself, and a workspace stage serves one target at a time (one writer).
  NodeUnstageVolume stops the process (a workspace flushes and commits), and only once no
  target is published from it.
* A workspace is written by one volume per node: a second volume naming it (a second pod's
  inline volume, another PV) is refused before its mount process starts, the refusal naming
  the volume, target and pod that write it (never the plugin's private mount point to unmount).
* A NodePublishVolume without a staging path (Kubernetes never stages inline volumes)
  validates the request, resolves what to show (a dataset ref becomes a
  version number, recorded), starts the volume's mount process on a private staging dir,
  bind-mounts the part the pod should see onto the target (read-only unless it is a
  writable workspace published read-write), and records the target in the state file.
  Publishing the same request again is a no-op (after repairing the mount if it broke);
  a different request for a published target is AlreadyExists.
* NodeUnpublishVolume unmounts the target, stops the mount process through
  ``fuse_adapter umount`` (a workspace flushes, and commits if asked), forgets the target
  and removes it. A target that is already gone is success.
* The supervisor (and the first pass at start) checks every recorded target: a mount whose
  daemon died answers ENOTCONN; it is mounted again with the *recorded* version (so a
  restart never switches a pod to another version), the new view beneath the dead one,
  which is then detached: the target is never the bare directory a pod could write into.

One operation at a time per target: a per-target lock is held across the mount work (that
is its purpose) and a second caller gets OperationPending (ABORTED) instead of waiting; the
shared mutex guards only in-memory maps and is never held during I/O.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from csi import access, mounts
from csi.finish import finish_workspace
from csi.state import Published, StateFile
from csi.volume_config import renew_platform_keys, write_volume_config
from csi.volumes import (
    KUBERNETES_PREFIX,
    READER_MODES,
    Capability,
    VolumeSpec,
    check_capability,
    check_inline_pod_info,
    check_volume_id,
    parse_context,
    parse_secrets,
)
from datahub.config import Config, load_config
from datahub.errors import (
    AccessDenied,
    AlreadyExists,
    Conflict,
    DatahubError,
    DatasetNotFound,
    InvalidInput,
    ListingUnavailable,
    NotFound,
)
from fuse_adapter.daemon import (
    MountRecord,
    canonical,
    is_mount_daemon,
    is_mounted,
    pid_alive,
    read_record,
    workspace_mount,
)

if TYPE_CHECKING:
    from datahub.catalog import Catalog, Dataset

log = logging.getLogger(__name__)

CHECK_DONE = "health check of published targets done"  # logged (debug) after every pass
STAGE_WAIT = 10.0  # seconds a publish waits for its stage's lock (held by other publishes for a bind)
# a FIFO where a repair waits, between detaching the dead FUSE mount and starting the new process,
# until the test holding it closes its end: tests/csi/test_csirace16.py (never set in a deployment)
REPAIR_HOLD = "DATAHUB_TEST_CSI_REPAIR_HOLD"
PASS_HOLD = "DATAHUB_TEST_CSI_PASS_HOLD"  # the tests' pause point between a pass's stages and targets
NODE_AUTHOR = "system:node:"  # + node id: the author of a workspace's versions no pod was named for
DEFAULT_KUBELET_DIR = "/var/lib/kubelet"  # the kubelet's --root-dir: pods' targets and staging paths


class OperationPending(Conflict):
    """Another operation holds the target (gRPC ABORTED: retry later)."""

    code = "operation_pending"


@dataclass
class PublishRequest:
    volume_id: str
    target_path: str
    capability: Capability | None
    readonly: bool = False
    context: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict)
    staging_target_path: str = ""  # set when the volume was staged (NodeStageVolume)


@dataclass
class StageRequest:
    volume_id: str
    staging_target_path: str
    capability: Capability | None
    context: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VolumeStats:
    """NodeGetVolumeStats' answer: the volume's condition, and its usage (statfs) when it serves."""

    abnormal: bool
    message: str
    bytes: tuple[int, int, int] | None = None  # total, available, used
    inodes: tuple[int, int, int] | None = None  # total, available, used


class NodeService:
    def __init__(
        self,
        config: Config,
        state_dir: Path,
        node_id: str,
        *,
        mount_timeout: float = 120.0,
        unmount_timeout: float = 600.0,
        kubelet_dir: str | Path = DEFAULT_KUBELET_DIR,
    ) -> None:
        self.config = config
        self.node_id = node_id
        # symlinks resolved once: the kubelet's dir may itself be a link (/var/lib/kubelet -> /data/kubelet)
        self.kubelet_dir = os.path.realpath(kubelet_dir)
        self.state_dir = Path(state_dir).resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        self.mount_timeout = mount_timeout
        self.unmount_timeout = unmount_timeout
        self._state = StateFile(self.state_dir / "published.json")
        self._published: dict[str, Published] = self._state.load()
        self._children: dict[str, subprocess.Popen] = {}
        self._target_locks: dict[str, threading.Lock] = {}
        self._claimed: set[str] = set()  # new paths a stage or publish is mounting (not yet recorded)
        # workspace -> (path, volume id) of the stage or publish starting its mount (not yet recorded)
        self._opening: dict[str, tuple[str, str]] = {}
        self._mutex = threading.Lock()  # in-memory maps only; never held during I/O
        self.ready = threading.Event()  # set after the first check of recorded targets

    # --- bookkeeping ----------------------------------------------------------------------
    @contextlib.contextmanager
    def _target(self, target: str, *, wait: float = 0.0) -> Iterator[None]:
        """Exclusive use of ``target`` for one operation; OperationPending if another has it.

        The spec's answer to a second call while one is in flight is ABORTED (the CO backs
        off and retries); waiting instead would pile up RPC threads behind a slow mount.
        ``wait``: how long a publish may wait for its stage, which other publishes hold only
        for a bind (eight pods starting together should not all back off); a stage being
        remounted still answers ABORTED after that.
        """
        with self._mutex:
            lock = self._target_locks.setdefault(target, threading.Lock())
        if not (lock.acquire(timeout=wait) if wait else lock.acquire(blocking=False)):
            raise OperationPending(
                f"an operation on target {target} is in progress; retry", target_path=target
            )
        try:
            yield
        finally:
            lock.release()

    def _get(self, target: str) -> Published | None:
        with self._mutex:
            return self._published.get(target)

    def _put(self, p: Published | None, target: str) -> None:
        with self._mutex:
            if p is None:
                self._published.pop(target, None)
            else:
                self._published[target] = p
        self._state.save(self.published)

    def published(self) -> list[Published]:
        with self._mutex:
            return list(self._published.values())

    # --- NodePublishVolume ------------------------------------------------------------------
    def publish(self, req: PublishRequest) -> None:
        check_volume_id(req.volume_id, "NodePublishVolume")
        if not req.target_path or not os.path.isabs(req.target_path):
            raise InvalidInput(f"NodePublishVolume {req.volume_id!r}: target_path must be an absolute path")
        if req.staging_target_path and not os.path.isabs(req.staging_target_path):
            raise InvalidInput(
                f"NodePublishVolume {req.volume_id!r}: staging_target_path must be an absolute path"
            )
        if not req.staging_target_path:  # Kubernetes never stages inline volumes
            check_inline_pod_info(req.volume_id, req.context)
        spec = parse_context(req.context, req.volume_id)
        cap = check_capability(spec, req.capability, req.volume_id)
        overrides = parse_secrets(req.secrets)
        readonly = req.readonly or not spec.writable or cap.access_mode in READER_MODES
        target = self._in_kubelet_dir("NodePublishVolume", req.volume_id, "target_path", req.target_path)
        staging = req.staging_target_path and self._in_kubelet_dir(
            "NodePublishVolume", req.volume_id, "staging_target_path", req.staging_target_path
        )
        fingerprint = _fingerprint(req.volume_id, req.context, cap, readonly, staging)
        with self._target(target):
            existing = self._get(target)
            if existing is not None:
                if existing.unpublishing:
                    raise Conflict(
                        f"target {target} is being unpublished (its workspace flush failed); "
                        "NodeUnpublishVolume must succeed first",
                        target_path=target,
                    )
                asked_readonly = existing.extra.get("requested_readonly")
                if existing.fingerprint != fingerprint or (
                    asked_readonly is not None and asked_readonly != req.readonly
                ):
                    raise AlreadyExists(
                        f"target {target} is already published with different parameters "
                        f"(volume {existing.volume_id!r}); unpublish it first",
                        target_path=target,
                    )
                if self._health(existing) != "ok":
                    self._recover(existing)
                return
            with self._new_path(target, req.volume_id):
                self._clear_leftover(target, volume_id=req.volume_id)
                # the flag as asked: a read-only volume is mounted read-only either way, yet
                # readonly=false later is a different request (ALREADY_EXISTS), as the spec says
                extra: dict = {"requested_readonly": req.readonly}
                pod = _pod(req.context)
                if pod:  # named when another volume finds this one writing its workspace
                    extra["pod"] = pod
                principal = access.pod_principal(req.context)
                if staging:
                    self._publish_staged(
                        req, target, staging, readonly, fingerprint, overrides, principal, extra
                    )
                    return
                self._mount_new(
                    req.volume_id, target, spec, readonly, fingerprint, overrides, principal, extra
                )
            log.info(
                "published %s (%s) at %s",
                req.volume_id,
                self._get(target).resolved or _describe(spec),
                target,
            )

    def _mount_new(
        self,
        volume_id: str,
        path: str,
        spec: VolumeSpec,
        readonly: bool,
        fingerprint: str,
        overrides: dict,
        principal: str | None,
        extra: dict,
        *,
        staged: bool = False,
    ) -> None:
        """Start a mount process for ``spec`` and bind its view onto ``path`` (a target, or a
        staging path when ``staged``: then nobody's access is checked yet, each publish does)."""
        with self._sole_writer(volume_id, path, spec):
            self._mount_process(
                volume_id, path, spec, readonly, fingerprint, overrides, principal, extra, staged=staged
            )

    def _mount_process(
        self,
        volume_id: str,
        path: str,
        spec: VolumeSpec,
        readonly: bool,
        fingerprint: str,
        overrides: dict,
        principal: str | None,
        extra: dict,
        *,
        staged: bool,
    ) -> None:
        """:meth:`_mount_new`'s work, once the volume is the only writer of its workspace here."""
        volume_dir = self._volume_dir(path)
        self._stop_leftover_process(volume_dir)
        if spec.kind == "bucket":
            access.require_own_credentials(overrides, spec.bucket_url, volume_id)
        if _own_endpoint(overrides, self.config):  # the plugin's keys would sign for that endpoint
            access.require_keys_for_endpoint(overrides, volume_id)
            if spec.kind == "bucket":  # its listing is that endpoint's, not the platform bucket's
                extra["own_endpoint"] = True
        if spec.kind == "workspace":
            overrides = {**overrides, "cache": {"profile": "write-back"}}
        elif spec.cache != "none" and _own_endpoint(overrides, self.config):
            # the node's disk and shared tiers keep pages by (URL, etag, page), which name no
            # endpoint: pages from the endpoint a pod's secrets chose would be served to every
            # other pod reading those URLs, whatever bytes that endpoint sent
            spec = dataclasses.replace(spec, cache="none")
            log.info("volume %s reads from its own S3 endpoint: no shared cache (cache: none)", volume_id)
        try:
            config = write_volume_config(
                self.config,
                overrides,
                volume_dir / "datahub.toml",
                catalog_authorised=spec.catalog_authorised,
            )
            sources, subdir, resolved = _plan(spec, config, principal, check_access=not staged)
            if spec.kind == "workspace" and principal:  # the pod that writes it: its versions' author
                extra["author"] = principal
            p = Published(
                target_path=path,
                volume_id=volume_id,
                spec=spec,
                readonly=readonly,
                fingerprint=fingerprint,
                sources=sources,
                subdir=subdir,
                volume_dir=str(volume_dir),
                resolved=resolved,
                published_at=time.time(),
                extra=extra,
                staged=staged,
            )
            self._start(p, first=True)
        except BaseException:
            shutil.rmtree(volume_dir, ignore_errors=True)  # nothing half-made stays (not the secrets)
            raise
        self._put(p, path)

    def _publish_staged(
        self,
        req: PublishRequest,
        target: str,
        staging: str,
        readonly: bool,
        fingerprint: str,
        overrides: dict,
        principal: str | None,
        extra: dict,
    ) -> None:
        """Bind the view of the volume staged at ``staging`` onto ``target``, once this pod may see it.

        The stage's mount process runs with the stage's credentials (NodeStage secrets): a
        publish bringing other ones is refused rather than served with credentials it did not
        choose. The stage's record is checked (``_usable_stage``) once before its lock, to
        refuse at once what is plainly wrong, and again under it: that check decides, since an
        unstage and a new stage of another volume at the same path may run in between."""
        self._usable_stage(req, target, staging, readonly)
        with self._target(staging, wait=STAGE_WAIT):  # the stage stays as it is until this target is recorded
            stage = self._usable_stage(req, target, staging, readonly)
            if stage.spec.kind == "workspace":
                holders = [self._pod_at(q) for q in self.published() if q.staging_path == staging]
                if holders:
                    raise Conflict(
                        f"workspace {stage.spec.workspace!r} (volume {req.volume_id!r}) is published at "
                        f"{holders[0]} on this node; a workspace has one writer: let that pod finish, "
                        "or delete it (its NodeUnpublishVolume lets the workspace go)",
                        volume_id=req.volume_id,
                        target_path=target,
                    )
            config = load_config(stage.config_path, env={})
            if not _same_settings(overrides, config):
                raise Conflict(
                    f"volume {req.volume_id!r} was staged at {staging} with other credentials than this "
                    "NodePublishVolume brings; a staged volume's mount uses NodeStageVolume's secrets "
                    "(nodeStageSecretRef): give them there",
                    volume_id=req.volume_id,
                    target_path=target,
                )
            _check_access(stage.spec, config, principal)
            if self._health(stage) != "ok":
                self._recover(stage)
            p = Published(
                target_path=target,
                volume_id=req.volume_id,
                spec=stage.spec,
                readonly=readonly or stage.readonly,  # never writable over a read-only stage
                fingerprint=fingerprint,
                sources=[],
                subdir=stage.subdir,
                volume_dir="",
                resolved=stage.resolved,
                published_at=time.time(),
                extra=extra,
                staging_path=staging,
            )
            self._bind_target(stage, p)
            self._put(p, target)
        log.info(
            "published %s (%s, staged at %s) at %s",
            req.volume_id,
            p.resolved or _describe(p.spec),
            staging,
            target,
        )

    def _usable_stage(self, req: PublishRequest, target: str, staging: str, readonly: bool) -> Published:
        """The record of the volume staged at ``staging``, if ``req`` may be bound from it; else the
        error naming what differs and what to do.

        A read-write publish (a writable workspace, a writer access mode, ``readonly`` false) of
        a stage made with a reader-only access mode is FAILED_PRECONDITION: before, it was
        bound read-only without a word, and the pod that asked to write got EROFS at its first
        write, long after the kubelet had reported the volume mounted as asked."""
        stage = self._get(staging)
        if stage is None or not stage.staged:
            raise Conflict(
                f"volume {req.volume_id!r} is not staged at {staging}; NodeStageVolume must succeed first",
                volume_id=req.volume_id,
                target_path=target,
            )
        if stage.unpublishing:
            raise Conflict(
                f"volume {stage.volume_id!r} is being unstaged from {staging}; NodeStageVolume must "
                "succeed again first",
                volume_id=req.volume_id,
                target_path=target,
            )
        if stage.volume_id != req.volume_id:
            raise NotFound(
                f"staging path {staging} holds volume {stage.volume_id!r}, not {req.volume_id!r}",
                volume_id=req.volume_id,
            )
        if _attributes(req.context) != _attributes(stage.extra.get("context", {})):
            raise Conflict(
                f"volume {req.volume_id!r} is published with other attributes than it was staged with at "
                f"{staging} (it shows {stage.resolved or _describe(stage.spec)}); a different version or "
                "configuration is a different volume",
                volume_id=req.volume_id,
                target_path=target,
            )
        if stage.readonly and not readonly:
            raise Conflict(
                f"volume {req.volume_id!r} was staged read-only at {staging} (a reader-only access mode), "
                f"and this NodePublishVolume at {target} asks to write it; publish it read-only "
                "(readonly, or a reader-only access mode), or unstage it and stage it with a writer "
                "access mode",
                volume_id=req.volume_id,
                target_path=target,
            )
        return stage

    @contextlib.contextmanager
    def _sole_writer(self, volume_id: str, path: str, spec: VolumeSpec) -> Iterator[None]:
        """For a workspace volume about to be mounted for ``path``: Conflict naming the volume of
        this plugin that writes that workspace on this node already (recorded, or being mounted
        right now), else the workspace reserved for ``path`` until the block ends (recorded by then).

        Why here and not the mount process's refusal: every volume's mount process shares the
        plugin's home, so the second one was refused by the workspace's journal lock, and its
        message told the kubelet to ``datahub umount`` the plugin's private mount point, which
        on a node is the first pod's volume (an operator following it pulled that pod's files
        from under it). The plugin knows which volume and pod hold the workspace: it says so, in
        the terms of the cluster."""
        if spec.kind != "workspace":
            yield
            return
        with self._mutex:  # checked and reserved at once: two publishes at once cannot both pass
            holder = next(
                (
                    q
                    for q in self._published.values()
                    if q.owns_process
                    and q.spec.kind == "workspace"
                    and q.spec.workspace == spec.workspace
                    and q.target_path != path
                ),
                None,
            )
            opening = self._opening.get(spec.workspace)
            if holder is None and (opening is None or opening[0] == path):
                self._opening[spec.workspace] = (path, volume_id)
                opening = None
        if holder is not None or opening is not None:
            raise self._writer_conflict(volume_id, path, spec.workspace, holder, opening)
        try:
            yield
        finally:
            with self._mutex:
                if self._opening.get(spec.workspace, ("",))[0] == path:
                    del self._opening[spec.workspace]

    def _writer_conflict(
        self,
        volume_id: str,
        path: str,
        workspace: str,
        holder: Published | None,
        opening: tuple[str, str] | None,
    ) -> Conflict:
        """FAILED_PRECONDITION for volume ``volume_id`` at ``path``: workspace ``workspace`` is written
        by ``holder`` (a record), or by the volume being mounted at ``opening`` (path, volume id)."""
        if holder is not None and holder.staged:
            pods = [self._pod_at(q) for q in self.published() if q.staging_path == holder.target_path]
            used = f"published from there at {', '.join(pods)}" if pods else "no pod uses it now"
            held = f"volume {holder.volume_id!r}, staged on this node at {holder.target_path} ({used})"
            release = (
                "let the pods that use that volume on this node finish, or delete them: once none "
                "does, the kubelet unstages it (NodeUnstageVolume flushes the workspace and lets it go)"
            )
        else:
            if holder is not None:
                held = f"volume {holder.volume_id!r}, published on this node at {self._pod_at(holder)}"
                if holder.unpublishing:
                    held += " (being unpublished: its flush failed, and the kubelet retries it)"
            else:
                held = f"volume {opening[1]!r}, being published on this node at {opening[0]} right now"
            release = (
                "let that pod finish, or delete it: its NodeUnpublishVolume flushes the workspace "
                "and lets it go"
            )
        return Conflict(
            f"volume {volume_id!r} cannot be mounted at {path}: its workspace {workspace!r} is written "
            f"by {held}, and a workspace has one writer. That mount is this plugin's, serving that "
            f"volume: do not unmount it by hand. {release[0].upper()}{release[1:]}; the kubelet's "
            "retry then mounts this volume. Or give this volume another workspace name",
            volume_id=volume_id,
            target_path=path,
            workspace=workspace,
            holder_volume_id=holder.volume_id if holder is not None else opening[1],
        )

    def _held_elsewhere(self, p: Published, refused: Conflict) -> Conflict:
        """The error for workspace volume ``p`` whose mount process was refused (``refused``) although
        no recorded volume of this plugin writes the workspace (:meth:`_sole_writer`): when the
        holder is a mount process of this plugin no record names (a crash cut a call short), or
        another node (its writer lease), FAILED_PRECONDITION saying so in the cluster's terms and
        naming no private path to unmount; else (a ``datahub mount`` on the node, a lease that
        cannot be read or was let go since) ``refused``, the mount process's own words."""
        from datahub.catalog import open_catalog
        from datahub.workspaces import leased

        workspace = p.spec.workspace
        config = load_config(p.config_path, env={})
        what = f"volume {p.volume_id!r} cannot be mounted at {p.target_path}: its workspace {workspace!r}"
        for mnt in sorted((self.state_dir / "volumes").glob("*/mnt")):
            record = read_record(config.home_path, str(mnt))
            if (
                str(mnt) != p.staging
                and record is not None
                and record.kind == "workspace"
                and record.workspace == workspace
                and record.pid > 0
                and pid_alive(record.pid)
            ):
                return Conflict(
                    f"{what} is written by a mount process of this plugin that no volume's record names "
                    f"(pid {record.pid}, left when the plugin was killed between a mount and its record), "
                    "and a workspace has one writer. It stops when the kubelet retries or undoes the call "
                    "it was started for (NodePublishVolume or NodeUnpublishVolume of that pod's volume; "
                    "NodeStageVolume or NodeUnstageVolume of a PV); do not unmount it by hand. Or give "
                    "this volume another workspace name",
                    volume_id=p.volume_id,
                    target_path=p.target_path,
                    workspace=workspace,
                    pid=record.pid,
                )
        if not leased(config.resolved_catalog_url):
            return refused
        try:
            catalog = open_catalog(config.resolved_catalog_url, retry=config.catalog)
            try:
                lease = catalog.store.lease(workspace)
            finally:
                catalog.close()
        except DatahubError as exc:
            log.info("workspace %s: its writer lease could not be read (%s)", workspace, exc)
            return refused
        left = lease.expires - time.time() if lease is not None else 0.0
        if lease is None or left <= 0:
            return refused  # let go since: the kubelet's retry mounts it
        pid = lease.holder.partition(" pid ")[2].split(" ", 1)[0]  # "host H pid P [principal]"
        if pid.isdigit() and workspace_mount(config.home_path, workspace, int(pid)) is not None:
            return refused  # a `datahub mount` on this node with the plugin's home: its advice holds
        return Conflict(
            f"{what} is written by another node: {lease.holder} holds its writer lease (epoch "
            f"{lease.epoch}), which lapses in {left:.0f} s unless renewed, and a workspace has one "
            "writer. A pod on that node uses it (this PV, or an inline volume naming the same "
            "workspace): let that pod finish, or delete it; its node's NodeUnpublishVolume "
            "(NodeUnstageVolume for a PV) lets the workspace go, and the kubelet's retry then mounts "
            "this volume. If that node is gone, the retry succeeds once the lease lapses. Or give "
            "this volume another workspace name",
            volume_id=p.volume_id,
            target_path=p.target_path,
            workspace=workspace,
            holder=lease.holder,
        )

    @staticmethod
    def _pod_at(p: Published) -> str:
        """``p``'s target, and the pod it serves when the kubelet said (``podInfoOnMount``)."""
        pod = p.extra.get("pod")
        return f"{p.target_path} for pod {pod}" if pod else p.target_path

    def _author(self, p: Published | None) -> str:
        """The author of the versions workspace volume ``p`` commits (docs/csi.md, "Who wrote a
        workspace's versions"): the service account of the pod the kubelet named at the publish
        that mounted it (an inline volume), else this node (a PV, mounted at NodeStageVolume
        before any pod, and written by the pods that publish it in turn; a volume whose record
        a crash lost)."""
        return (p.extra.get("author") if p is not None else None) or NODE_AUTHOR + self.node_id

    def _bind_target(self, stage: Published, p: Published) -> None:
        """Bind ``stage``'s view onto the target of ``p`` (see :func:`_place_view`)."""
        _place_view(_view(stage), p.target_path, readonly=p.readonly)

    def _in_kubelet_dir(self, rpc: str, volume_id: str, name: str, path: str) -> str:
        """``path`` made canonical (``..`` and its parents' symlinks resolved, as it is mounted);
        InvalidInput naming it if that lies outside the kubelet's dir (``--kubelet-dir``).

        Why: the kubelet only ever names paths under its own dir (``pods/<uid>/volumes/...``,
        ``plugins/kubernetes.io/csi/...``); anything else reaching the socket could have a volume
        bound over ``/etc`` or ``/usr/bin`` of the node, or a pod's data shown in a host dir."""
        resolved = _canonical_arg(rpc, volume_id, name, path)
        if not _inside(resolved, self.kubelet_dir):
            shown = path if resolved == path else f"{path} (resolved: {resolved})"
            raise InvalidInput(
                f"{rpc} {volume_id!r}: {name} {shown} is outside the kubelet's directory "
                f"{self.kubelet_dir}; the kubelet names paths under it only (start the plugin with "
                "--kubelet-dir set to the kubelet's --root-dir if it is elsewhere)",
                volume_id=volume_id,
                target_path=path,
            )
        return resolved

    @contextlib.contextmanager
    def _new_path(self, path: str, volume_id: str) -> Iterator[None]:
        """Claim the new target or staging ``path`` for the block (its mount work, up to its
        record); Conflict if it is a symlink or a file, the state dir, or lies inside (or holds)
        the state dir or another volume's path: recorded, or claimed by a stage or publish under
        way. Why the claims: checked against records alone, two publishes at once of a path and
        a path inside it both passed, each before the other was recorded, and both were mounted.

        ``mount`` follows a symlink: a bind onto a link named another pod's volume (or any host
        directory) was stacked there, and unpublishing the link left that pod a dead mount. A
        path inside a writable volume was created in the pod's files (and flushed with them),
        and its bind kept the outer volume from unmounting (csi14).
        """
        if os.path.islink(path):
            raise Conflict(
                f"{path} is a symbolic link; volume {volume_id!r} is mounted only on a directory "
                "the CO made (a bind would land where the link points)",
                target_path=path,
            )
        if os.path.lexists(path) and not os.path.isdir(path):  # was INTERNAL: makedirs' EEXIST
            raise Conflict(
                f"{path} exists and is not a directory; volume {volume_id!r} is mounted on a directory",
                target_path=path,
            )
        state = str(self.state_dir)
        if path == state:  # the bind would cover published.json and every volume's mount point
            raise Conflict(
                f"{path} is this plugin's state dir; volume {volume_id!r} is not mounted there",
                target_path=path,
            )
        with self._mutex:  # checked and claimed at once
            for other in [state, *self._published, *self._claimed]:
                if other != path and (_inside(path, other) or _inside(other, path)):
                    raise Conflict(
                        f"{path} lies {'inside' if _inside(path, other) else 'above'} {other}, which this "
                        f"plugin uses for another volume or its state; volume {volume_id!r} is not mounted "
                        "there",
                        target_path=path,
                    )
            self._claimed.add(path)
        try:
            yield
        finally:
            with self._mutex:
                self._claimed.discard(path)

    def _within_ours(self, path: str) -> bool:
        """Whether the unrecorded ``path`` is the state dir or lies inside it or inside a recorded
        target or staging path: no stage or publish is ever made there (``_new_path``),
        so an unstage or unpublish of it has nothing to undo.

        Why it matters: such a call found "a mount of ours" at ``<state>/volumes/<key>/mnt``
        (a live volume's FUSE mount) and unmounted it: every pod's bind of that volume then
        showed a mount no longer under ``volumes/``, whose unpublish was refused as another
        driver's, until the supervisor killed the volume's process and remounted it. Inside a
        pod's workspace it removed the pod's empty directory of that name."""
        state = str(self.state_dir)
        if path == state or _inside(path, state):
            return True
        with self._mutex:
            return any(_inside(path, other) for other in [*self._published, *self._claimed])

    def _clear_leftover(self, path: str, *, volume_id: str) -> None:
        """Unmount what a call on the unrecorded ``path`` left there when a crash cut it short.

        A SIGKILL between a mount (or bind) and the state write that records it leaves a bind
        of one of our own FUSE mounts on the path and no record: the kubelet's retry must
        succeed, not find "a mount point this plugin did not make" for ever (csi14). Anything
        that is not a bind of ours (a tmpfs, a host path, another driver's volume) is left as
        it is and refused.
        """
        while is_mounted(path):
            self._refuse_foreign(path, volume_id)
            log.warning("%s holds a mount of ours with no record (a call cut short by a crash): unmounting it",
                        path)  # fmt: skip
            mounts.unmount(path, lazy=True)

    def _volume_dir(self, path: str) -> Path:
        """The private dir (mount point, config file, log) of the volume mounted for ``path``."""
        return self.state_dir / "volumes" / hashlib.sha256(path.encode()).hexdigest()[:16]

    def _stop_leftover_process(self, volume_dir: Path) -> None:
        """Stop a mount process no record owns on ``volume_dir`` (its path's record was lost to a
        crash before it was written): a new one is about to mount there, and the old one would
        otherwise run, unseen, for ever (a workspace's still flushes what it acknowledged)."""
        leftover = mounts.MountProcess(
            str(volume_dir / "datahub.toml"), str(volume_dir / "mnt"), str(volume_dir / "mount.log")
        )
        if not is_mounted(leftover.staging) or not os.path.exists(leftover.config_path):
            return
        log.warning("stopping the unrecorded mount process of %s (a call cut short by a crash)", volume_dir)

        def recover(record: MountRecord) -> str | None:  # its daemon did not finish: no spec, its record
            if record.kind != "workspace":
                return None
            finish_workspace(
                record.workspace, record.commit_to, leftover.config_path, record.author or self._author(None)
            )
            return f"workspace {record.workspace} flushed"

        leftover.stop(timeout=self.unmount_timeout, recover=recover)

    def _forget_leftover(self, path: str) -> None:
        """For an unrecorded ``path`` being unstaged or unpublished: stop a mount process a crash
        left for it (a workspace flushes what it acknowledged) and remove its config (secrets)."""
        volume_dir = self._volume_dir(path)
        self._stop_leftover_process(volume_dir)
        if not is_mounted(str(volume_dir / "mnt")):  # never delete through a mount
            shutil.rmtree(volume_dir, ignore_errors=True)

    # --- NodeStageVolume / NodeUnstageVolume ----------------------------------------------------
    def stage(self, req: StageRequest) -> None:
        """Mount the volume once for this node (idempotent); publishes bind it into pods."""
        check_volume_id(req.volume_id, "NodeStageVolume")
        if not req.staging_target_path or not os.path.isabs(req.staging_target_path):
            raise InvalidInput(
                f"NodeStageVolume {req.volume_id!r}: staging_target_path must be an absolute path"
            )
        spec = parse_context(req.context, req.volume_id)
        cap = check_capability(spec, req.capability, req.volume_id)
        overrides = parse_secrets(req.secrets)
        readonly = not spec.writable or cap.access_mode in READER_MODES
        path = self._in_kubelet_dir(
            "NodeStageVolume", req.volume_id, "staging_target_path", req.staging_target_path
        )
        fingerprint = _fingerprint(req.volume_id, req.context, cap, readonly, "", stage=True)
        with self._target(path):
            existing = self._get(path)
            if existing is not None:
                if existing.unpublishing:
                    raise Conflict(
                        f"volume {existing.volume_id!r} at {path} is being unstaged (its workspace flush "
                        "failed); NodeUnstageVolume must succeed first",
                        target_path=path,
                    )
                if existing.fingerprint != fingerprint:
                    raise AlreadyExists(
                        f"{path} already holds volume {existing.volume_id!r} staged with different parameters; "
                        "unstage it first",
                        target_path=path,
                    )
                if self._health(existing) != "ok":
                    self._recover(existing)
                return
            with self._new_path(path, req.volume_id):
                self._clear_leftover(path, volume_id=req.volume_id)
                extra = {"context": _attributes(req.context)}
                self._mount_new(
                    req.volume_id, path, spec, readonly, fingerprint, overrides, None, extra, staged=True
                )
        log.info("staged %s (%s) at %s", req.volume_id, self._get(path).resolved or _describe(spec), path)

    def unstage(self, volume_id: str, staging_target_path: str) -> None:
        """Stop the staged volume's mount process (a workspace flushes and commits), once nothing is
        published from it: a pod still reading it keeps it (FAILED_PRECONDITION)."""
        if not volume_id:
            raise InvalidInput("NodeUnstageVolume: volume_id is required")
        if not staging_target_path or not os.path.isabs(staging_target_path):
            raise InvalidInput(
                f"NodeUnstageVolume {volume_id!r}: staging_target_path must be an absolute path"
            )
        path = _canonical_arg("NodeUnstageVolume", volume_id, "staging_target_path", staging_target_path)
        with self._target(path):
            s = self._get(path)
            if s is None and not _inside(path, self.kubelet_dir):
                return  # never staged there (NodeStageVolume refuses it): nothing to undo, nothing to touch
            self._refuse_foreign(path, volume_id, s)
            if s is None:  # already unstaged (or never): make sure nothing of ours is left
                if self._within_ours(path):  # never staged there (refused): nothing of another to touch
                    return
                mounts.unmount(path, lazy=mounts.health(path) == "broken")
                self._forget_leftover(path)
                return
            if not s.staged:
                raise Conflict(
                    f"{path} is a target volume {s.volume_id!r} is published at, not a staging path; "
                    "NodeUnpublishVolume unmounts it",
                    target_path=path,
                )
            if s.volume_id != volume_id:
                raise NotFound(
                    f"staging path {path} holds volume {s.volume_id!r}, not {volume_id!r}", target_path=path
                )
            users = sorted(q.target_path for q in self.published() if q.staging_path == path)
            if users:
                raise Conflict(
                    f"volume {volume_id!r} staged at {path} is still published at {', '.join(users)}; "
                    "NodeUnpublishVolume every target first",
                    target_path=path,
                )
            if not s.unpublishing:
                s.unpublishing = True  # recorded first: the supervisor must not remount it meanwhile
                self._put(s, path)
            mounts.unmount(path, lazy=mounts.health(path) != "ok")
            outcome = self._stop_volume(s)
            log.info("unstaged %s from %s (%s)", volume_id, path, outcome)

    def _start(self, p: Published, *, first: bool) -> None:
        """Start the mount process and bind its view onto the target."""
        process = mounts.MountProcess(p.config_path, p.staging, p.log_path)
        try:
            proc = process.start(
                _mount_args(p, first=first, author=self._author(p)), timeout=self.mount_timeout
            )
        except Conflict as exc:
            if p.spec.kind != "workspace":
                raise
            raise self._held_elsewhere(p, exc) from None
        try:
            source = _view(p)
            try:
                missing = _dir_gone(source)
            except OSError as exc:  # not "no such directory": the kubelet must not hear NOT_FOUND
                raise ListingUnavailable(
                    f"volume {p.volume_id!r}: {p.subdir or '/'!r} of {p.resolved or _describe(p.spec)} "
                    f"cannot be read in its mount at {p.staging} ({exc.strerror or exc}): the mount "
                    f"could not load its listing (the catalog or the bucket did not answer; see "
                    f"{p.log_path}); nothing is mounted at {p.target_path}, and the CO's retry mounts it "
                    "again once the catalog answers",
                    volume_id=p.volume_id,
                    target_path=p.target_path,
                ) from exc
            if missing:
                raise NotFound(
                    f"volume {p.volume_id!r}: {p.subdir!r} is not a directory of {p.resolved or _describe(p.spec)}"
                    " (check the prefix attribute)",
                    volume_id=p.volume_id,
                )
            _place_view(source, p.target_path, readonly=p.readonly)
        except BaseException:
            with contextlib.suppress(DatahubError, OSError, subprocess.SubprocessError):
                process.stop(timeout=self.unmount_timeout)
            mounts.MountProcess.kill(proc)
            raise
        p.pid = proc.pid
        with self._mutex:
            self._children[p.target_path] = proc

    # --- NodeUnpublishVolume ----------------------------------------------------------------
    def unpublish(self, volume_id: str, target_path: str) -> None:
        if not volume_id:
            raise InvalidInput("NodeUnpublishVolume: volume_id is required")
        if not target_path or not os.path.isabs(target_path):
            raise InvalidInput(f"NodeUnpublishVolume {volume_id!r}: target_path must be an absolute path")
        target = _canonical_arg("NodeUnpublishVolume", volume_id, "target_path", target_path)
        with self._target(target):
            p = self._get(target)
            if p is None and not _inside(target, self.kubelet_dir):
                return  # never published there (NodePublishVolume refuses it): nothing to undo or touch
            self._refuse_foreign(target, volume_id, p)
            if p is None:  # already unpublished (or never): make sure nothing of ours is left
                if os.path.islink(target) or self._within_ours(target):  # never published there
                    return  # (publish refuses them): nothing to undo, and nothing of another to touch
                # the directory goes only with a leftover of ours (a crash cut a publish short):
                # any other is another pod's (an empty emptyDir, another driver's target not yet
                # mounted), and its removal detached it from that pod's containers (caller43)
                ours = is_mounted(target) or self._volume_dir(target).exists()
                mounts.unmount(target, lazy=mounts.health(target) == "broken")
                self._forget_leftover(target)
                if ours:
                    _remove_dir(target)
                return
            if p.volume_id != volume_id:
                raise NotFound(
                    f"target {target} holds volume {p.volume_id!r}, not {volume_id!r}", target_path=target
                )
            if p.staged:
                raise Conflict(
                    f"{target} is where volume {volume_id!r} is staged, not a published target; "
                    "NodeUnstageVolume unmounts it",
                    target_path=target,
                )
            if not p.owns_process:  # a bind of a staged volume: the others bound from it keep reading
                mounts.unmount(target, lazy=mounts.health(target) != "ok")
                _remove_dir(target)  # while recorded: a retry after a crash here still finds it ours
                self._put(None, target)
                log.info("unpublished %s from %s (staged at %s)", volume_id, target, p.staging_path)
                return
            if not p.unpublishing:
                p.unpublishing = True  # recorded first: the supervisor must not remount it meanwhile
                self._put(p, target)
            mounts.unmount(target, lazy=mounts.health(target) != "ok")
            _remove_dir(target)  # while recorded: a retry after a crash here still finds it ours
            outcome = self._stop_volume(p)
            log.info("unpublished %s from %s (%s)", volume_id, target, outcome)

    def _refuse_foreign(self, target: str, volume_id: str, p: Published | None = None) -> None:
        """Conflict if the top mount on ``target`` is not one of ours (a tmpfs, a host path, another
        driver's volume, also one stacked on our bind): the plugin never unmounts what it did not mount.

        Ours are the mounts under ``volumes/`` of the state dir (``_volume_dir``), not anything
        under the state dir: another plugin instance whose state dir lies inside this one's
        (a canary release at <state>/canary) has its FUSE mounts there too, and its pods' binds
        were taken for ours and unmounted (review14b). For the record ``p`` of ``target``, so is
        the dead view a repair of its process detached from ``volumes/`` and has not bound over
        yet: refused, an unpublish racing the repair of its stage answered FAILED_PRECONDITION
        (csi16), and for ever once a repair failed after the detach."""
        foreign = mounts.foreign_mount(target, str(self.state_dir / "volumes"))
        if foreign is not None and p is not None and self._shows_detached(target, p):
            foreign = None
        if foreign is not None:
            raise Conflict(
                f"target {target} holds a {foreign} mount this plugin did not make (volume {volume_id!r} "
                "is not what is mounted there); it was left mounted: unmount it yourself, then retry",
                target_path=target,
            )

    def _shows_detached(self, path: str, p: Published) -> bool:
        """Whether the top mount on ``path`` is a dead FUSE view that a repair of ``p``'s process
        detached (``_recover``): the device number is the dead mount's while any bind holds it,
        and the view does not answer (its daemon was killed). Why both: the record outlives the
        view, and the kernel gives its number to the next mount (after a reboot, or once its
        last bind is gone, before the supervisor's prune): a foreign mount with it answers, and
        passed for ours, the plugin unmounted it (review17d)."""
        owner = self._process_of(p)
        with self._mutex:
            detached = _detached_of(owner) if owner is not None else set()
        top = [(dev, fstype) for point, dev, fstype in mounts.mount_entries() if point == path]
        return bool(top) and top[-1] in detached and mounts.health(path) == "broken"

    def _stop_volume(self, p: Published) -> str:
        """Stop the mount process (the daemon flushes a workspace), make sure the workspace
        reached the object store, then forget the volume and its credentials."""
        stopped = mounts.MountProcess(p.config_path, p.staging, p.log_path).stop(timeout=self.unmount_timeout)
        with self._mutex:
            proc = self._children.pop(p.target_path, None)
        mounts.wait_exit(p.pid, proc, timeout=30)
        if p.spec.kind == "workspace" and not stopped.finished:
            # the daemon did not say its final flush and commit succeeded (its flush or commit
            # failed, it was killed, or this is a retry after its exit): reopen the workspace and do
            # them here; raises (the CO retries) if it cannot flush, PERMISSION_DENIED if the catalog
            # refuses the commit, with the files kept (csinode15)
            finish_workspace(p.spec.workspace, p.spec.commit_to, p.config_path, self._author(p))
        self._put(None, p.target_path)
        shutil.rmtree(p.volume_dir, ignore_errors=True)
        return stopped.outcome

    # --- NodeGetVolumeStats ---------------------------------------------------------------------
    def volume_stats(self, volume_id: str, volume_path: str) -> VolumeStats:
        """Usage and condition of a published target or a staging path.

        The kubelet's volume health monitor shows an abnormal condition as a pod event: with
        one mount process shared by every pod of a staged volume, a dead process is reported
        on each of their targets (until the supervisor has remounted it).
        """
        if not volume_id:
            raise InvalidInput("NodeGetVolumeStats: volume_id is required")
        if not volume_path or not os.path.isabs(volume_path):
            raise InvalidInput(f"NodeGetVolumeStats {volume_id!r}: volume_path must be an absolute path")
        path = _canonical_arg("NodeGetVolumeStats", volume_id, "volume_path", volume_path)
        p = self._get(path)
        if p is None or p.volume_id != volume_id:
            raise NotFound(f"volume {volume_id!r} is not staged or published at {path}", volume_id=volume_id)
        health = self._health(p)
        if health == "ok":
            try:
                st = os.statvfs(path)
            except OSError as exc:
                health = f"statfs failed: {exc.strerror}"
        if health != "ok":
            return VolumeStats(True, f"{health}; the plugin remounts it at its next health check")
        size = st.f_frsize
        served = p.resolved or _describe(p.spec)
        return VolumeStats(
            False,
            f"serving {served}" + (f" (staged at {p.staging_path})" if p.staging_path else ""),
            bytes=(st.f_blocks * size, st.f_bavail * size, (st.f_blocks - st.f_bfree) * size),
            inodes=(st.f_files, st.f_favail, st.f_files - st.f_ffree),
        )

    # --- health and recovery ----------------------------------------------------------------
    def _process_of(self, p: Published) -> Published | None:
        """The record whose mount process serves ``p``: itself, or the stage it is bound from."""
        if p.owns_process:
            return p
        stage = self._get(p.staging_path)
        return stage if stage is not None and stage.staged else None

    def _daemon_alive(self, p: Published) -> bool:
        owner = self._process_of(p)  # its pid may have been reused by another process since
        return owner is not None and is_mount_daemon(owner.pid, owner.staging)

    def _health(self, p: Published, points: set[str] | None = None) -> str:
        owner = self._process_of(p)
        target = mounts.health(p.target_path, points)
        staging = mounts.health(owner.staging, points) if owner is not None else "not staged"
        if target == "ok" and staging == "ok" and self._daemon_alive(p):
            return "ok"
        return f"target {target}, FUSE mount {staging}, daemon {'alive' if self._daemon_alive(p) else 'dead'}"

    def _rebind(self, p: Published) -> None:
        """Bind a target again from its stage, repairing the stage first if its daemon died."""
        log.warning("target %s of staged volume %s is broken (%s): binding it again", p.target_path,
                    p.volume_id, self._health(p))  # fmt: skip
        with self._target(p.staging_path, wait=STAGE_WAIT):
            stage = self._process_of(p)
            if stage is None or stage.unpublishing:
                raise Conflict(
                    f"target {p.target_path}: volume {p.volume_id!r} is no longer staged at {p.staging_path}",
                    target_path=p.target_path,
                )
            if self._health(stage) != "ok":
                self._recover(stage)
            self._bind_target(stage, p)  # beneath the dead bind: the target is never bare
        log.info("target %s bound again from %s", p.target_path, p.staging_path)

    def _recover(self, p: Published) -> None:
        """Detach what is left of a broken volume and mount it again, as recorded."""
        if not p.owns_process:
            self._rebind(p)
            return
        log.warning("volume %s at %s is broken (%s): remounting", p.volume_id, p.target_path, self._health(p))
        # the dead view stays on the target until the new one is mounted beneath it: unmounted
        # first, the target would be the node's plain directory for the seconds the new process
        # takes to start, and a propagating container's writes there would be lost (csi14)
        with self._mutex:
            proc = self._children.pop(p.target_path, None)
        if self._daemon_alive(p):  # alive but not serving: it cannot be trusted with the volume
            os.kill(p.pid, signal.SIGKILL)
        if proc is not None:
            mounts.MountProcess.kill(proc)
        mounts.wait_exit(p.pid, None, timeout=30)
        dead = {(dev, fstype) for point, dev, fstype in mounts.mount_entries() if point == p.staging}
        self._note_detached(p, lambda known: known | dead)  # the targets show it until bound again
        mounts.detach_stale(p.staging)
        _hold_repair(p.target_path)
        renew_platform_keys(self.config, Path(p.config_path), catalog_authorised=p.spec.catalog_authorised)
        self._start(p, first=False)
        self._put(p, p.target_path)
        log.info(
            "volume %s at %s remounted (%s)", p.volume_id, p.target_path, p.resolved or _describe(p.spec)
        )
        if not p.staged or self._rebind_targets(p):  # no path shows the dead view any more
            self._note_detached(p, lambda known: set())

    def _rebind_targets(self, stage: Published) -> bool:
        """Bind every target of a just remounted stage again at once: they all showed the dead mount.

        A target another operation holds is left to it (a publish repairs it, an unpublish
        removes it) or to the next supervisor pass. True if none was left.
        """
        every = True
        for q in self.published():
            if q.staging_path != stage.target_path:
                continue
            try:
                with self._target(q.target_path):
                    current = self._get(q.target_path)
                    if current is None or current.staging_path != stage.target_path or current.unpublishing:
                        continue
                    if mounts.health(current.target_path) != "ok":
                        self._bind_target(stage, current)
                        log.info("target %s bound again from %s", current.target_path, stage.target_path)
            except OperationPending:
                every = False
            except Exception:  # the others still get theirs; the supervisor retries this one
                every = False
                log.exception("could not bind %s again from %s", q.target_path, stage.target_path)
        return every

    def _looks_healthy(self, p: Published, points: set[str]) -> bool:
        with self._mutex:
            proc = self._children.get(p.target_path)
        try:
            parent_gone = _dir_gone(os.path.dirname(p.target_path))
        except OSError:  # EIO, a hung disk: looked at again, under the target's lock
            return False
        return (
            not p.unpublishing
            and (proc is None or proc.poll() is None)
            and not parent_gone
            and self._health(p, points) == "ok"
        )

    def _forget_orphan(self, p: Published) -> None:
        """Stop (and flush) a volume whose target's parent is gone instead of recreating the path."""
        if p.staged and any(q.staging_path == p.target_path for q in self.published()):
            log.warning("the parent of staging path %s is gone, yet targets are published from it: kept",
                        p.target_path)  # fmt: skip
            return
        log.warning("the parent of target %s is gone: stopping volume %s", p.target_path, p.volume_id)
        mounts.unmount(p.target_path, lazy=True)
        if not p.owns_process:
            self._put(None, p.target_path)
            return
        self._stop_volume(p)

    def _note_detached(
        self, p: Published, change: Callable[[set[tuple[str, str]]], set[tuple[str, str]]]
    ) -> None:
        """Set the dead views ``p``'s process served that a repair detached (``DETACHED``) to
        ``change(known)``, in the state file: its targets (and staging path) show them until
        bound again, theirs to unmount meanwhile (``_refuse_foreign``). Why the file: a plugin
        restarted after the detach, kept in memory only, took them for another driver's mounts
        and refused every unpublish while the repair kept failing (review17b)."""
        with self._mutex:  # read, change and write at once: the supervisor's prune and a repair
            known = _detached_of(p)
            wanted = change(known)
            if wanted == known:
                return
            extra = {k: v for k, v in p.extra.items() if k != DETACHED}
            p.extra = {**extra, DETACHED: sorted(wanted)} if wanted else extra  # never changed in place
        self._state.save(self.published)

    def _prune_detached(self) -> None:
        """Forget the dead views no mount shows any more: the kernel may give their device
        numbers to other mounts, which must not pass for ours."""
        noted = [p for p in self.published() if p.extra.get(DETACHED)]
        if not noted:
            return
        shown = {(dev, fstype) for _, dev, fstype in mounts.mount_entries()}
        for p in noted:
            self._note_detached(p, lambda known: known & shown)

    def check_all(self) -> None:
        """One supervisor pass: reap exited mount processes, repair every broken target.

        Healthy volumes are recognised against one read of the mount table; anything that
        looks wrong is checked again, fresh, under its target lock before it is touched.
        """
        points = mounts.mount_points()
        self._prune_detached()
        # processes first (stages, inline targets): a target bound from a stage is repaired after it
        targets_reached = False
        for p in sorted(self.published(), key=lambda p: not p.owns_process):
            if not p.owns_process and not targets_reached:
                targets_reached = True
                _test_hold(PASS_HOLD, "a supervisor pass, its stages looked at")
            if self._looks_healthy(p, points):
                continue
            stage = self._process_of(p)
            if not p.owns_process and stage is not None and not self._looks_healthy(stage, points):
                # Its stage died after this pass looked at it: repaired as the stage, under the
                # stage's lock alone (its targets are bound again with it). Through the target,
                # the repair held the target's lock for the seconds a remount takes, and an
                # unpublish of that target answered ABORTED all along (a loaded suite run).
                p = stage
            try:
                with self._target(p.target_path):
                    current = self._get(p.target_path)
                    if current is None or current.unpublishing:
                        continue
                    with self._mutex:
                        proc = self._children.get(current.target_path)
                    if proc is not None and proc.poll() is not None:
                        log.warning(
                            "mount process of %s exited with %s", current.target_path, proc.returncode
                        )
                    # an unreadable parent (OSError: EIO) is no gone one: logged below, the volume kept
                    if _dir_gone(os.path.dirname(current.target_path)):
                        self._forget_orphan(current)  # the CO removed the pod's dir while we were down
                    elif self._health(current) != "ok":
                        self._recover(current)
            except OperationPending:
                continue  # an RPC is working on it; look again next pass
            except Exception:  # keep supervising the others; the next pass retries
                log.exception("could not recover %s", p.target_path)
        log.debug("%s", CHECK_DONE)

    def supervise(self, interval: float, stop: threading.Event) -> None:
        """Check recorded targets now (restart recovery), then every ``interval`` seconds.

        A failing pass is logged and retried at the next one: the supervisor never dies.
        """
        first = True
        while first or not stop.wait(interval):
            first = False
            try:
                self.check_all()
            except Exception:
                log.exception("health check pass failed; retrying in %.0fs", interval)
            self.ready.set()


# --- helpers ---------------------------------------------------------------------------------------
# Published.extra of a record whose mount process died: [device, fstype] of the dead FUSE mounts
# a repair detached from its volume dir, which its targets show until they are bound again
DETACHED = "detached"


def _detached_of(p: Published) -> set[tuple[str, str]]:
    return {(dev, fstype) for dev, fstype in p.extra.get(DETACHED, ())}


def _hold_repair(path: str) -> None:
    """The tests' pause point in a repair (``REPAIR_HOLD``)."""
    _test_hold(REPAIR_HOLD, f"the repair of {path}")


def _test_hold(variable: str, what: str) -> None:
    """A tests' pause point: wait at the FIFO the environment ``variable`` names until the test
    closes its end.

    Opening a FIFO blocks until the other end opens it, so the test knows the plugin got here,
    and reading it until the test closes its end holds the plugin for what the test does meanwhile.
    No FIFO at that path (the test has not made it, or removed it), or no variable: no pause.
    """
    fifo = os.environ.get(variable)
    if fifo:
        with contextlib.suppress(FileNotFoundError), open(fifo, "rb") as fh:
            log.info("%s held at %s", what, fifo)
            fh.read()


def _fingerprint(
    volume_id: str,
    context: Mapping[str, str],
    cap: Capability,
    readonly: bool,
    staging: str,
    *,
    stage: bool = False,
) -> str:
    """What makes two publish (or stage) requests "the same" (secrets excluded: they may be rotated)."""
    doc = {
        "volume_id": volume_id,
        "context": dict(sorted(context.items())),
        "readonly": readonly,
        "access_mode": cap.access_mode,
        "mount_flags": list(cap.mount_flags),
    }
    if staging:  # absent for an unstaged target, so fingerprints recorded before staging existed still match
        doc["staging_target_path"] = staging
    if stage:
        doc["stage"] = True
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _canonical_arg(rpc: str, volume_id: str, name: str, path: str) -> str:
    """``canonical(path)`` of a request's path; InvalidInput for a NUL byte in it, which was
    INTERNAL (os.lstat's "embedded null byte") on every RPC that takes a path."""
    if "\0" in path:
        raise InvalidInput(f"{rpc} {volume_id!r}: {name} {path!r} holds a NUL byte", volume_id=volume_id)
    return canonical(path)


def _inside(path: str, other: str) -> bool:
    """Whether ``path`` lies strictly below the directory ``other`` (both canonical)."""
    return path.startswith(other.rstrip("/") + "/")


def _pod(context: Mapping[str, str]) -> str:
    """``<namespace>/<name>`` of the pod a publish is for, if the kubelet said (podInfoOnMount)."""
    namespace, name = (
        context.get(KUBERNETES_PREFIX + "pod.namespace"),
        context.get(KUBERNETES_PREFIX + "pod.name"),
    )
    return f"{namespace}/{name}" if namespace and name else ""


def _attributes(context: Mapping[str, str]) -> dict[str, str]:
    """The volume's own attributes: the context without the kubelet's pod info (absent at NodeStage)."""
    return {k: v for k, v in sorted(context.items()) if not k.startswith(KUBERNETES_PREFIX)}


def _same_settings(overrides: Mapping, config: Config) -> bool:
    """Whether ``config`` already holds every field the secrets ``overrides`` set (compared, never logged)."""
    data = config.model_dump()
    for key, value in overrides.items():
        if isinstance(value, Mapping):
            if any(str((data.get(key) or {}).get(k)) != str(v) for k, v in value.items()):
                return False
        elif str(data.get(key)) != str(value):
            return False
    return True


def _own_endpoint(overrides: Mapping, config: Config) -> bool:
    """Whether the secrets' ``overrides`` point S3 reads at another endpoint than the plugin's."""
    chosen = (overrides.get("s3") or {}).get("endpoint_url")
    return chosen is not None and chosen.rstrip("/") != (config.s3.endpoint_url or "").rstrip("/")


def _view(p: Published) -> str:
    """The part of a mount process's FUSE view that targets show (a version, or its prefix)."""
    return os.path.join(p.staging, p.subdir) if p.subdir else p.staging


def _describe(spec: VolumeSpec) -> str:
    if spec.kind == "bucket":
        return spec.bucket_url
    if spec.kind == "workspace":
        return f"workspace {spec.workspace}"
    return f"{spec.dataset}@{spec.version}"


def _require(catalog: Catalog, spec: VolumeSpec, principal: str | None) -> None:
    """AccessDenied unless the pod may use what ``spec`` names (csi/access.py); NOT_FOUND for a
    dataset volume whose dataset is gone or hidden from the pod (``access.readable``)."""
    if spec.kind == "workspace":
        if spec.commit_to:
            access.require(_commit_target(catalog, spec, principal), principal, "writer")
            access.require_plugin_writer(catalog, spec.commit_to, spec.workspace)
    elif spec.kind == "dataset":
        access.readable(catalog, spec.dataset, principal)  # missing or not the pod's: NOT_FOUND alike


def _commit_target(catalog: Catalog, spec: VolumeSpec, principal: str | None) -> Dataset:
    """The dataset a workspace volume commits into (``commitTo``), made now, owned by the
    publishing pod's service account, if it does not exist yet.

    Why at publish: the writer check could only run on a dataset that existed, and the
    workspace's commit at unstage took whatever dataset had that name by then. Another token
    could create it meanwhile (``POST /v1/datasets``), own it, grant ``*`` the writer role,
    and receive the pod's outputs (audit13). A remote catalog whose plugin token may not name
    another owner makes it the plugin's, with the pod's service account as its admin. One that
    exists but is hidden from the plugin's token (a server's catalog) is PERMISSION_DENIED
    naming that token's principal and the role it needs: before, the lookup after the refused
    create said NOT_FOUND "create it first" of a dataset that exists (platform14)."""
    from datahub.catalog import snapshot_name

    try:
        found = catalog.get_dataset(spec.commit_to)
    except DatasetNotFound:
        if snapshot_name(spec.commit_to):  # made by a pod, every mount of that bucket recorded nothing
            raise _snapshot_target(spec.commit_to) from None
    else:
        if snapshot_name(spec.commit_to) and not access.may(found, principal, "reader"):
            # the missing name's refusal: "needs the writer role on … (a snapshot of bucket …)"
            # told which bucket prefixes had been mounted, and their URLs (caller72)
            raise _snapshot_target(spec.commit_to)
        return found
    from datahub.workspaces import outputs_description

    description = outputs_description(spec.workspace)
    try:
        try:
            return catalog.create_dataset(spec.commit_to, description=description, owner=principal or "")
        except AccessDenied:
            if not principal:
                raise
            return catalog.create_dataset(spec.commit_to, description=description, acl={principal: "admin"})
    except AlreadyExists as taken:  # another publish made it meanwhile: its access list decides
        try:
            return catalog.get_dataset(spec.commit_to)
        except DatasetNotFound:  # it exists, hidden from the plugin's catalog token (a server's)
            raise AccessDenied(
                f"commitTo {spec.commit_to!r}: the node plugin's catalog token may not write it, and the "
                f"workspace's commit would use that token ({taken})",
                dataset=spec.commit_to,
            ) from None


def _snapshot_target(name: str) -> AccessDenied:
    """The refusal of a ``commitTo`` named as bucket mounts name their snapshots, whether such a
    dataset exists or not (for a pod that may not read it)."""
    return AccessDenied(
        f"commitTo {name!r} is the name bucket mounts record a snapshot under "
        f"({name.partition('.')[0]}.<bucket>.<prefix>); commit the workspace into "
        "a dataset whose name does not start with a storage scheme and a dot",
        dataset=name,
    )


def _check_access(spec: VolumeSpec, config: Config, principal: str | None) -> None:
    """The pod's access check for a volume staged earlier (each publish checks its own pod)."""
    if spec.kind == "bucket" or (spec.kind == "workspace" and not spec.commit_to):
        return  # no catalog access list (docs/csi.md "Who may publish what")
    from datahub.catalog import open_catalog

    catalog = open_catalog(config.resolved_catalog_url, retry=config.catalog)
    try:
        _require(catalog, spec, principal)
    finally:
        catalog.close()


def _plan(
    spec: VolumeSpec, config: Config, principal: str | None, *, check_access: bool = True
) -> tuple[list[str], str, str]:
    """(mount sources, subdir of the FUSE view for the target, resolved version) for a spec.

    Checks the pod's access to the datasets it names (csi/access.py) on the way, unless
    ``check_access`` is false (NodeStage: no pod yet; every publish of the stage checks). A
    workspace's ``commitTo`` is checked for the plugin's own token either way: it commits.
    """
    if spec.kind == "bucket":
        return [spec.bucket_url], "", ""
    if spec.kind == "workspace" and not spec.commit_to:
        return [], "", ""
    from datahub.catalog import open_catalog

    catalog = open_catalog(config.resolved_catalog_url, retry=config.catalog)
    try:
        if check_access:
            _require(catalog, spec, principal)
        if spec.kind == "workspace":
            if not check_access:
                _stage_commit_check(catalog, spec)
            return [], "", ""
        if not check_access:
            catalog.get_dataset(spec.dataset)  # DatasetNotFound
        version = catalog.resolve(spec.dataset, spec.version)  # VersionNotFound
    finally:
        catalog.close()
    subdir = f"{spec.dataset}/v{version.seq}" + (f"/{spec.prefix}" if spec.prefix else "")
    return [f"{spec.dataset}@{version.seq}"], subdir, f"{spec.dataset}@v{version.seq}"


def _stage_commit_check(catalog: Catalog, spec: VolumeSpec) -> None:
    """At NodeStage (no pod yet): AccessDenied if the plugin's token could not commit the
    workspace into an existing ``commitTo`` at unstage. One that does not exist, or is hidden
    from the token, is the first publish's to make or refuse (``_commit_target``)."""
    try:
        catalog.get_dataset(spec.commit_to)
    except DatasetNotFound:
        return
    access.require_plugin_writer(catalog, spec.commit_to, spec.workspace)


def _mount_args(p: Published, *, first: bool, author: str = "") -> list[str]:
    """The mount process's arguments; ``author``: of what a workspace's ``--commit-to`` commits."""
    spec = p.spec
    args = ["--allow-other"]  # pods run as other users than the plugin
    if spec.uid is not None:
        args += ["--uid", str(spec.uid)]
    if spec.gid is not None:
        args += ["--gid", str(spec.gid)]
    if spec.kind == "workspace":
        args += ["--workspace", spec.workspace]
        if spec.quota_bytes:
            args += ["--quota", str(spec.quota_bytes)]
        if spec.commit_to:
            args += ["--commit-to", spec.commit_to, *(["--author", author] if author else [])]
        return args
    if spec.cache == "none":
        args.append("--no-cache")
    elif spec.prefetch is not None:  # else the mount's default (versions: on; buckets: the policy)
        args.append("--prefetch" if spec.prefetch else "--no-prefetch")
    if spec.kind == "bucket" and p.extra.get("own_endpoint"):
        # a snapshot's URLs name the bucket, not the endpoint: a listing of the endpoint a pod's
        # Secret names is never recorded as the platform bucket's snapshot (caller71)
        args.append("--no-snapshot")
    if spec.kind == "bucket" and first:
        # every publication lists the bucket itself, with its own credentials: the newest version of
        # s3.<bucket>.<prefix> may be one any API token committed (records naming other objects),
        # or one another pod's credentials listed. A remount after a crash lists it again too
        # (docs/csi.md); --refresh is accepted and changes nothing: every bucket mount lists.
        args.append("--refresh")
    return [*p.sources, *args]


def _dir_gone(path: str) -> bool:
    """Whether ``path`` is surely no directory: missing, or something else. Why not
    ``os.path.isdir``: it says False for every error, and an EIO or ENOTCONN (a mount that
    could not load its listing, a broken one on the way) says nothing of whether the
    directory is there. Those raise (OSError): a publish answered NOT_FOUND for them, and a
    supervisor pass stopped a pod's volume as if the CO had removed its directory."""
    try:
        return not stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return True


def _place_view(source: str, target: str, *, readonly: bool) -> None:
    """Bind ``source`` onto ``target``: in place of what is mounted there (a dead view being
    repaired, replaced without a gap), else on the directory, created if missing (and removed
    again if the bind fails)."""
    if is_mounted(target):
        mounts.replace(source, target, readonly=readonly)
        return
    created = not os.path.isdir(target)
    os.makedirs(target, exist_ok=True)
    try:
        mounts.bind(source, target, readonly=readonly)
    except BaseException:
        if created:
            _remove_dir(target)
        raise


def _remove_dir(path: str) -> None:
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise Conflict(f"could not remove target {path}: {exc}", target_path=path) from exc
