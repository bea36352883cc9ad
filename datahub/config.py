"""Typed configuration: built once at an entry point (CLI, server, mount) and passed down.

Sources, later ones winning: defaults < a TOML file (``--config`` or ``$DATAHUB_CONFIG``,
else ``./datahub.toml`` if present) < environment variables ``DATAHUB_<SECTION>_<FIELD>``
(e.g. ``DATAHUB_CACHE_RAM_BYTES=2GiB``) < explicit overrides from the caller.
No module builds a config at import time.

The models are pydantic's (coercion and validation are the library's); what is ours: the
sources and their merging (``load_config``, a few dozen lines: pydantic-settings did it before
and cost about 0.3 CPU-s of import in every ``datahub`` process), the size syntax
(``parse_size``), the ``DATAHUB_*`` names, and errors that name the setting and the source it
came from. Every setting's description is the
docstring under its field; ``scripts/gen_settings_doc.py`` writes them to docs/settings.md.
``Config()`` alone is the defaults: only ``load_config`` reads files and the environment.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tomllib
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from datahub.errors import InvalidInput

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
          "KI": 1024, "MI": 1024**2, "GI": 1024**3, "TI": 1024**4}  # fmt: skip
ENV_PREFIX = "DATAHUB_"


def _size(value: Any) -> Any:
    """``"4MiB"`` -> 4194304 (ValueError if it is not a size); non-strings pass through."""
    if not isinstance(value, str):
        return value
    m = _SIZE.match(value)
    if not m:
        raise ValueError(f"invalid size {value!r}: use a number with an optional unit such as 512MiB or 2GB")
    unit = (m[2] or "").upper().removesuffix("B")
    return int(float(m[1]) * _UNITS[unit])


def parse_size(value: int | str) -> int:
    """``"4MiB"`` -> 4194304; ints pass through. Used for every byte budget."""
    try:
        return int(_size(value))
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc


def _none_if_empty(value: Any) -> Any:
    return None if value == "" else value


def _json_object(value: Any) -> Any:
    """A section given as one JSON object in an environment variable -> its mapping ("" = unset)."""
    if not isinstance(value, str):
        return value
    if not value.strip():
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise ValueError("expected a JSON object of [s3] settings") from exc


Size = Annotated[int, BeforeValidator(_size)]
"""A byte count: an int, or a string with an optional unit (``64MiB``, ``1G``, ``512KB``)."""
OptionalStr = Annotated[str | None, BeforeValidator(_none_if_empty)]
"""A string where empty means unset (so ``DATAHUB_S3_REGION=`` clears it)."""


def _dashes_to_underscores(data: Any) -> Any:
    """``-`` in setting names reads as ``_`` (TOML users write both), at every level."""
    if isinstance(data, Mapping):
        return {str(k).replace("-", "_"): v for k, v in data.items()}
    return data


class _Section(BaseModel):
    """A ``[section]`` of settings: unknown keys are errors, ``-`` in keys reads as ``_``."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _dashes(cls, data: Any) -> Any:
        return _dashes_to_underscores(data)


class S3Config(_Section):
    """How to reach S3-compatible endpoints (AWS, Ceph RGW, MinIO …)."""

    endpoint_url: OptionalStr = None
    """Endpoint URL for Ceph RGW, MinIO …; unset: AWS."""
    region: OptionalStr = None
    """Region name; unset: boto's default chain."""
    access_key_id: OptionalStr = None
    """Access key; unset: environment / profile / instance credentials (boto's chain)."""
    secret_access_key: OptionalStr = None
    """Secret key belonging to ``access_key_id``."""
    profile: OptionalStr = None
    """Named profile in ~/.aws/config (used when no access key is set)."""
    path_style: bool = True
    """Path-style addressing; Ceph RGW and MinIO on loopback need it (false: virtual-hosted when the bucket name allows)."""
    multipart_threshold: Size = 64 * 1024**2
    """Objects up to this size are one PutObject; larger ones are multipart uploads."""
    multipart_chunk: Size = 16 * 1024**2
    """Part size of multipart uploads."""
    multipart_concurrency: int = 4
    """Parts uploaded at once; RAM held <= n * multipart_chunk."""
    max_attempts: int = 6
    """Attempts per storage call (transient errors are retried with backoff)."""
    connect_timeout: float = 10.0
    """Seconds to connect, per attempt."""
    read_timeout: float = 60.0
    """Seconds without a byte before a read fails, per attempt."""
    total_timeout: float = 30.0
    """One deadline for a whole storage call: all attempts and backoffs (GETs also cap their connect/read timeouts to what is left), so a stalled origin fails a read within it."""
    max_pool_connections: int = 256
    """Keep-alive connections per endpoint (as many as cache.origin_max_concurrency, so an adaptive limit that grew does not open a new connection per request)."""


