"""Typed configuration: built once at an entry point (CLI, server, mount) and passed down.

Sources, later ones winning: defaults < a TOML file (``--config`` or ``$DATAHUB_CONFIG``,
else ``./datahub.toml`` if present) < environment variables ``DATAHUB_<SECTION>_<FIELD>``
(e.g. ``DATAHUB_CACHE_RAM_BYTES=2GiB``) < explicit overrides from the caller.
No module builds a config at import time.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from datahub.errors import InvalidInput

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
          "KI": 1024, "MI": 1024**2, "GI": 1024**3, "TI": 1024**4}  # fmt: skip


def parse_size(value: int | str) -> int:
    """``"4MiB"`` -> 4194304; ints pass through. Used for every byte budget."""
    if isinstance(value, int):
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise InvalidInput(
            f"invalid size {value!r}: use a number with an optional unit such as 512MiB or 2GB"
        )
    unit = (m[2] or "").upper().removesuffix("B")
    return int(float(m[1]) * _UNITS[unit])


@dataclass
class S3Config:
    """How to reach S3-compatible endpoints (AWS, Ceph RGW, MinIO …)."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None  # None: environment / profile / instance credentials
    secret_access_key: str | None = None
    profile: str | None = None
    path_style: bool = True  # Ceph RGW and MinIO on loopback need path-style addressing
    multipart_threshold: int = 64 * 1024**2
    multipart_chunk: int = 16 * 1024**2
    multipart_concurrency: int = 4  # parts uploaded at once; RAM held <= n * multipart_chunk
    max_attempts: int = 6
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    # One deadline for a whole storage call: all attempts and backoffs (GETs also cap their
    # connect/read timeouts to what is left), so a stalled origin fails a read within it.
    total_timeout: float = 30.0
    max_pool_connections: int = 32


@dataclass
class CacheConfig:
    profile: str = "read-only"  # "read-only" | "write-back"
    page_size: int = 4 * 1024**2
    ram_bytes: int = 1024**3
    disk_dir: str = ""  # "" = <home>/cache/disk
    disk_bytes: int = 20 * 1024**3
    disk_min_free_ratio: float = 0.05
    shared_url: str = ""  # "" = file://<home>/cache/shared ; e.g. s3://cache-bucket/node-a
    shared_bytes: int = 100 * 1024**3
    high_watermark: float = 0.95
    low_watermark: float = 0.80
    # Write-back chunks under 1 MiB on a local-directory shared tier are appended to pack
    # files of this size (docs/writeback.md "Pack files"); 0 = one file per chunk.
    writeback_pack_bytes: int = 32 * 1024**2
    policy: str = "tinylfu"  # eviction policy by name: "lru", "slru", "tinylfu" (scan-resistant)
    origin_concurrency: int = 16
    prefetch_concurrency: int = 16
    readahead_pages: int = 4
    hint_budget_bytes: int = 512 * 1024**2
    # Large objects (docs/cache.md "Streams"): a sequential reader of an object of at least
    # stream_min_bytes is fed by ONE streaming origin read running at most stream_ahead_bytes
    # ahead of it (0 = never stream; readahead runs instead); at most max_streams at once; a
    # stream whose reader has not read for stream_idle_seconds stops.
    stream_min_bytes: int = 64 * 1024**2
    stream_ahead_bytes: int = 64 * 1024**2
    max_streams: int = 4
    stream_idle_seconds: float = 10.0
    # After fill_after_random_reads non-sequential reads of an object of at least
    # stream_min_bytes and at most fill_whole_object_max bytes (0 = never), the whole object
    # is streamed into the cache in the background, at most fill_concurrency at once.
    fill_whole_object_max: int = 4 * 1024**3
    fill_after_random_reads: int = 4
    fill_concurrency: int = 1
    flush_interval: float = 30.0
    journal_dir: str = ""  # "" = <home>/cache/journal


