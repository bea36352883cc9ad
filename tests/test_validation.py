"""Names and keys from users are refused with clear errors (promise 4)."""

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from csi.access import POD_NAMESPACE, POD_SERVICE_ACCOUNT, pod_principal
from datahub.config import load_config, parse_size
from datahub.errors import InvalidInput, InvalidKey, InvalidName
from datahub.validation import (
    ACL_PRINCIPAL_PATTERN,
    KEY_PATTERN,
    MAX_KEY_BYTES,
    NAME_PATTERN,
    NEW_KEY_PATTERN,
    PREFIX_PATTERN,
    PRINCIPAL_PATTERN,
    REF_PATTERN,
    TAG_PATTERN,
    check_json_field,
    check_key,
    check_name,
    check_new_key,
    check_prefix,
    check_principal,
    check_tag,
    json_depth,
    load_stored_json,
    stored_json,
)


@pytest.mark.parametrize("name", ["a", "imagenet", "coco-2017", "v1.2_x", "0abc", "a" * 63])
def test_valid_names(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "A", "-x", ".x", "a" * 64, "a/b", "a b", "ä", "x\n"])
def test_invalid_names(name):
    with pytest.raises(InvalidName, match="invalid dataset name"):
        check_name(name)


@pytest.mark.parametrize("key", ["a", "train/cat/0001.jpg", "a b/c.d", "x..y", "ü/ß.png"])
def test_valid_keys(key):
    assert check_key(key) == key


@pytest.mark.parametrize(
    "key",
    ["", "/abs", "a/../b", "..", "a/./b", "a//b", "a/", "nul\x00x", "ctl\x1fx", "del\x7f", "x" * 1025],
)
def test_invalid_keys(key):
    with pytest.raises(InvalidKey):
        check_key(key)


def test_tags_cannot_look_like_versions():
    assert check_tag("golden") == "golden"
    for good in ["v3a", "V3a", "latest2", "vv3", "v"]:
        assert check_tag(good) == good
    # in any case (review73): a tag "V3" made ds@V3 another version than ds@v3
    for bad in ["latest", "3", "", "-x", "v3", "v0", "v007", "v" + "9" * 40, "V3", "Latest", "LATEST"]:
        with pytest.raises(InvalidName):
            check_tag(bad)