DEPRECATED_CACHE_SETTINGS = {
    "readahead_pages": "set cache.readahead_bytes (readahead_pages x page_size is used for now)",
    "stream_ahead_bytes": "set cache.readahead_bytes (its value is used for now)",
    "max_streams": "ignored; the prefetcher runs up to 4 streams at once",
    "stream_idle_seconds": "ignored; a stream stops after 10 s without a read",
    "fill_after_random_reads": "ignored; a fill starts after 4 out-of-order reads",
    "fill_concurrency": "ignored; one whole-object fill runs at a time",
}
"""Read-ahead settings merged away by issue 13 (one prefetcher): accepted, warned about."""


def _deprecated_window(old: str, value: Any, page_size: Any) -> int:
    """``readahead_bytes`` from a deprecated ``readahead_pages`` / ``stream_ahead_bytes``."""
    try:
        if old == "readahead_pages":
            return max(0, int(value)) * int(_size(page_size if page_size is not None else 4 * 1024**2))
        return int(_size(value))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid deprecated cache.{old}: {value!r}") from exc


class CacheConfig(_Section):
    """The tiered read cache and the write-back workspace."""

    profile: str = "read-only"
    """"read-only" or "write-back"."""
    page_size: Size = 4 * 1024**2
    """Cache page size: the unit of caching and of origin reads."""
    ram_bytes: Size = 1024**3
    """RAM tier budget (0 = no RAM tier)."""
    disk_dir: str = ""
    """Disk tier directory ("" = <home>/cache/disk; if unusable: logged, no disk tier)."""
    disk_bytes: Size = 20 * 1024**3
    """Disk tier budget (0 = no disk tier)."""
    disk_min_free_ratio: float = 0.05
    """Leave this share of the file system free."""
    shared_url: str = ""
    """Shared tier root, e.g. s3://cache-bucket/node-pool ("" = none for the read path; write-back then uses file://<home>/cache/shared)."""
    shared_bytes: Size = 100 * 1024**3
    """Shared tier budget."""
    shared_s3: Annotated[S3Config | None, BeforeValidator(_json_object)] = None
    """How the shared tier reaches S3: the [s3] settings as a [cache.shared_s3] table (in the environment, one JSON object); unset: [s3]. A CSI volume's mount gets the plugin's own here, whatever its Secret gives [s3] (docs/csi.md "Credentials")."""
    high_watermark: float = 0.95
    """Background eviction starts when a tier is this full (0 < low_watermark <= high_watermark <= 1)."""
    low_watermark: float = 0.80
    """Background eviction stops when a tier is down to this."""
    writeback_pack_bytes: Size = 32 * 1024**2
    """Write-back chunks under 1 MiB on a local-directory shared tier are appended to pack files of this size (docs/writeback.md "Pack files"); 0 = one file per chunk."""
    policy: str = "tinylfu"
    """Eviction policy by name: "lru", "slru", "tinylfu" (scan-resistant)."""
    origin_concurrency: int = 16
    """Origin (S3) requests in flight at the start; the origin scheduler adapts it to measured latency (docs/cache.md "Origin scheduler"), never below this unless the store throttles."""
    origin_max_concurrency: int = 256
    """Most origin requests in flight the scheduler may grow to (reads; write-back uploads have their own limit up to the same)."""
    origin_max_inflight_bytes: Size = 512 * 1024**2
    """Most bytes of origin read bodies in flight (bounds the memory of many parallel large reads)."""
    stall_memory_seconds: float = 5.0
    """Seconds an object whose origin read timed out fails at once instead of being asked again (unless the origin answers another request meanwhile; ``datahub.cache.stall_memory``): the kernel and DataLoaders re-ask a failed read at once, and each would wait a whole ``s3.total_timeout`` again; 0 = never remembered. The test suite sets it short: its readers retrying across a stall waited the memory out."""
    prefetch_concurrency: int = 128
    """Warm-up workers (``datahub prefetch``, mount warm-up); they may block in the origin scheduler, which decides how many of their requests run at once. Hint and readahead use up to 8."""
    warmup_idle_seconds: float = 30.0
    """Warm-up fetches a large object (more than 4 pages) no reader has opened only once readers have been idle this long (docs/cache.md "Warm-up"); 0 = at once."""
    bucket_warmup_objects: int = 5000
    """A bucket snapshot mounted with neither --prefetch nor --no-prefetch is warmed whole once listed if it fits below the low watermark and has at most this many objects (docs/cache.md "Warm-up of a bucket snapshot"); 0 = never at mount."""
    bucket_list_whole_objects: int = 5000
    """The first mount of a bucket lists it whole (its snapshot) up to this many objects; past that it lists each directory when a reader first needs it, and takes the whole listing as the snapshot only once readers have opened bucket_warmup_opens files (docs/fuse.md "Listing a large bucket by directory"); 0 = always whole."""
    bucket_warmup_opens: int = 32
    """Otherwise this many distinct cold opens within bucket_warmup_window_seconds start a warm-up of the directory that holds them, if it fits."""
    bucket_warmup_window_seconds: float = 30.0
    """The window of bucket_warmup_opens."""
    bucket_warmup_idle_seconds: float = 120.0
    """An automatic warm-up of a bucket snapshot stops once the mount's readers have been idle this long (a later pattern resumes it)."""
    readahead_bytes: Size = 64 * 1024**2
    """How far the prefetcher reads ahead of a sequential reader (docs/cache.md "Read-ahead"): the window of a large object's stream, and of the readahead runs (one GET each) of smaller objects; 0 = no read-ahead."""
    hint_budget_bytes: Size = 512 * 1024**2
    """Hinted bytes fetched but not yet read; also bounds the readahead queue."""
    stream_min_bytes: Size = 64 * 1024**2
    """Objects at least this big are read ahead by ONE streaming origin read per sequential reader (docs/cache.md "Streams"); 0 = never stream, readahead runs instead."""
    fetch_workers: int = 0
    """Worker processes a mount daemon starts to fetch cold pages from the origin and write them to the disk tier on other cores (docs/cache.md "Fetch worker processes"); -1 = one fewer than the cores (at least 1, at most 4); 0 = the daemon fetches them itself (the default: on 2 cores one worker reads 1.1-1.3x the files/s from a local directory, but from moto it reads no more and costs 12-29 % more CPU per file; docs/benchmarks.md "Fetch worker processes")."""
    fill_whole_object_max: Size = 4 * 1024**3
    """Largest object filled whole (streamed into the cache in the background) after 4 out-of-order reads of it; also at most half the largest local tier; 0 = never."""

    @model_validator(mode="before")
    @classmethod
    def _deprecated(cls, data: Any) -> Any:
        """Settings merged into ``readahead_bytes`` or made internal still load, with a warning."""
        if not isinstance(data, Mapping):
            return data
        data = _dashes_to_underscores(data)
        for old, hint in DEPRECATED_CACHE_SETTINGS.items():
            if old not in data:
                continue
            value = data.pop(old)
            # FutureWarning: a deprecation meant for users (shown by default, unlike DeprecationWarning)
            warnings.warn(f"setting cache.{old} is deprecated: {hint}", FutureWarning, stacklevel=2)
            if old in ("readahead_pages", "stream_ahead_bytes") and "readahead_bytes" not in data:
                data["readahead_bytes"] = _deprecated_window(old, value, data.get("page_size"))
        return data

    maintain_interval: float = 2.0
    """Seconds between the cache's maintenance rounds: pins reloaded, each tier's upkeep, and the stats snapshot that ``datahub cache stats`` and /metrics read (eviction does not wait for a round: a full tier wakes it). The test suite sets it short: its polls of a mount's counters waited up to a round for a fresh snapshot."""
    read_mode_tick_seconds: float = 1.0
    """Seconds between a read-only mount's ticks: the automatic read mode's evidence (its decision needs a row of warm ticks, ``--auto-read-mode``), page files another process evicted let go, opens answered in C counted as cache hits. The test suite sets it short: its waits for a decision or a sweep waited whole ticks."""
    read_mode_drain_seconds: float = 5.0
    """The longest an automatic read mode's switch to zero-message opens waits for the passthrough handles open at its start to close before it is given up (docs/fuse.md)."""
    flush_interval: float = 30.0
    """Seconds between write-back flushes."""
    journal_dir: str = ""
    """Write-back journal directory ("" = <home>/cache/journal)."""


