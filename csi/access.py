"""Which pod may publish which dataset: the dataset's access list, applied to the pod's service account.

The plugin holds credentials for every dataset, so it decides on the pod's behalf (promise
5). The kubelet tells it who the pod is (``podInfoOnMount`` in the CSIDriver): the
principal is ``system:serviceaccount:<namespace>:<name>``, Kubernetes' own name for it.

* a dataset with no access list and no owner is open to every pod (as in local mode);
* otherwise the pod's service account must be its owner or hold a role in its ``acl``
  (any role includes reading; ``*`` grants every pod); committing a workspace into a
  dataset (``commitTo``) needs ``writer``;
* the commit itself is made with the plugin's own catalog credentials: with a server as its
  catalog, that token needs ``writer`` too (``require_plugin_writer``), asked at publish;
* a bucket has no access list, so a bucket volume reads with the S3 credentials its own
  secrets bring, never the plugin's (``require_own_credentials``);
* the plugin's S3 keys go to the plugin's own endpoint only: secrets naming another one bring
  keys of their own (``require_keys_for_endpoint``).
"""

from __future__ import annotations

from collections.abc import Mapping

from datahub.catalog import ROLES, Catalog, Dataset, is_bucket_snapshot
from datahub.errors import AccessDenied, DatasetNotFound
from datahub.validation import SERVICE_ACCOUNT_PREFIX, check_principal

POD_NAMESPACE = "csi.storage.k8s.io/pod.namespace"
POD_SERVICE_ACCOUNT = "csi.storage.k8s.io/serviceAccount.name"


