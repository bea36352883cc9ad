"""Read-order hints as lookup names: every window survives the trip whole and in order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from datahub.hint_names import NAME_MAX, PREFIX, decode, encode
from datahub.storage.base import ObjectRef
from fuse_adapter.hints import HintAssembler
from fuse_adapter.readonly import ReadOnlyView
from fuse_adapter.tree import ROOT_INODE, ListingTree


@given(st.lists(st.integers(min_value=1, max_value=2**63 - 1), max_size=600), st.integers(0, 2**48))
def test_any_window_round_trips_in_names_a_kernel_accepts(inodes: list[int], token: int) -> None:
    names = encode(inodes, token)
    assert all(len(n.encode()) <= NAME_MAX and "/" not in n and n.startswith(PREFIX) for n in names)
    assembler = HintAssembler()
    results = [assembler.add(n) for n in reversed(names)]  # parts may arrive in any order
    if inodes:
        assert results[:-1] == [None] * (len(names) - 1) and results[-1] == inodes
    else:
        assert names == []


def test_a_new_window_replaces_an_unfinished_one() -> None:
    old = encode(list(range(1, 200)), token=1)
    new = encode([7, 8, 9], token=2)
    assert len(old) > 1
    assembler = HintAssembler()
    assert assembler.add(old[0]) is None
    assert assembler.add(new[0]) == [7, 8, 9]
    assert all(assembler.add(n) is None for n in old[1:]), "the stale window's parts never complete it"


def test_names_that_are_not_hints_are_refused() -> None:
    for name in (
        "photo.jpg",
        PREFIX,
        PREFIX + "zz-0-1-5",
        PREFIX + "1-1-1-5",
        PREFIX + "1-0-1-",
        PREFIX + "1-0-1-x",
    ):
        assert decode(name) is None


class RecordingSource:
    def __init__(self) -> None:
        self.hints: list[list[ObjectRef]] = []

    def hint(self, refs):
        self.hints.append(list(refs))


def test_the_view_hints_files_in_order_and_skips_directories_and_unknown_inodes() -> None:
    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, "memory://b")
    tree.add_files(feed, [(k, 10, 0, f"memory://b/{k}", "e") for k in ("a/1", "a/2", "b")])
    tree.finish_feed(feed)
    source = RecordingSource()
    view = ReadOnlyView(tree, source)
    counted: list[int] = []
    view.on_hint = counted.append
    a = view.lookup(ROOT_INODE, "a")
    one, two, b = view.lookup(a, "1"), view.lookup(a, "2"), view.lookup(ROOT_INODE, "b")
    assert view.is_hint(encode([b])[0]) and not view.is_hint("b")
    names = encode([b, a, 99999, two, one])
    assert [view.hint(n) for n in names] == [0] * (len(names) - 1) + [3]
    assert [r.url for r in source.hints[0]] == ["memory://b/b", "memory://b/a/2", "memory://b/a/1"]
    assert counted == [3]
