"""datahub.config's own source loader (it replaced pydantic-settings, whose import cost every
``datahub`` process about 0.3 CPU-s): how ``DATAHUB_*`` variables, a TOML file and overrides
become settings beyond what tests/test_config.py covers."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.config import load_config
from datahub.errors import InvalidInput


def test_a_whole_section_as_one_json_variable_loses_to_its_single_settings() -> None:
    env = {"DATAHUB_S3": '{"region": "r1", "max_attempts": 2}', "DATAHUB_S3_REGION": "r2"}
    cfg = load_config(env=env)
    assert cfg.s3.region == "r2" and cfg.s3.max_attempts == 2


@pytest.mark.parametrize("value", ["not json", "[1, 2]", "false", ""])
def test_a_section_variable_that_is_not_a_json_object_is_an_error_naming_it(value: str) -> None:
    # pydantic-settings raised its own SettingsError here: a bare traceback to the user
    with pytest.raises(InvalidInput) as err:
        load_config(env={"DATAHUB_CACHE": value})
    assert "DATAHUB_CACHE" in err.value.message and "JSON object" in err.value.message
    assert "DATAHUB_CACHE_FIELD" in err.value.message


def test_names_are_case_insensitive_and_other_datahub_variables_are_not_settings() -> None:
    env = {
        "datahub_cache_policy": "lru",
        "DataHub_Home": "/h",
        "DATAHUB_LOG": "debug",  # the CLI's log level
        "DATAHUB_CONFIG_DIR": "/x",  # neither a setting nor a section
        "DATAHUB_TEST_CEPH_ENV": "/t",  # the test suite's
        "DATAHUB_API_TOKEN": "dh_secret",  # datahub.api_client's secret
        "OTHER_CACHE_POLICY": "slru",
    }
    cfg = load_config(env=env)
    assert cfg.cache.policy == "lru" and cfg.home == "/h"


def test_dashes_and_underscores_are_one_key_across_sources(tmp_path: Path) -> None:
    path = tmp_path / "datahub.toml"
    path.write_text('[cache]\npage-size = "1MiB"\nram_bytes = "2MiB"\n')
    cfg = load_config(path, env={"DATAHUB_CACHE_PAGE_SIZE": "2MiB"}, overrides={"cache": {"ram-bytes": 5}})
    assert cfg.cache.page_size == 2 * 1024**2  # the environment beats the file, whatever the spelling
    assert cfg.cache.ram_bytes == 5  # the overrides beat the file


def test_an_empty_file_and_environment_are_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "datahub.toml"
    path.write_text("")
    assert load_config(path, env={}) == load_config(None, env={}, overrides={})


@pytest.mark.parametrize(
    "value",
    ['{"secret_access_key": "SECRETKEY123",', '["SECRETKEY123"]', '"SECRETKEY123"'],
)
def test_a_bad_whole_section_variable_never_echoes_its_value(value: str) -> None:
    """A whole section may hold keys (sharedcreds11's finding: a malformed DATAHUB_S3 put its
    secret_access_key into the error, which reaches terminals and logs)."""
    with pytest.raises(InvalidInput) as err:
        load_config(env={"DATAHUB_S3": value})
    message = err.value.message
    assert "SECRETKEY123" not in message and "DATAHUB_S3" in message and "value not shown" in message
