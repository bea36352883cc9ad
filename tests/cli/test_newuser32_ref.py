"""What newuser32 met: ``DATASET@`` with nothing after the ``@`` was taken for the latest.

``datahub export sample@$REF > out.ndjson`` with ``REF`` unset (a script's typo, a variable
of another shell) exported the latest version as if it had been asked for, and so did ``ls``,
``derive``, ``prefetch`` and ``mount``. The ref is refused now, as ``pack`` refused it already,
naming the spec and the ways to write one.
"""

from __future__ import annotations

import pytest

from datahub.errors import InvalidInput
from fuse_adapter.layout import VersionSpec
from tests.cli.test_cli import dh, src  # noqa: F401

REFUSAL = (
    "error: nothing after '@' in 'pets@' (an empty shell variable?): name a version, "
    "e.g. pets@v1, pets@latest or pets@TAG, or write pets alone for the latest\n"
)


@pytest.mark.parametrize(
    "args",
    [("ls", "pets@"), ("export", "pets@"), ("derive", "pets@", "--where", "size>0", "--to", "x"),
     ("prefetch", "pets@")],
)  # fmt: skip
def test_a_version_with_nothing_after_the_at_is_refused(dh, src, args) -> None:  # noqa: F811
    assert dh("import", str(src), "--to", "pets")[0] == 0
    code, out, err = dh(*args)
    assert (code, out, err) == (2, "", REFUSAL)
    assert dh("ls", "pets")[0] == 0  # the dataset alone still means its latest version


def test_a_mount_source_with_nothing_after_the_at_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"nothing after '@' in 'pets@'"):
        VersionSpec.parse("pets@")
    assert VersionSpec.parse("pets") == VersionSpec("pets", None)
    assert VersionSpec.parse("pets@v2") == VersionSpec("pets", "v2")