class ApiConfig(_Section):
    """The HTTP API server."""

    host: str = "127.0.0.1"
    """Address the API binds to."""
    port: int = 8080
    """Port the API binds to."""
    local_mode: bool = True
    """Local mode: no authentication. Only allowed when bound to loopback (promise 5)."""
    max_body_bytes: Size = 64 * 1024**2
    """Largest request body."""
    body_read_timeout: float = 30.0
    """A request body must arrive in full within this many seconds (else 408 and the connection is closed), so a slow sender cannot hold a worker and a buffer forever."""
    max_inflight_body_bytes: Size = 256 * 1024**2
    """Bytes of request bodies buffered at once across all requests (Content-Length is reserved up front); past it a request gets 503 busy with Retry-After, never an OOM. Raised to max_body_bytes if smaller."""
    metrics_public: bool = False
    """Serve /metrics without a token when authentication is on (--auth); by default it needs the token of a global admin or of a principal in api.metrics_principals then, since its figures name datasets, routes, mounts and the buckets they read. Local mode serves it to this machine's callers either way."""
    metrics_principals: str = ""
    """Principals (space-separated, e.g. "prometheus") whose tokens may read /metrics under --auth besides global admins; any other token is 403 there, since the figures name datasets, routes, mounts and the buckets they read. Give the scraper a token of its own principal (datahub token create --principal prometheus), not an admin's."""
    commit_sources: str = ""
    """URL prefixes (space-separated, each like s3://bucket/team/, ending in /) under which any writer may commit record URLs to any dataset over HTTP, besides each dataset's own sources; "" = none (docs/api.md, Record URLs)."""
    secure_cookies: bool = False
    """Mark every sign-in cookie of the dataset browser and LabelX Secure (__Host- names), whatever scheme a request arrives with: set it when a TLS-terminating proxy serves the pages over https and reaches the server over plain http (datahub serve --secure-cookies; docs/browser.md, "Access (as in the API)")."""


