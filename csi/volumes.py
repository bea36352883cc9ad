"""What a CSI volume is: parsed from the CO's volume context, checked before anything is mounted.

Three kinds (docs/csi.md), chosen by which attribute is present:

* ``dataset`` (+ ``version``: a number, ``v3``, a tag or ``latest``; optional ``prefix``;
  optional ``cache``, ``prefetch``): read-only, the version is resolved at publish time and
  recorded; its cache is warmed in the background unless ``prefetch`` is ``false``;
* ``bucket`` (+ optional ``prefix``, ``refresh``, ``prefetch``): a read-only snapshot, like
  ``datahub mount --refresh MNT s3://bucket/prefix`` (every publication lists the bucket:
  ``refresh`` is accepted and changes nothing); warmed by the mount's automatic policy (what
  fits, or a directory readers go through), always with ``prefetch: "true"``, never with
  ``"false"``;
* ``workspace`` (+ optional ``commitTo``): writable, write-back.

Everything here is plain Python with no gRPC: the server turns requests into these types
and :class:`~datahub.errors.InvalidInput` into INVALID_ARGUMENT.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from datahub.errors import InvalidInput
from datahub.validation import ID_MAX as _ID_MAX
from datahub.validation import check_key, check_name

KUBERNETES_PREFIX = "csi.storage.k8s.io/"  # pod info and the ephemeral flag the kubelet adds
CACHE_PROFILES = ("read-only", "none")  # "none": nothing on disk, a small RAM cache (--no-cache)

_KNOWN = {
    "dataset": {"dataset", "version", "prefix", "cache", "prefetch", "uid", "gid"},
    "bucket": {"bucket", "prefix", "refresh", "cache", "prefetch", "uid", "gid"},
    "workspace": {"workspace", "commitTo", "quotaBytes", "uid", "gid"},
}
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")

# access modes by their CSI names; a workspace has one owner process on one node
READER_MODES = {"SINGLE_NODE_READER_ONLY", "MULTI_NODE_READER_ONLY"}
SINGLE_NODE_MODES = {
    "SINGLE_NODE_WRITER",
    "SINGLE_NODE_READER_ONLY",
    "SINGLE_NODE_SINGLE_WRITER",
    "SINGLE_NODE_MULTI_WRITER",
}


@dataclass(frozen=True)
class Capability:
    """A VolumeCapability without protobuf: ``access_type`` is "mount" or "block"."""

    access_type: str
    access_mode: str
    mount_flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class VolumeSpec:
    kind: str  # "dataset" | "bucket" | "workspace"
    dataset: str = ""
    version: str = "latest"  # as written in the volume attributes
    bucket: str = ""
    prefix: str = ""
    refresh: bool = False
    workspace: str = ""
    commit_to: str = ""
    cache: str = "read-only"
    uid: int | None = None
    gid: int | None = None
    quota_bytes: int = 0  # workspace: the most bytes its files may hold (0: no quota)
    prefetch: bool | None = None  # background warm-up; None: the mount's default (on for datasets)

    @property
    def writable(self) -> bool:
        return self.kind == "workspace"

    @property
    def catalog_authorised(self) -> bool:
        """Whether the catalog's access check decides this volume's publish (a dataset or a
        workspace), so its mount may reach the platform's objects bucket with the plugin's
        keys. A bucket volume names its bucket itself: only its own secrets serve it."""
        return self.kind != "bucket"

    @property
    def bucket_url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> VolumeSpec:
        return cls(**data)


_CONTROL = re.compile("[\u0000-\u001f\u007f-\u009f]")  # C0 (newline and tab too), DEL, C1


def check_volume_id(volume_id: str, call: str) -> str:
    """``volume_id`` of a NodeStageVolume or NodePublishVolume (``call``), which a record will
    keep: required, and without control characters.

    Why: the plugin's log names volumes as given (``published %s ...``), and an id holding a
    newline wrote a line of its own making into it, as attribute names did before review17b.
    Ids the kubelet makes (``csi-<sha256>``) and the controller's (workspace names) have none.
    Unstage, unpublish and stats only look an id up among the records, so they take any."""
    if not volume_id:
        raise InvalidInput(f"{call}: volume_id is required")
    if _CONTROL.search(volume_id):
        raise InvalidInput(
            f"{call}: volume_id {volume_id!r} contains a control character; give the PV's "
            "volumeHandle without one",
            volume_id=volume_id,
        )
    return volume_id


def parse_context(context: Mapping[str, str], volume_id: str) -> VolumeSpec:
    """The volume a CO's ``volume_context`` describes; InvalidInput names the attribute to fix."""
    attrs = {k: v for k, v in context.items() if not k.startswith(KUBERNETES_PREFIX)}
    kinds = [k for k in ("dataset", "bucket", "workspace") if attrs.get(k)]
    # attribute names quoted (repr): a pod's spec writes them, and a newline in one forged a
    # line of the plugin's log, where the refusal is written (review17b)
    if len(kinds) != 1:
        raise InvalidInput(
            f"volume {volume_id!r}: its attributes must name exactly one of dataset, bucket or workspace "
            f"(got {', '.join(map(repr, sorted(attrs))) or 'none'})",
            volume_id=volume_id,
        )
    kind = kinds[0]
    unknown = sorted(set(attrs) - _KNOWN[kind])
    if unknown:
        raise InvalidInput(
            f"volume {volume_id!r}: unknown {kind} volume attribute(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(sorted(_KNOWN[kind]))}",
            volume_id=volume_id,
        )
    owner = {"uid": _int_attr(attrs, "uid", volume_id), "gid": _int_attr(attrs, "gid", volume_id)}
    if kind == "workspace":
        commit_to = attrs.get("commitTo", "")
        return VolumeSpec(
            "workspace",
            workspace=_workspace(attrs["workspace"], context, volume_id),
            commit_to=check_name(commit_to, "commitTo dataset") if commit_to else "",
            quota_bytes=_int_attr(attrs, "quotaBytes", volume_id) or 0,
            **owner,
        )
    prefix = _prefix(attrs.get("prefix", ""), volume_id)
    owner["prefetch"] = _bool_attr(attrs, "prefetch", volume_id)
    cache = attrs.get("cache", "read-only") or "read-only"
    if cache not in CACHE_PROFILES:
        raise InvalidInput(
            f"volume {volume_id!r}: cache profile {cache!r} is not one of {', '.join(CACHE_PROFILES)}",
            volume_id=volume_id,
        )
    if kind == "dataset":
        version = (attrs.get("version") or "latest").strip()
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,63}", version):
            raise InvalidInput(
                f"volume {volume_id!r}: version {version!r} is not a number, a tag or 'latest'",
                volume_id=volume_id,
            )
        dataset = check_name(attrs["dataset"])
        return VolumeSpec("dataset", dataset=dataset, version=version, prefix=prefix, cache=cache, **owner)
    bucket = attrs["bucket"]
    if not _BUCKET.fullmatch(bucket):
        raise InvalidInput(
            f"volume {volume_id!r}: invalid bucket name {bucket!r} (give the bucket name, not a URL)",
            volume_id=volume_id,
        )
    refresh = _bool_attr(attrs, "refresh", volume_id) or False
    return VolumeSpec("bucket", bucket=bucket, prefix=prefix, refresh=refresh, cache=cache, **owner)


