"""datahub.config (typed pydantic models, sources merged by load_config): precedence, names, sizes, errors naming the setting
and its source, and the generated settings reference (docs/settings.md) kept current."""

from __future__ import annotations

import importlib.util
import pickle
from pathlib import Path

import pytest

from datahub.config import Config, load_config
from datahub.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[1]


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "datahub.toml"
    path.write_text(text)
    return path


def test_defaults_lose_to_toml_to_environment_to_overrides(tmp_path: Path) -> None:
    path = _toml(
        tmp_path, 'home = "/from/toml"\n[cache]\nram_bytes = "1GiB"\npolicy = "lru"\ndisk_bytes = "2G"\n'
    )
    env = {"DATAHUB_CACHE_POLICY": "slru", "DATAHUB_CACHE_RAM_BYTES": "512MiB", "DATAHUB_HOME": "/from/env"}
    cfg = load_config(path, env=env, overrides={"cache": {"ram_bytes": 7}})
    assert cfg.home == "/from/env"  # env beats TOML
    assert cfg.cache.policy == "slru"  # env beats TOML
    assert cfg.cache.ram_bytes == 7  # overrides beat env
    assert cfg.cache.disk_bytes == 2 * 10**9  # TOML beats the default
    assert cfg.cache.page_size == Config().cache.page_size == 4 * 1024**2  # the default
    assert cfg.resolved_catalog_url == "sqlite:////from/env/catalog.db"


def test_the_file_comes_from_datahub_config_and_env_names_split_at_the_section(tmp_path: Path) -> None:
    path = _toml(
        tmp_path, '[s3]\nendpoint-url = "http://127.0.0.1:9"\n[api]\nmax_inflight_body_bytes = "1MiB"\n'
    )
    env = {
        "DATAHUB_CONFIG": str(path),
        "DATAHUB_S3_MAX_POOL_CONNECTIONS": "3",
        "DATAHUB_S3_PATH_STYLE": "false",
        "DATAHUB_S3_REGION": "",
        "DATAHUB_CATALOG_URL": "mongodb://127.0.0.1/db",
        "DATAHUB_API_BODY_READ_TIMEOUT": "2.5",
        "DATAHUB_TEST_CEPH_ENV": "/not/a/setting",
    }
    cfg = load_config(env=env)
    assert cfg.s3.endpoint_url == "http://127.0.0.1:9" and cfg.s3.max_pool_connections == 3
    assert cfg.s3.path_style is False and cfg.s3.region is None
    assert cfg.resolved_catalog_url == "mongodb://127.0.0.1/db"
    assert cfg.api.max_inflight_body_bytes == 1024**2 and cfg.api.body_read_timeout == 2.5


def test_the_shared_tiers_s3_settings_are_a_table_or_one_json_variable(tmp_path: Path) -> None:
    path = _toml(tmp_path, '[cache.shared_s3]\naccess-key-id = "cache"\nregion = "eu-1"\n')
    assert load_config(path, env={}).cache.shared_s3.access_key_id == "cache"
    assert load_config(env={}).cache.shared_s3 is None  # unset: the shared tier uses [s3]
    cfg = load_config(env={"DATAHUB_CACHE_SHARED_S3": '{"region": "eu-2"}'})
    assert cfg.cache.shared_s3.region == "eu-2" and cfg.cache.shared_s3.path_style is True
    with pytest.raises(InvalidInput) as exc:
        load_config(env={"DATAHUB_CACHE_SHARED_S3": '{"secret_access_key": "hunter2",'})
    assert "DATAHUB_CACHE_SHARED_S3" in str(exc.value) and "hunter2" not in str(exc.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("64MiB", 64 * 1024**2), ("1G", 10**9), ("1.5KiB", 1536), ("512 kb", 512_000), ("42", 42), ("7B", 7)],
)
def test_size_syntax(text: str, expected: int) -> None:
    assert load_config(env={"DATAHUB_CACHE_RAM_BYTES": text}).cache.ram_bytes == expected


