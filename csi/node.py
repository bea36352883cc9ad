"""The Node service's behaviour, in plain Python: publish, unpublish, and healing broken mounts.

* NodePublishVolume validates the request, resolves what to show (a dataset ref becomes a
  version number, recorded), starts the volume's mount process on a private staging dir,
  bind-mounts the part the pod should see onto the target (read-only unless it is a
  writable workspace published read-write), and records the target in the state file.
  Publishing the same request again is a no-op (after repairing the mount if it broke);
  a different request for a published target is AlreadyExists.
* NodeUnpublishVolume unmounts the target, stops the mount process through
  ``fuse_adapter umount`` (a workspace flushes, and commits if asked), forgets the target
  and removes it. A target that is already gone is success.
* The supervisor (and the first pass at start) checks every recorded target: a mount whose
  daemon died answers ENOTCONN; it is detached (lazily) and mounted again with the
  *recorded* version, so a restart never switches a pod to another version.

One operation at a time per target: a per-target lock is held across the mount work (that
is its purpose) and a second caller gets OperationPending (ABORTED) instead of waiting; the
shared mutex guards only in-memory maps and is never held during I/O.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from csi import access, mounts
from csi.finish import finish_workspace
from csi.state import Published, StateFile
from csi.volume_config import write_volume_config
from csi.volumes import READER_MODES, Capability, VolumeSpec, check_capability, parse_context, parse_secrets
from datahub.config import Config
from datahub.errors import AlreadyExists, Conflict, DatahubError, DatasetNotFound, InvalidInput, NotFound
from fuse_adapter.daemon import canonical, is_mounted, pid_alive

log = logging.getLogger(__name__)

CHECK_DONE = "health check of published targets done"  # logged (debug) after every pass


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


class NodeService:
    def __init__(
        self,
        config: Config,
        state_dir: Path,
        node_id: str,
        *,
        mount_timeout: float = 120.0,
        unmount_timeout: float = 600.0,
    ) -> None:
        self.config = config
        self.node_id = node_id
        self.state_dir = Path(state_dir).resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        self.mount_timeout = mount_timeout
        self.unmount_timeout = unmount_timeout
        self._state = StateFile(self.state_dir / "published.json")
        self._published: dict[str, Published] = self._state.load()
        self._children: dict[str, subprocess.Popen] = {}
        self._target_locks: dict[str, threading.Lock] = {}
        self._mutex = threading.Lock()  # in-memory maps only; never held during I/O
        self.ready = threading.Event()  # set after the first check of recorded targets

    # --- bookkeeping ----------------------------------------------------------------------
    @contextlib.contextmanager
    def _target(self, target: str) -> Iterator[None]:
        """Exclusive use of ``target`` for one operation; OperationPending if another has it.

        The spec's answer to a second call while one is in flight is ABORTED (the CO backs
        off and retries); waiting instead would pile up RPC threads behind a slow mount.
        """
        with self._mutex:
            lock = self._target_locks.setdefault(target, threading.Lock())
        if not lock.acquire(blocking=False):
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
        if not req.volume_id:
            raise InvalidInput("NodePublishVolume: volume_id is required")
        if not req.target_path or not os.path.isabs(req.target_path):
            raise InvalidInput(f"NodePublishVolume {req.volume_id!r}: target_path must be an absolute path")
        spec = parse_context(req.context, req.volume_id)
        cap = check_capability(spec, req.capability, req.volume_id)
        overrides = parse_secrets(req.secrets)
        readonly = req.readonly or not spec.writable or cap.access_mode in READER_MODES
        target = canonical(req.target_path)
        fingerprint = _fingerprint(req, cap, readonly)
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
            if is_mounted(target):
                raise Conflict(
                    f"target {target} is already a mount point this plugin did not make; unmount it first",
                    target_path=target,
                )
            self._publish_new(req, target, spec, readonly, fingerprint, overrides)

    def _publish_new(
        self,
        req: PublishRequest,
        target: str,
        spec: VolumeSpec,
        readonly: bool,
        fingerprint: str,
        overrides: dict,
    ) -> None:
        volume_id, context = req.volume_id, req.context
        key = hashlib.sha256(target.encode()).hexdigest()[:16]
        volume_dir = self.state_dir / "volumes" / key
        if spec.kind == "workspace":
            overrides = {**overrides, "cache": {"profile": "write-back"}}
        try:
            config = write_volume_config(self.config, overrides, volume_dir / "datahub.toml")
            sources, subdir, resolved = _plan(spec, config, access.pod_principal(context))
            p = Published(
                target_path=target,
                volume_id=volume_id,
                spec=spec,
                readonly=readonly,
                fingerprint=fingerprint,
                sources=sources,
                subdir=subdir,
                volume_dir=str(volume_dir),
                resolved=resolved,
                published_at=time.time(),
                # the flag as asked: a read-only volume is mounted read-only either way, yet
                # readonly=false later is a different request (ALREADY_EXISTS), as the spec says
                extra={"requested_readonly": req.readonly},
            )
            self._start(p, first=True)
        except BaseException:
            shutil.rmtree(volume_dir, ignore_errors=True)  # nothing half-made stays (not the secrets)
            raise
        self._put(p, target)
        log.info("published %s (%s) at %s", volume_id, resolved or _describe(spec), target)

    def _start(self, p: Published, *, first: bool) -> None:
        """Start the mount process and bind its view onto the target."""
        process = mounts.MountProcess(p.config_path, p.staging, p.log_path)
        proc = process.start(_mount_args(p, first=first), timeout=self.mount_timeout)
        try:
            source = os.path.join(p.staging, p.subdir) if p.subdir else p.staging
            if not os.path.isdir(source):
                raise NotFound(
                    f"volume {p.volume_id!r}: {p.subdir!r} is not a directory of {p.resolved or _describe(p.spec)}"
                    " (check the prefix attribute)",
                    volume_id=p.volume_id,
                )
            created = not os.path.isdir(p.target_path)
            os.makedirs(p.target_path, exist_ok=True)
            try:
                mounts.bind(source, p.target_path, readonly=p.readonly)
            except BaseException:
                if created:
                    _remove_dir(p.target_path)
                raise
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
        target = canonical(target_path)
        with self._target(target):
            p = self._get(target)
            self._refuse_foreign(target, volume_id)
            if p is None:  # already unpublished (or never): make sure nothing of ours is left
                mounts.unmount(target, lazy=mounts.health(target) == "broken")
                _remove_dir(target)
                return
            if p.volume_id != volume_id:
                raise NotFound(
                    f"target {target} holds volume {p.volume_id!r}, not {volume_id!r}", target_path=target
                )
            if not p.unpublishing:
                p.unpublishing = True  # recorded first: the supervisor must not remount it meanwhile
                self._put(p, target)
            mounts.unmount(target, lazy=mounts.health(target) != "ok")
            outcome = self._stop_volume(p)
            _remove_dir(target)
            log.info("unpublished %s from %s (%s)", volume_id, target, outcome)

    def _refuse_foreign(self, target: str, volume_id: str) -> None:
        """Conflict if the top mount on ``target`` is not one of ours (a tmpfs, a host path, another
        driver's volume, also one stacked on our bind): the plugin never unmounts what it did not mount."""
        foreign = mounts.foreign_mount(target, str(self.state_dir))
        if foreign is not None:
            raise Conflict(
                f"target {target} holds a {foreign} mount this plugin did not make (volume {volume_id!r} "
                "is not what is mounted there); it was left mounted: unmount it yourself, then retry",
                target_path=target,
            )

    def _stop_volume(self, p: Published) -> str:
        """Stop the mount process (the daemon flushes a workspace), make sure the workspace
        reached the object store, then forget the volume and its credentials."""
        outcome = mounts.MountProcess(p.config_path, p.staging, p.log_path).stop(timeout=self.unmount_timeout)
        with self._mutex:
            proc = self._children.pop(p.target_path, None)
        mounts.wait_exit(p.pid, proc, timeout=30)
        if p.spec.kind == "workspace":
            finish_workspace(p.spec, p.config_path)  # raises (the CO retries) if it cannot flush
        self._put(None, p.target_path)
        shutil.rmtree(p.volume_dir, ignore_errors=True)
        return outcome

    # --- health and recovery ----------------------------------------------------------------
    def _daemon_alive(self, p: Published) -> bool:
        if not p.pid or not pid_alive(p.pid):
            return False
        try:  # the pid may have been reused by another process since we recorded it
            with open(f"/proc/{p.pid}/cmdline", "rb") as fh:
                return p.staging.encode() in fh.read().split(b"\0")
        except OSError:
            return False

    def _health(self, p: Published, points: set[str] | None = None) -> str:
        target, staging = mounts.health(p.target_path, points), mounts.health(p.staging, points)
        if target == "ok" and staging == "ok" and self._daemon_alive(p):
            return "ok"
        return f"target {target}, FUSE mount {staging}, daemon {'alive' if self._daemon_alive(p) else 'dead'}"

    def _recover(self, p: Published) -> None:
        """Detach what is left of a broken volume and mount it again, as recorded."""
        log.warning("volume %s at %s is broken (%s): remounting", p.volume_id, p.target_path, self._health(p))
        mounts.unmount(p.target_path, lazy=True)
        with self._mutex:
            proc = self._children.pop(p.target_path, None)
        if self._daemon_alive(p):  # alive but not serving: it cannot be trusted with the volume
            os.kill(p.pid, signal.SIGKILL)
        if proc is not None:
            mounts.MountProcess.kill(proc)
        mounts.wait_exit(p.pid, None, timeout=30)
        mounts.detach_stale(p.staging)
        self._start(p, first=False)
        self._put(p, p.target_path)
        log.info(
            "volume %s at %s remounted (%s)", p.volume_id, p.target_path, p.resolved or _describe(p.spec)
        )

    def _looks_healthy(self, p: Published, points: set[str]) -> bool:
        with self._mutex:
            proc = self._children.get(p.target_path)
        return (
            not p.unpublishing
            and (proc is None or proc.poll() is None)
            and os.path.isdir(os.path.dirname(p.target_path))
            and self._health(p, points) == "ok"
        )

    def _forget_orphan(self, p: Published) -> None:
        """Stop (and flush) a volume whose target's parent is gone instead of recreating the path."""
        log.warning("the parent of target %s is gone: stopping volume %s", p.target_path, p.volume_id)
        mounts.unmount(p.target_path, lazy=True)
        self._stop_volume(p)

    def check_all(self) -> None:
        """One supervisor pass: reap exited mount processes, repair every broken target.

        Healthy volumes are recognised against one read of the mount table; anything that
        looks wrong is checked again, fresh, under its target lock before it is touched.
        """
        points = mounts.mount_points()
        for p in self.published():
            if self._looks_healthy(p, points):
                continue
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
                    if not os.path.isdir(os.path.dirname(current.target_path)):
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
def _fingerprint(req: PublishRequest, cap: Capability, readonly: bool) -> str:
    """What makes two publish requests "the same" (secrets excluded: they may be rotated)."""
    doc = {
        "volume_id": req.volume_id,
        "context": dict(sorted(req.context.items())),
        "readonly": readonly,
        "access_mode": cap.access_mode,
        "mount_flags": list(cap.mount_flags),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _describe(spec: VolumeSpec) -> str:
    if spec.kind == "bucket":
        return spec.bucket_url
    if spec.kind == "workspace":
        return f"workspace {spec.workspace}"
    return f"{spec.dataset}@{spec.version}"


def _plan(spec: VolumeSpec, config: Config, principal: str | None) -> tuple[list[str], str, str]:
    """(mount sources, subdir of the FUSE view for the target, resolved version) for a spec.

    Checks the pod's access to the datasets it names (csi/access.py) on the way.
    """
    if spec.kind == "bucket":
        return [spec.bucket_url], "", ""
    if spec.kind == "workspace" and not spec.commit_to:
        return [], "", ""
    from datahub.catalog import open_catalog

    catalog = open_catalog(config.resolved_catalog_url)
    try:
        if spec.kind == "workspace":
            with contextlib.suppress(DatasetNotFound):  # created by the first commit
                access.require(catalog.get_dataset(spec.commit_to), principal, "writer")
            return [], "", ""
        access.require(catalog.get_dataset(spec.dataset), principal, "reader")  # DatasetNotFound
        version = catalog.resolve(spec.dataset, spec.version)  # VersionNotFound
    finally:
        catalog.close()
    subdir = f"{spec.dataset}/v{version.seq}" + (f"/{spec.prefix}" if spec.prefix else "")
    return [f"{spec.dataset}@{version.seq}"], subdir, f"{spec.dataset}@v{version.seq}"


def _mount_args(p: Published, *, first: bool) -> list[str]:
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
        return args + (["--commit-to", spec.commit_to] if spec.commit_to else [])
    if spec.cache == "none":
        args.append("--no-cache")
    elif spec.prefetch is not None:  # else the mount's default (versions: on; buckets: the policy)
        args.append("--prefetch" if spec.prefetch else "--no-prefetch")
    if spec.kind == "bucket" and spec.refresh and first:
        args.append("--refresh")  # a remount shows the snapshot taken at publish, not a new one
    return [*p.sources, *args]


def _remove_dir(path: str) -> None:
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise Conflict(f"could not remove target {path}: {exc}", target_path=path) from exc