_POD_FIELDS = ("pod.name", "pod.namespace", "pod.uid")  # after csi.storage.k8s.io/
EPHEMERAL = KUBERNETES_PREFIX + "ephemeral"  # "true" on a CSI ephemeral inline volume
INLINE_ID_PREFIX = "csi-"  # the kubelet's handle of an inline volume: csi-<sha256 of pod uid and name>
# what the kubelet adds with podInfoOnMount, which an inline volume's publish cannot do without
_INLINE_NEEDS = (
    EPHEMERAL,
    *(KUBERNETES_PREFIX + f for f in ("pod.name", "pod.namespace", "serviceAccount.name")),
)


def check_inline_pod_info(volume_id: str, context: Mapping[str, str]) -> None:
    """INVALID_ARGUMENT for an inline volume published without the kubelet's pod info.

    An unstaged publish whose id is the kubelet's inline handle (``csi-…``), or that says it
    is ephemeral, is a pod's inline volume. With ``podInfoOnMount`` off the kubelet sends
    neither the ephemeral flag nor who the pod is, and such a volume was published anyway:
    its workspace unscoped by namespace (a pod of another namespace naming the same one opened
    its files), and its datasets checked for a pod nobody named, as if it were authorized. Only
    the operator can fix it, so the message says how."""
    inline = volume_id.startswith(INLINE_ID_PREFIX) or context.get(EPHEMERAL) == "true"
    if not inline:
        return
    missing = [key for key in _INLINE_NEEDS if not context.get(key)]
    if context.get(EPHEMERAL) != "true" and EPHEMERAL not in missing:
        missing.insert(0, f'{EPHEMERAL}: "true"')
    if missing:
        raise InvalidInput(
            f"volume {volume_id!r} is a pod's inline (ephemeral) volume, but the kubelet sent no "
            f"{', '.join(missing)} with it, so the plugin cannot tell which pod it "
            "serves: set podInfoOnMount: true on the CSIDriver (csi/deploy/csidriver.yaml), then "
            "recreate the pod",
            volume_id=volume_id,
        )