BIDI_AND_INVISIBLE = [
    chr(c)
    for c in [*range(0x200B, 0x2010), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
    # the other format characters that render as nothing (review19b)
    + [0x00AD, 0x061C, *range(0x2060, 0x2066), *range(0x206A, 0x2070), 0xFEFF, *range(0xFFF9, 0xFFFC)]
]


@pytest.mark.parametrize("char", BIDI_AND_INVISIBLE)
def test_keys_with_bidi_overrides_or_invisible_format_characters_are_refused(char):
    """New keys keep the rule; a key stored before it is still a key to read and delete
    (issue 24 item 4), so only ``check_new_key`` refuses it."""
    with pytest.raises(InvalidKey, match="invisible format characters"):
        check_new_key(f"img/{char}gpj.exe")
    assert check_key(f"img/{char}gpj.exe") == f"img/{char}gpj.exe"
    assert not re.fullmatch(NEW_KEY_PATTERN, f"img/{char}gpj.exe")


_KEY_CHARS = st.characters(codec="utf-8", exclude_categories=("Cs",))


@given(st.text(_KEY_CHARS, min_size=0, max_size=40))
def test_the_key_schema_pattern_is_exactly_check_key(key):
    """OpenAPI's key pattern accepts exactly what check_key does (up to the byte-length limit)."""
    try:
        check_key(key)
        ok = True
    except InvalidKey:
        ok = False
    assert ok == bool(re.fullmatch(KEY_PATTERN, key))
    assert (ok and not _INVISIBLE_CHARS.search(key)) == bool(re.fullmatch(NEW_KEY_PATTERN, key))


_INVISIBLE_CHARS = re.compile("[\u00ad\u061c\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]")


@given(st.lists(st.text(_KEY_CHARS, min_size=1, max_size=12), min_size=1, max_size=5))
def test_keys_round_trip_through_check_key(parts):
    """A key that passes check_key is returned unchanged and survives JSON as itself."""
    key = "/".join(parts)
    try:
        assert check_key(key) == key
    except InvalidKey:
        return
    assert json.loads(json.dumps(key)) == key and len(key.encode()) <= MAX_KEY_BYTES


@given(st.text(st.characters(codec="ascii"), max_size=70))
def test_name_tag_and_ref_patterns_match_the_checks(text):
    def passes(check) -> bool:
        try:
            check(text)
            return True
        except InvalidName:
            return False

    assert passes(check_name) == bool(re.fullmatch(NAME_PATTERN, text))
    assert passes(check_tag) == bool(re.fullmatch(TAG_PATTERN, text))
    if passes(check_tag) or re.fullmatch(r"v?[0-9]+|latest", text):
        assert re.fullmatch(REF_PATTERN, text)


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


def test_json_depth_counts_without_recursion():
    assert [json_depth(v) for v in (1, {}, [], {"a": [1]}, nested(32))] == [0, 1, 1, 2, 32]
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert json_depth(deep) == 33  # gives up right past the limit, whatever the depth


def test_json_field_limits():
    check_json_field(nested(32), "meta", "k")
    with pytest.raises(InvalidInput, match="record 'k': labels is nested deeper than 32 levels"):
        check_json_field(nested(33), "labels", "k")
    with pytest.raises(InvalidInput, match="over the 65536-byte limit"):
        check_json_field({"x": "y" * 65536}, "meta", "k")
    with pytest.raises(InvalidInput, match="not plain JSON"):
        check_json_field({"x": float("nan")}, "meta", "k")


def test_stored_values_of_any_depth_decode_to_a_marker():
    text = '{"n":' * 100_000 + "1" + "}" * 100_000  # json.loads alone raises RecursionError
    assert set(load_stored_json(text)) == {"datahub_unreadable"}
    assert set(stored_json(nested(33))) == {"datahub_unreadable"}
    assert load_stored_json('{"a":{"b":[1,2]}}') == {"a": {"b": [1, 2]}}


@pytest.mark.parametrize(
    "text",
    ['{"a":1}', ' { "a" : [1, 2.5, "\\u00e9", null] } ', '{"a":1}\n', "[]", "7", '"s"', '{"k":{"d":{}}}'],
)
def test_stored_json_decodes_as_json_loads_whatever_its_spacing(text):
    """The listing fast path (the C scanner, no whitespace skipping) falls back to json.loads."""
    assert load_stored_json(text) == json.loads(text)


@pytest.mark.parametrize("text", ['{"a":1} x', '{"a":', "{'a': 1}"])
def test_stored_json_that_is_not_json_still_raises(text):
    with pytest.raises(ValueError):
        load_stored_json(text)


def test_sizes_and_config_layers(tmp_path):
    assert parse_size("4MiB") == 4 * 1024**2 and parse_size("2GB") == 2 * 10**9 and parse_size(7) == 7
    with pytest.raises(InvalidInput):
        parse_size("lots")
    f = tmp_path / "d.toml"
    f.write_text('home = "/srv/dh"\n[cache]\nram_bytes = "1GiB"\npolicy = "lru"\n')
    cfg = load_config(f, env={"DATAHUB_CACHE_POLICY": "slru"}, overrides={"api": {"port": 9000}})
    assert cfg.home == "/srv/dh" and cfg.cache.ram_bytes == 1024**3
    assert cfg.cache.policy == "slru" and cfg.api.port == 9000
    assert cfg.resolved_catalog_url == "sqlite:////srv/dh/catalog.db"
    with pytest.raises(InvalidInput, match="unknown configuration key"):
        load_config(env={}, overrides={"cache": {"nope": 1}})


_PREFIX_CHARS = st.sampled_from(["a", "b", "/", ".", "\x00", "\x1f", "\u202e", "ü", " "])


@given(st.text(_PREFIX_CHARS, max_size=12) | st.text(_KEY_CHARS, max_size=30))
def test_the_prefix_schema_pattern_is_exactly_check_prefix(prefix):
    """Issue 24 item 7: a diff or listing prefix with a control character was schema-valid
    yet refused; OpenAPI's prefix pattern now takes exactly what check_prefix does."""
    try:
        check_prefix(prefix)
        ok = True
    except InvalidKey:
        ok = False
    assert ok == bool(re.fullmatch(PREFIX_PATTERN, prefix)), prefix


# -- principals (issue 35): one rule for tokens' principals and pods' service accounts ---------

_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)


