"""Names and keys from users are refused with clear errors (promise 4)."""

import pytest

from datahub.config import load_config, parse_size
from datahub.errors import InvalidInput, InvalidKey, InvalidName
from datahub.validation import check_key, check_name, check_tag


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
    for bad in ["latest", "3", "", "-x"]:
        with pytest.raises(InvalidName):
            check_tag(bad)


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
