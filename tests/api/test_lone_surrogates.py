"""A lone UTF-16 surrogate (JSON ``"\\ud800"``) is not text: it has no UTF-8 form, so SQLite and
BSON refused it with a bare ``UnicodeEncodeError`` (a 500), after a record had passed every check.
Each field that reaches the catalog must answer 400 naming the field, and write nothing; a
surrogate *pair* (a character above U+FFFF) is text and round-trips."""

from __future__ import annotations

import pytest

from datahub.catalog import Put, Record
from datahub.errors import InvalidInput
from tests.api.conftest import Api
from tests.api.test_bad_input import error
from tests.api.test_commit_body import head, post_raw

LONE = "\\ud800"  # as JSON text: the escape a client sends


def record_json(**fields: str) -> str:
    base = {"key": '"new/a.jpg"', "url": '"s3://b/a"', "etag": '"e"', "size": "1"}
    base.update(fields)
    return "{" + ",".join(f'"{k}":{v}' for k, v in base.items()) + "}"


@pytest.mark.parametrize(
    "field, body",
    [
        ("key", '{"changes":[{"op":"put","record":' + record_json(key=f'"new/a{LONE}.jpg"') + "}]}"),
        ("etag", '{"changes":[{"op":"put","record":' + record_json(etag=f'"e{LONE}"') + "}]}"),
        ("url", '{"changes":[{"op":"put","record":' + record_json(url=f'"s3://b/a{LONE}"') + "}]}"),
        ("meta", '{"changes":[{"op":"put","record":' + record_json(meta=f'{{"x":"a{LONE}"}}') + "}]}"),
        ("meta", '{"changes":[{"op":"put","record":' + record_json(meta=f'{{"a{LONE}":1}}') + "}]}"),
        ("labels", '{"changes":[{"op":"patch","key":"img/001.jpg","labels":{"x":"' + LONE + '"}}]}'),
        ("message", '{"changes":[{"op":"delete","key":"img/001.jpg"}],"message":"m' + LONE + '"}'),
    ],
)
def test_a_lone_surrogate_in_any_committed_field_is_refused_and_nothing_is_written(api: Api, field, body):
    before = head(api)
    r = post_raw(api, body.encode())
    if field == "message":  # the body's schema already refuses it (pydantic: "unicode string")
        assert "unicode" in error(r, 422)["message"]
    else:
        err = error(r, 400)
        assert "surrogate" in err["message"] and field.rstrip("s") in err["message"], err
    assert head(api) == before


def test_a_surrogate_pair_is_a_character_and_round_trips(api: Api):
    body = (
        '{"changes":[{"op":"put","record":'
        + record_json(key='"new/\\ud83d\\ude00.jpg"', etag='"e\\ud83d\\ude00"', meta='{"x":"\\ud83d\\ude00"}')
        + '}],"message":"\\ud83d\\ude00"}'
    )
    r = post_raw(api, body.encode())
    assert r.status_code == 201, r.text
    rec = api.get("/v1/datasets/pets/versions/latest/records/new/%F0%9F%98%80.jpg")
    assert rec.status_code == 200, rec.text
    assert rec.json()["etag"] == "e\U0001f600" and rec.json()["meta"] == {"x": "\U0001f600"}


@pytest.mark.parametrize("field", ["message", "author", "commit_id"])
def test_a_lone_surrogate_in_a_commit_s_text_is_refused_through_the_python_api(api: Api, field):
    before = head(api)
    with pytest.raises(InvalidInput, match="surrogate"):
        api.catalog.commit(
            "pets", [Put(Record(key="new/a.jpg", url="s3://b/a", etag="e", size=1))], **{field: "x\ud800"}
        )
    assert head(api) == before


@pytest.mark.parametrize("field", ["description", "source"])
def test_a_lone_surrogate_in_a_dataset_s_text_is_refused(api: Api, field):
    with pytest.raises(InvalidInput, match="surrogate"):
        api.catalog.create_dataset("fresh", **{field: "x\ud800"})
    with pytest.raises(InvalidInput, match="surrogate"):
        api.catalog.update_dataset("pets", **{field: "x\ud800"})
    assert "fresh" not in [d.name for d in api.catalog.list_datasets()]


def test_a_version_whose_bytes_pass_a_64_bit_count_is_refused_by_name(api: Api):
    """Each record is bounded (MAX_SIZE = 2**62) but a version's sum was not: the version row
    failed with a bare OverflowError."""
    before = head(api)
    big = [Put(Record(key=f"big/{i}", url=f"s3://b/{i}", etag="e", size=2**62)) for i in range(2)]
    with pytest.raises(InvalidInput, match="'pets': the new version would hold") as exc:
        api.catalog.commit("pets", big, message="too big")
    assert "nothing was committed" in str(exc.value)
    assert head(api) == before