@dataclass
class ApiConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    # Local mode: no authentication. Only allowed when bound to loopback (promise 5).
    local_mode: bool = True
    max_body_bytes: int = 64 * 1024**2
    # A request body must arrive in full within body_read_timeout seconds (else 408 and the
    # connection is closed), so a slow sender cannot hold a worker and a buffer forever.
    body_read_timeout: float = 30.0
    # Bytes of request bodies buffered at once across all requests (Content-Length is
    # reserved up front); past it a request gets 503 busy with Retry-After, never an OOM.
    # Raised to max_body_bytes if smaller, so every body under the limit can get through alone.
    max_inflight_body_bytes: int = 256 * 1024**2


@dataclass
class Config:
    home: str = "./var"
    catalog_url: str = ""  # "" = sqlite:///<home>/catalog.db ; or mongodb://host/db
    objects_url: str = ""  # datahub-managed prefix ("" = file://<home>/objects)
    s3: S3Config = field(default_factory=S3Config)
    cache: CacheConfig = field(default_factory=CacheConfig)
    api: ApiConfig = field(default_factory=ApiConfig)

    # --- derived locations (one place decides every default path) ---------------------------
    @property
    def home_path(self) -> Path:
        return Path(self.home).expanduser().resolve()

    @property
    def resolved_catalog_url(self) -> str:
        return self.catalog_url or f"sqlite:///{self.home_path / 'catalog.db'}"

    @property
    def resolved_objects_url(self) -> str:
        return self.objects_url or (self.home_path / "objects").as_uri()

    @property
    def resolved_disk_dir(self) -> Path:
        return Path(self.cache.disk_dir) if self.cache.disk_dir else self.home_path / "cache" / "disk"

    @property
    def resolved_shared_url(self) -> str:
        return self.cache.shared_url or (self.home_path / "cache" / "shared").as_uri()

    @property
    def resolved_journal_dir(self) -> Path:
        return (
            Path(self.cache.journal_dir) if self.cache.journal_dir else self.home_path / "cache" / "journal"
        )


_SECTIONS = {"s3": S3Config, "cache": CacheConfig, "api": ApiConfig}


def _coerce(kind: Any, value: Any, name: str) -> Any:
    try:
        if kind is bool:
            return (
                value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")
            )
        if kind is int:
            return parse_size(value) if isinstance(value, str) else int(value)
        if kind is float:
            return float(value)
        if kind == (str | None):
            return None if value in (None, "") else str(value)
        return str(value) if kind is str else value
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"invalid configuration value for {name}: {value!r} ({exc})") from exc


def _apply(target: Any, values: Mapping[str, Any], where: str) -> None:
    hints = get_type_hints(type(target))
    names = {f.name for f in dataclasses.fields(target)}
    for key, value in values.items():
        key = key.replace("-", "_")
        if key not in names:
            raise InvalidInput(f"unknown configuration key {where}{key!r}; known: {', '.join(sorted(names))}")
        if key in _SECTIONS and isinstance(value, Mapping):
            _apply(getattr(target, key), value, f"{where}{key}.")
        else:
            setattr(target, key, _coerce(hints[key], value, f"{where}{key}"))


def load_config(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Build a Config from defaults, a TOML file, ``DATAHUB_*`` variables and overrides."""
    env = os.environ if env is None else env
    cfg = Config()
    path = path or env.get("DATAHUB_CONFIG") or ("datahub.toml" if Path("datahub.toml").exists() else None)
    if path:
        try:
            with open(path, "rb") as fh:
                _apply(cfg, tomllib.load(fh), "")
        except FileNotFoundError as exc:
            raise InvalidInput(f"configuration file {path} not found") from exc
        except tomllib.TOMLDecodeError as exc:
            raise InvalidInput(f"configuration file {path} is not valid TOML: {exc}") from exc
    for var, value in env.items():
        if not var.startswith("DATAHUB_") or var in ("DATAHUB_CONFIG",) or var.startswith("DATAHUB_TEST_"):
            continue
        rest = var[len("DATAHUB_") :].lower()
        section, _, key = rest.partition("_")
        if section in _SECTIONS and key:
            _apply(getattr(cfg, section), {key: value}, f"{section}.")
        elif rest in {f.name for f in dataclasses.fields(cfg)} and rest not in _SECTIONS:
            _apply(cfg, {rest: value}, "")
    if overrides:
        _apply(cfg, overrides, "")
    return cfg