def _workspace(value: str, context: Mapping[str, str], volume_id: str) -> str:
    """The workspace a volume names; an inline volume's is ``<pod namespace>.<name>``.

    Anyone who may create a pod writes its inline volumes, and a workspace's files outlive
    its pod (the node's journal, ``<objects_url>/workspaces/<name>/``): unscoped, a pod of
    another namespace naming the same workspace (on purpose, or through the same template:
    pod names are unique only within a namespace) opened those files. A namespace is a DNS
    label (no dot), so ``<namespace>.`` never begins another namespace's names, nor a
    provisioned volume's (``pvc-<uid>``)."""
    name = _expand(value, context, volume_id)
    if context.get(EPHEMERAL) == "true":
        namespace = context.get(KUBERNETES_PREFIX + "pod.namespace")
        if not namespace:
            raise InvalidInput(
                f"inline workspace volume {volume_id!r} needs pod info to be its namespace's "
                "(podInfoOnMount: true on the CSIDriver)",
                volume_id=volume_id,
            )
        name = f"{namespace}.{name}"
    try:
        return check_name(name, "workspace")
    except InvalidInput as exc:
        inline = (
            " (an inline volume's workspace is <pod namespace>.<name>)"
            if context.get(EPHEMERAL) == "true"
            else ""
        )
        raise InvalidInput(f"volume {volume_id!r}: {exc}{inline}", volume_id=volume_id) from None


def _expand(value: str, context: Mapping[str, str], volume_id: str) -> str:
    """``${pod.name}``, ``${pod.namespace}``, ``${pod.uid}`` from the kubelet's pod info.

    An inline workspace volume is written once in a pod template; the placeholders give
    every pod its own workspace (one workspace has one writer).
    """

    def field(m: re.Match) -> str:
        key = m[1]
        if key not in _POD_FIELDS:
            raise InvalidInput(
                f"volume {volume_id!r}: unknown placeholder ${{{key}}}; use ${{pod.name}}, ${{pod.namespace}} "
                "or ${pod.uid}",
                volume_id=volume_id,
            )
        found = context.get(KUBERNETES_PREFIX + key)
        if not found:
            raise InvalidInput(
                f"volume {volume_id!r}: ${{{key}}} needs pod info (podInfoOnMount: true on the CSIDriver)",
                volume_id=volume_id,
            )
        return found

    return re.sub(r"\$\{([^}]*)\}", field, value)


def _int_attr(attrs: Mapping[str, str], name: str, volume_id: str) -> int | None:
    """A non-negative decimal (ASCII digits); ``uid``/``gid`` also fit a uid_t.

    Why the bounds here: ``str.isdigit`` takes ``'²'`` (int() then failed: INTERNAL and a
    traceback) and a uid past uid_t was published, then every stat in the pod failed (EIO:
    the mount cannot show that owner)."""
    value = attrs.get(name, "")
    if value == "":
        return None
    if not (value.isascii() and value.isdigit()):
        raise InvalidInput(
            f"volume {volume_id!r}: {name} must be a number, not {value!r}", volume_id=volume_id
        )
    number = int(value)
    if name in ("uid", "gid") and number > _ID_MAX:
        raise InvalidInput(
            f"volume {volume_id!r}: {name} {number} is not a Linux {name} (0 to {_ID_MAX}): give the "
            f"pod's {'runAsUser' if name == 'uid' else 'fsGroup'}",
            volume_id=volume_id,
        )
    return number