def pod_principal(context: Mapping[str, str]) -> str | None:
    """The publishing pod's service account, if the kubelet said which pod it is.

    Checked against the principal rule every access list is written with (INVALID_ARGUMENT
    otherwise): a name no grant could hold must not be compared with the list at all."""
    namespace, account = context.get(POD_NAMESPACE), context.get(POD_SERVICE_ACCOUNT)
    if not (namespace and account):
        return None
    return check_principal(f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{account}")


def bucket_snapshot(dataset: Dataset) -> bool:
    """Whether ``dataset`` is the one a bucket mount records its listing in: named after its
    source URL, ``s3://b/p`` -> ``s3.b.p`` (``fuse_adapter.layout.snapshot_dataset_name``), and
    made by the mount with no owner and no access list (``datahub.catalog.is_bucket_snapshot``,
    the rule a derive or pack of one keeps too)."""
    return is_bucket_snapshot(dataset.name, dataset.source)


def may(dataset: Dataset, principal: str | None, role: str) -> bool:
    """Whether the pod's ``principal`` holds ``role`` on ``dataset`` (``require`` without the error)."""
    try:
        require(dataset, principal, role)
    except AccessDenied:
        return False
    return True


def require(dataset: Dataset, principal: str | None, role: str) -> None:
    """AccessDenied naming the dataset, the pod's principal and the role it needs.

    A bucket snapshot is never open to every pod: its records name a bucket's objects, which
    the plugin would read with its own credentials for a pod that has none for that bucket
    (a bucket volume must bring its own, ``require_own_credentials``)."""
    if not dataset.acl and not dataset.owner and not bucket_snapshot(dataset):
        return
    if principal is not None and dataset.owner == principal:
        return
    needed = ROLES.index(role)
    granted = [dataset.acl.get(p, "") for p in (principal, "*") if p]
    if any(r in ROLES and ROLES.index(r) >= needed for r in granted):
        return
    who = principal or "a pod the kubelet did not identify (set podInfoOnMount: true on the CSIDriver)"
    what = f"dataset {dataset.name!r}"
    if bucket_snapshot(dataset):
        what = f"dataset {dataset.name!r} (a snapshot of bucket {dataset.source}, open to no pod by default)"
    raise AccessDenied(
        f"{who} needs the {role} role on {what}; ask one of its admins to grant it "
        "(`datahub dataset update NAME --grant PRINCIPAL=reader`)",
        dataset=dataset.name,
        required_role=role,
    )


def readable(catalog: Catalog, name: str, principal: str | None) -> Dataset:
    """Dataset ``name``, if the pod may read it; else the one answer for a dataset that is
    missing and for one the pod may not read (``not_readable``).

    Why one answer (caller72): a publish answered NOT_FOUND for a missing dataset and
    PERMISSION_DENIED naming it for one the pod's service account holds no role on, so whoever
    may create a pod learned which dataset names exist (and which are bucket snapshots) by
    naming them in an inline volume, though the API answers such a dataset as a missing one
    (docs/api.md, "403 or 404"). The CSI spec's NOT_FOUND for NodePublishVolume is "volume does
    not exist", whose recovery is to check the volume id and "that the volume is accessible".
    A dataset hidden from the plugin's own catalog token (a server's 404) answers the same."""
    try:
        dataset = catalog.get_dataset(name)
        require(dataset, principal, "reader")
    except (DatasetNotFound, AccessDenied):
        raise not_readable(name, principal) from None
    return dataset


def not_readable(name: str, principal: str | None) -> DatasetNotFound:
    """NOT_FOUND for dataset ``name``, whether it is missing or ``principal`` may not read it:
    the message depends on nothing else, and says both ways on."""
    who = principal or "a pod the kubelet did not identify (set podInfoOnMount: true on the CSIDriver)"
    grant = principal or "PRINCIPAL"
    return DatasetNotFound(
        f"dataset {name!r} not found, or not readable by {who}: check the name (`datahub dataset "
        f"list`), or ask one of its admins to grant the pod's service account the reader role "
        f"(`datahub dataset update {name} --grant {grant}=reader`)",
        dataset=name,
    )


def _has_own_keys(overrides: Mapping[str, object]) -> bool:
    """Whether the volume's secrets carry an S3 access key and secret of their own."""
    s3 = overrides.get("s3")
    return isinstance(s3, Mapping) and bool(s3.get("access_key_id") and s3.get("secret_access_key"))


def require_own_credentials(overrides: Mapping[str, object], bucket_url: str, volume_id: str) -> None:
    """AccessDenied unless the volume's secrets give S3 credentials of its own.

    The plugin's credentials read every dataset's objects (it checks each dataset's access
    list first): a bucket volume served with them let any pod mount the objects bucket, or
    any other bucket they reach, and read what no access list granted it."""
    if _has_own_keys(overrides):
        return
    raise AccessDenied(
        f"bucket volume {volume_id!r} ({bucket_url}) needs S3 credentials of its own: give its "
        "pod a nodePublishSecretRef (a PV: nodeStageSecretRef) with s3AccessKeyId and "
        "s3SecretAccessKey; the plugin's own credentials serve only datasets, whose access "
        "lists it checks",
        volume_id=volume_id,
    )


def require_keys_for_endpoint(overrides: Mapping[str, object], volume_id: str) -> None:
    """AccessDenied unless secrets that point S3 at another endpoint than the plugin's bring an
    access key and secret of their own (called only for such secrets).

    The secrets overlay the plugin's ``[s3]``. With ``s3Endpoint`` alone, the mount process
    signed each read of a dataset's records outside the platform's objects bucket with the
    plugin's keys and sent it to the endpoint the pod's Secret named: whoever ran it read the
    plugin's access key id in every ``Authorization`` header (and its session token, with
    temporary credentials), caller71. The secret key itself never leaves (SigV4 sends an HMAC
    bound to that endpoint's host), but none of the plugin's credentials belongs there."""
    if _has_own_keys(overrides):
        return
    raise AccessDenied(
        f"volume {volume_id!r}: its secrets name an S3 endpoint (s3Endpoint) other than the plugin's "
        "without keys of their own, and the plugin's S3 keys are never sent to another endpoint: give "
        "s3AccessKeyId and s3SecretAccessKey for that endpoint in the same Secret, or leave s3Endpoint "
        "out to read through the plugin's",
        volume_id=volume_id,
    )


def require_plugin_writer(catalog: Catalog, dataset: str, workspace: str) -> None:
    """AccessDenied unless the plugin's own catalog credentials may commit into ``dataset``.

    The commit a workspace volume makes when it is unpublished (unstaged) uses the plugin's
    credentials, not the pod's. A token that could only read the ``commitTo`` dataset
    published the volume, then every NodeUnpublishVolume failed on the refused commit and
    the pod stayed Terminating until someone granted ``writer`` (csinode15). So it is asked
    now, of the server (``GET /v1/datasets/{name}/access``), before anything is mounted. A
    database catalog has no caller: the plugin writes it itself."""
    answer = catalog.store.caller_role(dataset)  # the pod's check found it: readable
    if answer is None:
        return
    principal, role = answer
    if ROLES.index(role) >= ROLES.index("writer"):
        return
    raise AccessDenied(
        f"commitTo {dataset!r}: the node plugin's catalog token ({principal!r}) holds only the {role} "
        f"role on it, and workspace {workspace!r} is committed with that token when the volume is "
        f"unpublished: ask one of the dataset's admins to grant it writer (`datahub dataset update "
        f"{dataset} --grant {principal}=writer`), then publish again",
        dataset=dataset,
        principal=principal,
        required_role="writer",
    )
