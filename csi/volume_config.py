"""The config file a volume's mount process runs with: the plugin's Config plus the volume's secrets.

The secrets set ``[s3]``, which serves the volume's own objects; the node's shared tier is
the platform's, so ``cache.shared_s3`` always holds the plugin's S3 settings (its own
``cache.shared_s3``, else its ``[s3]``), whatever the secrets say. So is the platform's objects
bucket (``objects_url``: blobs, pack shards, workspaces' flush targets): a dataset or workspace
volume, whose publish the catalog authorised, gets the plugin's settings as ``objects_s3``
(its own ``objects_s3``, else its ``[s3]``); a bucket volume, which names its bucket itself,
never does, even when that bucket is the platform's.

Credentials reach the mount process only through this file: mode 0600 inside a 0700
directory of the plugin's state dir, never under the target path (the pod sees the target)
and never on a command line (``ps`` shows those). It is written atomically, and read back
with :func:`datahub.config.load_config` so the plugin resolves versions with exactly the
configuration the mount process will use.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from datahub.config import Config, load_config


def _value(value: Any) -> str:
    if isinstance(value, Mapping):  # an inline table: [cache]'s shared_s3
        return "{" + ", ".join(f"{k} = {_value(v)}" for k, v in value.items() if v is not None) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def to_toml(data: Mapping[str, Any]) -> str:
    """A flat TOML document: top-level keys, then one ``[section]`` per nested mapping."""
    lines = [f"{k} = {_value(v)}" for k, v in data.items() if v is not None and not isinstance(v, Mapping)]
    for section, values in data.items():
        if isinstance(values, Mapping):
            lines.append(f"\n[{section}]")
            lines += [f"{k} = {_value(v)}" for k, v in values.items() if v is not None]
    return "\n".join(lines) + "\n"


def write_volume_config(
    base: Config, overrides: Mapping[str, Any], path: Path, *, catalog_authorised: bool
) -> Config:
    """Write ``base`` + ``overrides`` (from secrets/volume kind) to ``path`` (0600); return it loaded.

    ``catalog_authorised``: the volume is a dataset or workspace, whose publish the catalog's
    access check decides; only such a volume reaches ``objects_url`` with the plugin's keys."""
    data = base.model_dump()
    data["home"] = str(base.home_path)
    for key, value in overrides.items():
        if isinstance(value, Mapping):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return _write(base, data, path, catalog_authorised)


def renew_platform_keys(base: Config, path: Path, *, catalog_authorised: bool) -> Config:
    """Rewrite the volume config at ``path`` with the plugin's current shared-tier and
    objects-bucket S3 settings before its mount process is started again: a file written
    before ``cache.shared_s3`` or ``objects_s3`` existed (the secrets' keys reached those
    buckets), or before the plugin's keys were rotated, would otherwise keep them. The
    secrets in it stay as they are."""
    return _write(base, load_config(path, env={}).model_dump(), path, catalog_authorised)


def _write(base: Config, data: dict[str, Any], path: Path, catalog_authorised: bool) -> Config:
    data["cache"]["shared_s3"] = (base.cache.shared_s3 or base.s3).model_dump()  # never the secrets'
    # the platform's objects bucket: the plugin's keys for what the catalog authorised, and
    # for a bucket volume nothing (to_toml leaves None out), even if the plugin sets objects_s3
    data["objects_s3"] = (base.objects_s3 or base.s3).model_dump() if catalog_authorised else None
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(to_toml(data))
    os.replace(tmp, path)
    return load_config(path, env={})
