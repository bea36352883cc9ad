"""review21a: adversarial review of packs38 (a pack's live members decide its deletion).

A pack is unlinked when its last live member is given up, and members are known by their
offset alone (``Packs._parse``): two members at one offset are one member to the live set,
so giving up either would take the other's place and unlink the pack under it.
"""

from __future__ import annotations

from datahub.writeback.packs import Packs

PREFIX = "writeback/ws/j-1"


def test_an_empty_member_has_an_offset_of_its_own(tmp_path) -> None:
    """A member of no bytes (``reserve`` of 0, no cover record) must not share its offset with
    the next member: giving up the empty one unlinked the pack holding the other's
    acknowledged bytes (packs38 and before: the next reservation started at the same offset)."""
    packs = Packs(tmp_path, PREFIX, 1 << 20)
    empty = packs.reserve(1, 0, 0)
    full = packs.reserve(2, 0, 10)
    packs.write(empty, b"")
    packs.write(full, b"0123456789")  # acknowledged: durable once this returns
    packs.delete(empty)
    path, offset = packs.path_of(full)
    assert path.exists(), "the pack of a live member was unlinked"
    assert packs.path_of(empty)[1] != offset
    with open(path, "rb") as fh:
        fh.seek(offset)
        assert fh.read(10) == b"0123456789"
    packs.delete(full)
    assert not path.exists()  # its last member gone, the pack goes
    packs.close()
