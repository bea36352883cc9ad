"""Make sure an unpublished workspace really reached the object store before the volume is forgotten.

The mount process flushes (and commits) when it stops, but if that flush fails (the object
store is down) the daemon still exits and ``fuse_adapter umount`` still reports it
stopped: the acknowledged files are safe in the journal and shared tier, yet nothing would
ever push them out once the plugin forgot the volume. So after the daemon is gone the
plugin opens the workspace itself (replaying its journal), flushes whatever is still dirty
and commits to ``commitTo`` (a no-op when the daemon already did it). If that fails the
error reaches the CO, which retries NodeUnpublishVolume; the record stays until it works
(promise 3: nothing acknowledged is lost).

A commit the catalog refuses (the plugin's token lost ``writer`` on ``commitTo`` after the
publish, which checks it) is PERMISSION_DENIED, and the volume stays too: committing without
the role is not the plugin's to do, and forgetting the volume would leave the pod's outputs
uncommitted in a workspace only this node holds. The message says the files are safe and
what ends it; the kubelet shows it in the pod's events on every retry.
"""

from __future__ import annotations

from datahub.config import load_config
from datahub.errors import AccessDenied, AlreadyExists, DatasetNotFound


def finish_workspace(workspace: str, commit_to: str, config_path: str, author: str = "") -> None:
    """Flush ``workspace`` to the object store and commit it into ``commit_to`` if set, as ``author``
    (the volume's: docs/csi.md "Who wrote a workspace's versions"); raise if it cannot."""
    # here, not at the top: the plugin starts without the write-back engine and the cache
    from datahub.workspaces import finish_workspace as flush_and_commit

    try:
        flush_and_commit(workspace, load_config(config_path, env={}), commit_to or None, author=author)
    except (AccessDenied, AlreadyExists, DatasetNotFound) as refused:
        if not commit_to or refused.details.get("dataset") != commit_to:
            raise
        raise AccessDenied(
            f"workspace {workspace!r} is flushed to the object store and kept, but its commit into "
            f"{commit_to!r} was refused: {refused.message}. The plugin keeps the volume until the "
            "commit succeeds (the pod's outputs are not dropped): grant the node plugin's catalog token "
            "the writer role on that dataset, and the next retry (NodeUnpublishVolume; NodeUnstageVolume "
            "for a staged volume) commits and finishes",
            dataset=commit_to,
            workspace=workspace,
            required_role="writer",
        ) from refused