class CatalogConfig(_Section):
    """How calls to a remote catalog (an http(s):// ``catalog_url``, a datahub API server) are
    retried: a setting, not a constant, so a node may wait longer for a restarting server, and a
    test of an unreachable catalog need not wait out production's schedule."""

    retry_attempts: int = Field(default=5, ge=1)
    """Attempts of one call to a remote (http(s)://) catalog before it fails with catalog_unavailable (timeouts, refused connections, 5xx, 429)."""
    retry_backoff: float = Field(default=0.2, ge=0)
    """Seconds before the first retry of a remote catalog call, doubled before each next one (a server's Retry-After, up to 30 s, wins when longer)."""
    retry_budget: float = Field(default=60.0, gt=0)
    """Seconds one remote catalog call may spend on all its attempts and pauses; no retry starts past it."""


class Config(BaseModel):
    """All settings; sections ``s3``, ``cache``, ``api``, ``catalog``. Attribute access as before."""

    model_config = ConfigDict(extra="forbid")

    home: str = "./var"
    """Root of every default location (catalog, objects, cache, journal)."""
    catalog_url: str = ""
    """Catalog: "" = sqlite:///<home>/catalog.db; or mongodb://host/db."""
    objects_url: str = ""
    """Datahub-managed object prefix ("" = file://<home>/objects)."""
    objects_s3: Annotated[S3Config | None, BeforeValidator(_json_object)] = None
    """How URLs under an s3:// objects_url are reached: the [s3] settings as an [objects_s3] table (in the environment, one JSON object); unset: [s3]. A CSI dataset or workspace volume's mount gets the plugin's own here, whatever its Secret gives [s3]; a bucket volume's never (docs/csi.md "Credentials")."""
    s3: S3Config = Field(default_factory=S3Config)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    api: ApiConfig = Field(default_factory=ApiConfig)
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)

    @model_validator(mode="before")
    @classmethod
    def _dashes(cls, data: Any) -> Any:
        return _dashes_to_underscores(data)

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


