"""Make sure an unpublished workspace really reached the object store before the volume is forgotten.

The mount process flushes (and commits) when it stops, but if that flush fails (the object
store is down) the daemon still exits and ``fuse_adapter umount`` still reports it
stopped: the acknowledged files are safe in the journal and shared tier, yet nothing would
ever push them out once the plugin forgot the volume. So after the daemon is gone the
plugin opens the workspace itself (replaying its journal), flushes whatever is still dirty
and commits to ``commitTo`` (a no-op when the daemon already did it). If that fails the
error reaches the CO, which retries NodeUnpublishVolume; the record stays until it works
(promise 3: nothing acknowledged is lost).
"""

from __future__ import annotations

from csi.volumes import VolumeSpec
from datahub.config import load_config


def finish_workspace(spec: VolumeSpec, config_path: str) -> None:
    """Flush ``spec``'s workspace to the object store and commit it if asked; raise if it cannot."""
    # here, not at the top: the plugin starts without the write-back engine and the cache
    from datahub.workspaces import finish_workspace as flush_and_commit

    flush_and_commit(spec.workspace, load_config(config_path, env={}), spec.commit_to or None)
