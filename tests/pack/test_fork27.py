"""fork27: a ShardWriter the PARENT opened, in a forked child (a pack worker's child, a
DataLoader worker holding one).

The writer's write transaction stays open between puts, over a scratch file of the parent's.
A child writing through it wrote its pages into that file, published a shard of its own at
the parent's path and deleted the parent's scratch file. Now the writer is its opener's: the
child's put and finish are refused, and its abort leaves the parent's files alone.
"""

from __future__ import annotations

from datahub.errors import InvalidInput
from datahub.pack.shard import ShardReader, ShardWriter
from tests.cache.test_fork25 import in_child


def test_a_child_cannot_write_or_drop_its_parents_shard(tmp_path) -> None:
    path = tmp_path / "shard-00000.lmdb"
    writer = ShardWriter(path)
    writer.put("a", b"parent a")
    writer.put("b", b"parent b")
    scratch = path.with_name(path.name + ".scratch")

    def child() -> bool:
        refused = 0
        for attempt in (lambda: writer.put("x", b"child x"), lambda: writer.finish({"by": "child"})):
            try:
                attempt()
            except InvalidInput as exc:
                refused += "forked child" in str(exc)
        writer.abort()  # as a failed task's cleanup does
        return refused == 2

    assert in_child(child) == 0, "the child wrote through its parent's writer"
    assert not path.exists(), "the child published a shard at the parent's path"
    assert scratch.exists(), "the child deleted the parent's scratch file"
    writer.put("c", b"parent c")
    assert writer.finish()["count"] == 3
    reader = ShardReader(path)
    assert list(reader.iter_keys()) == ["a", "b", "c"]
    assert reader.get("c") == b"parent c"
    reader.close()
