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

import logging

from csi.volumes import VolumeSpec
from datahub.config import load_config

log = logging.getLogger(__name__)


def finish_workspace(spec: VolumeSpec, config_path: str) -> None:
    """Flush ``spec``'s workspace to the object store and commit it if asked; raise if it cannot."""
    from datahub.cache.writeback import open_workspace
    from datahub.storage import StoreRegistry

    config = load_config(config_path, env={})
    with StoreRegistry(config) as stores:
        workspace = open_workspace(spec.workspace, config, stores, background=False)
        try:
            dirty = workspace.dirty()
            if dirty:
                log.warning(
                    "workspace %s still had %d dirty file(s) after unmount: flushing",
                    spec.workspace,
                    len(dirty),
                )
                workspace.flush()
            if spec.commit_to:
                from datahub.catalog import open_catalog
                from datahub.workspaces import commit_workspace

                catalog = open_catalog(config.resolved_catalog_url)
                try:
                    version = commit_workspace(
                        workspace, catalog, spec.commit_to, message=f"workspace {spec.workspace}"
                    )
                finally:
                    catalog.close()
                log.info("workspace %s is %s@v%d", spec.workspace, spec.commit_to, version.seq)
        finally:
            workspace.close()
