"""A preview kept on disk is served only to records that agree with its object's size
(review32). The preview's file was named by (URL, etag, kind) alone: once a record of the
object's true size had made it, a record of the same URL and etag claiming another size (a
shorter record, refused by ``ImageSource.read`` since shortrec15) was served the whole object's
picture from disk without any check, in the browser's thumbnails and LabelX's previews. The
class of caller31's page-file bug: a stored file trusted for a name that does not say all the
record claims."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from datahub.errors import ObjectChanged
from datahub.storage.base import ObjectRef
from datahub.web.images import ImageSource
from tests.browser import test_preview_bounds15 as bounds15

_jpeg = bounds15._jpeg
stores = bounds15.stores  # the fixture, shared


@pytest.mark.parametrize("kind", ["thumb", "preview"])
@pytest.mark.parametrize("delta", [-100, 1])
def test_a_preview_made_for_the_object_is_not_served_to_a_record_of_another_size(
    tmp_path: Path, stores, kind: str, delta: int
) -> None:
    origin = stores.store((tmp_path / "origin").as_uri())
    info = origin.put("img.jpg", _jpeg("red"))
    source = ImageSource(tmp_path / "previews", stores=stores)
    whole = ObjectRef(origin.url_for("img.jpg"), info.etag, info.size)
    picture = source.preview(whole, kind)
    assert Image.open(io.BytesIO(picture)).size[0] > 0
    other = ObjectRef(whole.url, whole.etag, info.size + delta)
    with pytest.raises(ObjectChanged):
        source.preview(other, kind)
    assert source.preview(whole, kind) == picture  # the object's own records still get theirs


def test_a_preview_made_first_for_a_wrong_record_is_never_made(tmp_path: Path, stores) -> None:
    """The other order: the wrong record asks first (refused, nothing kept), then the object's
    own record gets its preview."""
    origin = stores.store((tmp_path / "origin").as_uri())
    info = origin.put("img.jpg", _jpeg("blue"))
    source = ImageSource(tmp_path / "previews", stores=stores)
    short = ObjectRef(origin.url_for("img.jpg"), info.etag, info.size - 10)
    with pytest.raises(ObjectChanged):
        source.preview(short, "thumb")
    assert list((tmp_path / "previews").glob("*.jpg")) == []
    whole = ObjectRef(short.url, short.etag, info.size)
    assert source.preview(whole, "thumb")