def test_errors_name_the_setting_and_where_it_came_from(tmp_path: Path) -> None:
    path = _toml(tmp_path, '[cache]\ndisk_bytes = "huge"\n')
    with pytest.raises(InvalidInput) as err:
        load_config(path, env={})
    assert "cache.disk_bytes" in err.value.message and str(path) in err.value.message
    assert "'huge'" in err.value.message and "512MiB" in err.value.message
    with pytest.raises(InvalidInput) as err:
        load_config(env={"DATAHUB_S3_MAX_ATTEMPTS": "many"})
    assert "s3.max_attempts" in err.value.message and "DATAHUB_S3_MAX_ATTEMPTS" in err.value.message
    with pytest.raises(InvalidInput) as err:
        load_config(env={"DATAHUB_CACHE_RAM_BYTE": "1G"})
    assert "unknown configuration key 'cache.ram_byte'" in err.value.message
    assert "DATAHUB_CACHE_RAM_BYTE" in err.value.message and "ram_bytes" in err.value.message
    with pytest.raises(InvalidInput) as err:
        load_config(env={}, overrides={"api": {"port": "eighty"}})
    assert "api.port" in err.value.message and "overrides" in err.value.message
    with pytest.raises(InvalidInput, match="not found"):
        load_config(tmp_path / "missing.toml", env={})
    with pytest.raises(InvalidInput, match="not valid TOML"):
        load_config(_toml(tmp_path, "[cache\n"), env={})


def test_config_alone_is_the_defaults_and_reads_no_environment(monkeypatch) -> None:
    monkeypatch.setenv("DATAHUB_CACHE_POLICY", "lru")
    assert Config().cache.policy == "tinylfu"
    assert load_config().cache.policy == "lru"  # os.environ when no mapping is given


def test_a_config_survives_a_round_trip_through_its_dump_and_pickle(tmp_path: Path) -> None:
    cfg = load_config(env={"DATAHUB_CACHE_RAM_BYTES": "3MiB"}, overrides={"home": str(tmp_path)})
    assert load_config(env={}, overrides=cfg.model_dump()) == cfg
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    changed = cfg.model_copy(update={"cache": cfg.cache.model_copy(update={"policy": "lru"})})
    assert changed.cache.policy == "lru" and cfg.cache.policy == "tinylfu"


def test_the_settings_reference_is_generated_from_the_model() -> None:
    spec = importlib.util.spec_from_file_location(
        "gen_settings_doc", ROOT / "scripts" / "gen_settings_doc.py"
    )
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    committed = (ROOT / "docs" / "settings.md").read_text()
    assert committed == gen.render(), (
        "docs/settings.md is stale: run .venv/bin/python scripts/gen_settings_doc.py"
    )
    for section, model in [(None, Config), *gen.SECTIONS.items()]:
        for name in model.model_fields:
            if name not in gen.SECTIONS:
                assert f"`{section + '.' if section else ''}{name}`" in committed


def test_the_api_token_variable_is_a_secret_not_a_setting() -> None:
    # DATAHUB_API_TOKEN is read by datahub.api_client for catalog_url = http(s)://...; it
    # used to be taken as a setting "api.token" and failed every CLI command on a node.
    cfg = load_config(None, env={"DATAHUB_API_TOKEN": "dh_secret", "DATAHUB_API_PORT": "9000"})
    assert cfg.api.port == 9000


def test_read_ahead_settings_merged_away_still_load_with_a_warning(tmp_path: Path) -> None:
    """Issue 13 merged the read-ahead knobs: a file or environment that sets an old one
    keeps working (the window ones map to cache.readahead_bytes) and is told what to do."""
    path = _toml(tmp_path, "[cache]\npage-size = '1MiB'\nreadahead_pages = 6\nmax_streams = 2\n")
    with pytest.warns(FutureWarning) as caught:
        config = load_config(path, env={"DATAHUB_CACHE_STREAM_IDLE_SECONDS": "3"})
    assert config.cache.readahead_bytes == 6 * 1024**2
    said = " ".join(str(w.message) for w in caught)
    for old in ("readahead_pages", "max_streams", "stream_idle_seconds"):
        assert f"cache.{old} is deprecated" in said
    assert "cache.readahead_bytes" in said
    with pytest.warns(FutureWarning, match="stream_ahead_bytes"):
        config = load_config(env={"DATAHUB_CACHE_STREAM_AHEAD_BYTES": "32MiB"})
    assert config.cache.readahead_bytes == 32 * 1024**2
    with pytest.warns(FutureWarning):  # the new setting wins over an old one set beside it
        config = load_config(env={}, overrides={"cache": {"readahead_bytes": "8MiB", "readahead_pages": 2}})
    assert config.cache.readahead_bytes == 8 * 1024**2
    with pytest.raises(InvalidInput, match="readahead_pages"):
        load_config(env={"DATAHUB_CACHE_READAHEAD_PAGES": "many"})
