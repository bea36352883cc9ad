"""review18c: attacks on nodeloss18's journal folders and ``cache forget-journal`` (this stop).

``forget-journal NAME ID --target URL`` deletes ``<URL>/j-<ID>/``, and its guards (never this
node's journal, never while another node holds NAME's writer lease) ask about workspace NAME.
Nothing tied the folder to NAME: a journal id of *another* workspace, whose flush target is the
one given (an explicit target two workspaces share, or one workspace's default target given to
another), deleted that live journal's flushed files, the only copy of a file it had evicted,
while that workspace's own guards were never asked. A journal's folder is NAME's only while
NAME's shared-tier prefix of that id exists (ids are random): the command now requires it and
deletes that prefix last, so a run cut short still finds it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.cli.main import main
from tests.writeback.conftest import Env, write
from tests.writeback.test_nodeloss18 import _as_node_b, _keys, _read, local_nodes  # noqa: F401


def test_forget_journal_of_one_workspace_never_deletes_another_workspaces_live_folder(
    local_nodes: dict[str, Env],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys,
) -> None:
    target = (tmp_path / "outputs" / "shared-run").as_uri()  # one pod template, two workspaces
    live = local_nodes["a"].open("other", target_url=target)  # node a: running, not retired
    write(live, "model.pt", b"acknowledged weights")
    live.flush()
    assert live.flusher.evict(0) > 0  # its bytes are in its flushed object only
    other = live.chunks.journal
    store = local_nodes["a"].stores.store(target)
    assert _keys(store) == {f"j-{other}/model.pt"}

    _as_node_b(local_nodes, tmp_path, monkeypatch)  # an operator retiring workspace ws's node
    code = main(["cache", "forget-journal", "ws", other, "--yes", "--force", "--target", target])
    capsys.readouterr()
    assert code != 0  # no journal of that id in ws: refused
    assert _keys(store) == {f"j-{other}/model.pt"}
    assert _read(live, "model.pt") == b"acknowledged weights"


def test_an_evicted_file_renamed_then_committed_reads_its_bytes_in_both_layouts(
    local_nodes: dict[str, Env],  # noqa: F811
    tmp_path: Path,
) -> None:
    """A file flushed and evicted (its bytes in its journal's flushed object only), then
    renamed: the flush moves its object within the journal's folder (or straight under the
    target, for a journal made before folders), and a commit and a reopen read it whole. Holds."""
    from datahub.catalog import open_catalog
    from datahub.workspaces import commit_workspace
    from tests.writeback.test_commit_history import read_version
    from tests.writeback.test_nodeloss18 import made_before

    catalog = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        for node, dataset in (("a", "new"), ("b", "old")):
            env = local_nodes[node]
            if node == "b":
                made_before(env, f"{env.config.resolved_objects_url}/workspaces/ws")
            data = bytes(range(256)) * 64
            ws = env.open("ws")
            ws.mkdir("d")
            write(ws, "d/x.bin", data)
            ws.flush()
            assert ws.flusher.evict(0) > 0
            ws.rename("d", "e")
            ws.flush()
            assert ws.flusher.evict(0) >= 0
            commit_workspace(ws, catalog, dataset)
            assert read_version(env, catalog, dataset, 1) == {"e/x.bin": data}
            ws.close()
            ws = env.open("ws")
            assert _read(ws, "e/x.bin") == data
            ws.close()
    finally:
        catalog.close()
