"""Review of nodeloss20: the adoption wrote the lost journal's commit merge bases over the
adopter's own, so a file the adopter had committed and then removed stayed in the dataset.

``adopt_journal`` stores the lost journal's ``committed:<dataset>\\0<key>`` entries so that the
adopter's commit deletes what the lost node had committed and removed since. It stored them
with ``put_meta``, one per key, replacing the entry the adopter already had for the same key:
the adopter's own record of what *it* committed there was gone. A file the adopter had written
and committed at such a key (the lost node had committed it too, and removed it), then
removed, was no longer taken for the adopter's by its next commit (the head's record was not
one the base named): the commit kept it. The base of a key both journals committed must name
both records (a union, as an unsettled commit leaves it: ``commit_base.Base``).
"""

from __future__ import annotations

from pathlib import Path

from datahub.catalog import open_catalog
from datahub.workspaces import commit_workspace
from datahub.writeback.adopt import adopt_journal
from tests.writeback.conftest import LAYOUTS
from tests.writeback.test_commit_history import read_version
from tests.writeback.test_nodeloss20 import Nodes, _Env, _files, _lost_node_a, _put


def test_the_adopters_own_merge_base_survives_the_adoption(tmp_path: Path) -> None:
    n = Nodes(tmp_path, LAYOUTS["chunk files"])
    catalog = open_catalog(f"sqlite:///{n.catalog_path}")
    try:

        def writes(a) -> None:
            _put(a, "shared.txt", b"node a's, committed then removed")
            _put(a, "a-only.txt", b"node a's, committed then removed too")
            commit_workspace(a, catalog, "run")  # v1
            a.unlink("shared.txt")
            a.unlink("a-only.txt")

        journal = _lost_node_a(n, writes)
        b = n.open("b")
        try:
            _put(b, "shared.txt", b"node b's, written since the takeover")
            commit_workspace(b, catalog, "run")  # v2: b's shared.txt (a-only.txt kept: not b's)
            adopt_journal(b, journal, n.stores["b"])
            assert _files(b) == {"shared.txt": b"node b's, written since the takeover"}
            b.unlink("shared.txt")
            commit_workspace(b, catalog, "run")  # v3: b removed its file; a's removals apply
            assert read_version(_Env(n.stores["b"]), catalog, "run", 3) == {}
        finally:
            b.close()
    finally:
        catalog.close()
        n.close()