SECTIONS: dict[str, type[_Section]] = {
    "s3": S3Config,
    "cache": CacheConfig,
    "api": ApiConfig,
    "catalog": CatalogConfig,
}


def setting_docs(model: type[BaseModel]) -> dict[str, str]:
    """The docstring under each field of ``model``: what the settings reference says of it.

    Read from the source when asked (scripts/gen_settings_doc.py), not by pydantic's
    ``use_attribute_docstrings``, which parsed this module's source in every process that
    imported it (about 35 ms of each ``datahub`` command's start).
    """
    import ast
    import inspect
    import textwrap

    body = ast.parse(textwrap.dedent(inspect.getsource(model))).body[0].body
    docs = {}
    for node, after in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def env_name(section: str | None, field: str) -> str:
    """The environment variable of a setting: ``DATAHUB_CACHE_RAM_BYTES``, ``DATAHUB_HOME``."""
    return f"{ENV_PREFIX}{section.upper()}_{field.upper()}" if section else f"{ENV_PREFIX}{field.upper()}"


def _normalised(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Overrides with ``-`` read as ``_`` in top-level keys (sections do it themselves)."""
    return {str(k).replace("-", "_"): v for k, v in overrides.items()}


def _source(
    loc: tuple[Any, ...], path: str | None, env: Mapping[str, str], overrides: Mapping[str, Any]
) -> str:
    """Where the value at ``loc`` came from, the highest-priority source that has it."""
    node: Any = overrides
    for part in loc:
        node = node.get(part, node.get(str(part).replace("_", "-"))) if isinstance(node, Mapping) else None
    if node is not None:
        return "the caller's overrides"
    var = env_name(str(loc[0]), str(loc[1])) if len(loc) >= 2 else env_name(None, str(loc[0]))
    if var in env:
        return f"environment variable {var}"
    return f"configuration file {path}" if path else "the defaults"


def _error(
    exc: ValidationError, path: str | None, env: Mapping[str, str], overrides: Mapping[str, Any]
) -> InvalidInput:
    """One InvalidInput naming each bad setting, its source and what is wrong."""
    problems = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        name = ".".join(str(p) for p in loc)
        where = _source(loc, path, env, overrides)
        if err["type"] == "extra_forbidden":
            model = SECTIONS.get(str(loc[0])) if len(loc) > 1 else Config
            known = ", ".join(sorted(model.model_fields)) if model else ""
            problems.append(f"unknown configuration key {name!r} in {where}; known: {known}")
        else:
            reason = str(err["msg"]).removeprefix("Value error, ")
            # a setting that may hold a key is never shown
            secret = {"shared_s3", "objects_s3", "secret_access_key"} & {str(p) for p in loc}
            shown = "(not shown)" if secret else repr(err.get("input"))
            problems.append(f"invalid configuration value for {name} in {where}: {shown} ({reason})")
    return InvalidInput("; ".join(problems))


def _env_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The settings ``DATAHUB_*`` variables give, nested by section.

    Names are case-insensitive and split once after the section: ``DATAHUB_CACHE_RAM_BYTES``
    is ``cache.ram_bytes``, ``DATAHUB_CATALOG_URL`` the top-level ``catalog_url``. A whole
    section may be one JSON object (``DATAHUB_S3='{"region": "x"}'``); its single-setting
    variables win over it. Variables that name no top-level setting or section are not
    settings (``DATAHUB_CONFIG``, ``DATAHUB_LOG``); ``DATAHUB_TEST_*`` belong to the test suite
    and ``DATAHUB_API_TOKEN`` is a secret that datahub.api_client reads itself.
    """
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    prefix = ENV_PREFIX.lower()
    for key, value in env.items():
        name = key.lower()
        if not name.startswith(prefix) or name.startswith(f"{prefix}test_") or name == f"{prefix}api_token":
            continue
        name = name[len(prefix) :]
        if name in SECTIONS:
            # the value is never echoed: a whole section may hold keys (DATAHUB_S3's
            # secret_access_key), and this message reaches terminals and logs
            try:
                top[name] = json.loads(value)
                why = "" if isinstance(top[name], dict) else f"it is a JSON {type(top[name]).__name__}"
            except json.JSONDecodeError as exc:
                why = f"it is not valid JSON: {exc.msg} at character {exc.pos}"
            except ValueError:
                why = "it is not valid JSON"
            if why:
                raise InvalidInput(
                    f"invalid configuration value for {name} in environment variable {key} (value not "
                    f"shown): {why}; a whole section is one JSON object, or set one setting, e.g. "
                    f"{env_name(name, 'FIELD')}"
                ) from None
        elif name in Config.model_fields:
            top[name] = value
        else:
            section, _, field = name.partition("_")
            if section in SECTIONS:
                nested.setdefault(section, {})[field] = value
    return _merged(top, nested)


def _merged(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Later layers win, key by key inside sections; ``-`` in keys reads as ``_`` throughout."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in _dashes_to_underscores(layer).items():
            if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
                out[key] = _merged(out[key], value)
            elif isinstance(value, Mapping):
                out[key] = _dashes_to_underscores(value)
            else:
                out[key] = value
    return out


def load_config(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Build a Config from defaults, a TOML file, ``DATAHUB_*`` variables and overrides."""
    env = os.environ if env is None else env
    found = path or env.get("DATAHUB_CONFIG") or ("datahub.toml" if Path("datahub.toml").exists() else None)
    toml = None if found is None else os.fspath(found)
    from_file: dict[str, Any] = {}
    if toml is not None:
        try:
            with open(toml, "rb") as fh:
                from_file = tomllib.load(fh)
        except FileNotFoundError as exc:
            raise InvalidInput(f"configuration file {toml} not found") from exc
        except tomllib.TOMLDecodeError as exc:
            raise InvalidInput(f"configuration file {toml} is not valid TOML: {exc}") from exc
    given = _normalised(overrides or {})
    try:
        return Config(**_merged(from_file, _env_settings(env), given))
    except ValidationError as exc:
        raise _error(exc, toml, env, given) from None


def init_command(config: Config, path: Path) -> str:
    """The ``datahub init`` that creates the SQLite catalog at ``path``, as a message names it.

    Why: it named ``--home HOME`` alone, which creates HOME/catalog.db; for a catalog chosen
    elsewhere (``--catalog sqlite:///other.db``) that command made another file, and the command
    that was refused was refused again with the same message (newuser71)."""
    if path == config.home_path / "catalog.db":
        return f"datahub --home {shlex.quote(str(config.home_path))} init"
    return f"datahub --home {shlex.quote(str(config.home_path))} --catalog {shlex.quote(f'sqlite:///{path}')} init"
