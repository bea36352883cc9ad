"""A workspace path's check (``model.normalize``) decides the common key with one regex
(``validation.PLAIN_KEY``, small41: three checks per small file through a mount) and must
accept and refuse exactly what ``validation.check_key`` does. A guard: it passes before the
fast path too (normalize then was check_key); it fails if the regex ever lets through a key
check_key refuses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datahub.errors import InvalidKey
from datahub.validation import MAX_KEY_BYTES, check_key
from datahub.writeback.model import normalize

EDGES = [
    "a", "a/b", "a b/c.d", "d/f0001.bin", "x" * MAX_KEY_BYTES, "x" * (MAX_KEY_BYTES + 1),
    "/".join(["y" * 255] * 4), "a/../b", "a//b", ".", "..", "a/./b", ".hidden", "a/.b",
    "a\x00b", "a\nb", "a\x7fb", "é", "a/\udcff", "-", "~/x", "a /b", " a",
]  # fmt: skip


def _verdict(check, key: str) -> str | None:
    try:
        return check(key)
    except InvalidKey:
        return None


@pytest.mark.parametrize("key", EDGES)
def test_normalize_agrees_with_check_key_on_the_edges(key: str) -> None:
    assert _verdict(normalize, key) == _verdict(check_key, key)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab./ \x00\n-_~é"), max_size=12))
def test_normalize_agrees_with_check_key(key: str) -> None:
    stripped = key.strip("/")
    expected = _verdict(check_key, stripped) if stripped else ""
    assert _verdict(normalize, key) == expected