@pytest.mark.parametrize(
    "principal",
    [
        "alice",
        "alice@example.com",
        "svc.bot@team+1",
        "a" * 128,
        "system:serviceaccount:team-a:trainer",
        "system:serviceaccount:default:default",
        "system:serviceaccount:kube-system:csi-datahub.node",  # a name is a DNS-1123 subdomain
        "system:serviceaccount:" + "n" * 63 + ":" + "s" * 63,
    ],
)
def test_principals_datahub_produces_or_documents_are_accepted(principal):
    assert check_principal(principal) == principal
    assert re.fullmatch(PRINCIPAL_PATTERN, principal) and re.fullmatch(ACL_PRINCIPAL_PATTERN, principal)


@pytest.mark.parametrize(
    "principal",
    [
        "",
        "*",  # everyone: an access entry, never a principal
        "<b>x</b>",
        "alice\u202e",  # bidi override
        "ali\u200bce",  # zero-width space
        "alice\n",
        "al ice",
        "a" * 129,
        "a" * 200,
        "-x",
        "system:serviceaccount:Team-A:trainer",  # namespaces are lower-case DNS labels
        "system:serviceaccount:team-a:",
        "system:serviceaccount::trainer",
        "system:serviceaccount:team-a:trainer:extra",
        "system:serviceaccount:-a:trainer",
        "system:serviceaccount:" + "n" * 64 + ":trainer",  # a label is at most 63 characters
        "system:serviceaccount:team-a:" + "s" * 254,  # a subdomain is at most 253
        "system:serviceaccount:team-a:<b>x</b>",
        "system:group:team-a",
    ],
)
def test_markup_format_characters_and_overlong_principals_are_refused(principal):
    with pytest.raises(InvalidName, match="invalid principal"):
        check_principal(principal)
    assert not re.fullmatch(PRINCIPAL_PATTERN, principal)
    assert bool(re.fullmatch(ACL_PRINCIPAL_PATTERN, principal)) is (principal == "*")


@given(_LABEL, st.lists(_LABEL, min_size=1, max_size=4).map(".".join).filter(lambda n: len(n) <= 253))
def test_every_service_account_the_csi_plugin_names_can_be_granted(namespace, account):
    """csi/access.py spells a pod as Kubernetes does; each such name passes the rule grants
    are written with, else no access list could ever admit that pod."""
    principal = pod_principal({POD_NAMESPACE: namespace, POD_SERVICE_ACCOUNT: account})
    assert principal == f"system:serviceaccount:{namespace}:{account}"
    assert check_principal(principal) == principal


@given(st.text(st.sampled_from(["a", "Z", "0", ":", "-", ".", "@", "<", "\u202e", " ", "\n"]), max_size=40))
def test_the_principal_schema_patterns_are_exactly_check_principal(text):
    try:
        check_principal(text)
        ok = True
    except InvalidName:
        ok = False
    assert ok == bool(re.fullmatch(PRINCIPAL_PATTERN, text))
    assert (ok or text == "*") == bool(re.fullmatch(ACL_PRINCIPAL_PATTERN, text))
