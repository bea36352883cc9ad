"""Promise 1 for workspace commits: a version committed from a workspace keeps its bytes after
the workspace changes and is committed again.

Found by the chaos soak (bench/soak, seed 26, 30 minutes; docs/reliability.md): the flusher
uploads each file to a fixed key ``workspaces/<name>/<path>`` and deletes the key of a
removed file, so the next flush overwrites or deletes objects the earlier version points at
(its reads then fail ``ObjectChanged`` / not found, or a cache returns the old bytes). Fixed:
a commit pins each file as a content-addressed blob and the records point there
(``datahub.workspaces``).
"""

from __future__ import annotations

from datahub.workspaces import commit_workspace
from tests.writeback.conftest import Env, write


def read_version(env: Env, catalog, dataset: str, seq: int) -> dict[str, bytes]:
    out = {}
    for rec in catalog.list_records(dataset, seq):
        store, key = env.stores.for_url(rec.url)
        out[rec.key] = store.read(key, etag=rec.etag)
    return out


def test_a_committed_workspace_version_reads_the_same_after_the_next_commit(env: Env, catalog) -> None:
    ws = env.open()
    write(ws, "log.txt", b"loss=1.0")
    write(ws, "ckpt", b"epoch-1")
    commit_workspace(ws, catalog, "run", message="epoch 1")
    assert read_version(env, catalog, "run", 1) == {"log.txt": b"loss=1.0", "ckpt": b"epoch-1"}

    write(ws, "log.txt", b"loss=0.5")
    ws.unlink("ckpt")
    commit_workspace(ws, catalog, "run", message="epoch 2")
    assert read_version(env, catalog, "run", 2) == {"log.txt": b"loss=0.5"}
    assert read_version(env, catalog, "run", 1) == {"log.txt": b"loss=1.0", "ckpt": b"epoch-1"}