def _bool_attr(attrs: Mapping[str, str], name: str, volume_id: str) -> bool | None:
    """``"true"``/``"false"`` (any case, blank: not given -> None)."""
    value = attrs.get(name, "").strip().lower()
    if value == "":
        return None
    if value not in ("true", "false"):
        raise InvalidInput(
            f"volume {volume_id!r}: {name} must be true or false, not {attrs[name]!r}", volume_id=volume_id
        )
    return value == "true"


def _prefix(prefix: str, volume_id: str) -> str:
    prefix = prefix.strip("/")
    if prefix:
        try:
            check_key(prefix)
        except InvalidInput as exc:
            raise InvalidInput(f"volume {volume_id!r}: invalid prefix: {exc}", volume_id=volume_id) from exc
    return prefix


def check_capability(spec: VolumeSpec | None, cap: Capability | None, volume_id: str) -> Capability:
    """The capability, if this plugin can serve it for ``spec`` (None: any volume kind)."""
    if cap is None:
        raise InvalidInput(f"volume {volume_id!r}: volume_capability is required", volume_id=volume_id)
    if cap.access_type != "mount":
        raise InvalidInput(
            f"volume {volume_id!r}: only filesystem (mount) volumes are supported, not {cap.access_type}",
            volume_id=volume_id,
        )
    if cap.access_mode in ("", "UNKNOWN"):
        raise InvalidInput(f"volume {volume_id!r}: access_mode is required", volume_id=volume_id)
    if spec is not None and spec.writable and cap.access_mode not in SINGLE_NODE_MODES:
        raise InvalidInput(
            f"workspace volume {volume_id!r} supports single-node access modes only (a workspace has one "
            f"owner process), not {cap.access_mode}",
            volume_id=volume_id,
        )
    return cap


def workspace_name(request_name: str) -> str:
    """A valid workspace name derived from a CreateVolume name (``pvc-<uuid>`` stays as it is)."""
    if not request_name:
        raise InvalidInput("CreateVolume: name is required")
    name = re.sub(r"[^a-z0-9._-]", "-", request_name.lower()).strip("-._") or "volume"
    if len(name) > 63 or name != request_name:
        digest = hashlib.sha256(request_name.encode()).hexdigest()[:8]
        name = f"{name[:54].rstrip('-._')}-{digest}"
    return check_name(name, "workspace")


def parse_secrets(secrets: Mapping[str, str]) -> dict:
    """NodePublish/NodeStage secrets -> Config overrides (the ``s3`` section only).

    The secrets live in the pod's namespace, so they may choose how the volume reaches S3,
    never which catalog the plugin asks: that catalog decides the pod's access check and
    names the records the mount process reads, as root on the node and with the plugin's own
    S3 credentials (a catalog of the pod's making could name ``file:///`` paths of the node
    or any object those credentials reach)."""
    if "catalogUrl" in secrets:
        raise InvalidInput(
            "secret key 'catalogUrl' is not accepted: a volume's secrets come from the pod's "
            "namespace, and the catalog that decides who may read what is the plugin's own; set "
            'catalog_url in the plugin\'s configuration (docs/csi.md, "Credentials")'
        )
    s3: dict = {}
    for key, value in secrets.items():
        field = SECRET_KEYS.get(key)
        if field is None:
            raise InvalidInput(
                f"unknown secret key {key!r}; known: {', '.join(sorted(SECRET_KEYS))}"
            )  # never echo the value
        s3[field] = value
    return {"s3": s3} if s3 else {}


SECRET_KEYS = {  # secret key -> field of the config's [s3] section
    "s3AccessKeyId": "access_key_id",
    "s3SecretAccessKey": "secret_access_key",
    "s3Endpoint": "endpoint_url",
    "s3Region": "region",
}
