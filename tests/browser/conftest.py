"""Browser fixtures: a real SQLite catalog, real JPEGs in a file:// store, the app ``datahub
serve`` builds (API + browser), read through the real cache.

``pets`` v1 is 24 JPEGs in folders (``train/cat``, ``train/dog``, ``val``) plus a text file;
v2 relabels two records, replaces one picture, deletes one and adds one, and is tagged
``golden``. Hostile strings (HTML and script) sit in a description, a message, keys, labels.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn
from fastapi.testclient import TestClient
from PIL import Image

from datahub.catalog import Delete, Patch, Put, Record, open_catalog
from datahub.cli.serve_cmd import build_app
from datahub.config import Config, load_config
from datahub.storage import StoreRegistry, open_store
from tests.ram import ram_dir
from tests.servers import free_port

EVIL = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'&"
EVIL_KEY = "val/<img src=x onerror=alert(3)>&'\".jpg"


@dataclass
class Env:
    config: Config
    catalog: object
    stores: StoreRegistry
    objects: object
    tmp: Path


def jpeg(color: tuple[int, int, int], size: tuple[int, int] = (160, 120)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "JPEG")
    return out.getvalue()


def put(objects, key: str, data: bytes, **fields) -> Put:
    """A record whose bytes are a new object (named by content), as a by-reference import of
    a changed file would be: the old version's object stays readable."""
    name = "o/" + hashlib.sha256(data).hexdigest()[:24]
    info = objects.put(name, data)
    return Put(Record(key, objects.url_for(name), info.etag, info.size, **fields))


def make_env(
    tmp: Path, *, local_mode: bool = True, s3_endpoint: str | None = None, data: Path | None = None
) -> Env:
    """A home in ``tmp``; the catalog and the objects in ``data`` (``tmp`` when None)."""
    data = tmp if data is None else data
    overrides: dict = {
        "home": str(tmp / "var"),
        "catalog_url": f"sqlite:///{data / 'catalog.db'}",  # pack's workers open the same catalog
        "api": {"local_mode": local_mode},
    }
    if s3_endpoint is not None:
        overrides["s3"] = {"endpoint_url": s3_endpoint}
    config = load_config(env={}, overrides=overrides)
    objects = open_store((data / "objects").as_uri(), config)
    catalog = open_catalog(config.resolved_catalog_url)
    return Env(config, catalog, StoreRegistry(config), objects, tmp)


def fill_pets(env: Env) -> None:
    c, o = env.catalog, env.objects
    c.create_dataset("pets", description=f"pet pictures {EVIL}", owner="alice")
    changes = []
    for i in range(10):
        changes.append(
            put(o, f"train/cat/{i:03d}.jpg", jpeg((200, 40 + i * 10, 40)), labels={"class": "cat"})
        )
        changes.append(
            put(o, f"train/dog/{i:03d}.jpg", jpeg((40, 40 + i * 10, 200)), labels={"class": "dog"})
        )
    for i in range(3):
        changes.append(
            put(o, f"val/{i:03d}.jpg", jpeg((90, 200, 90)), labels={"class": "bird"}, meta={"split": "val"})
        )
    changes.append(
        put(o, EVIL_KEY, jpeg((10, 10, 10)), labels={"class": EVIL, EVIL: "x"}, meta={"note": EVIL})
    )
    changes.append(put(o, "README.txt", b"plain text, not an image\n"))
    c.commit("pets", changes, message=f"import {EVIL}", author="alice")
    c.commit(
        "pets",
        [
            Patch("train/cat/000.jpg", labels={"class": "dog", "checked": True}),
            Patch("val/000.jpg", meta={"split": "test"}),
            put(o, "train/dog/001.jpg", jpeg((250, 250, 0)), labels={"class": "dog"}),
            Delete("train/cat/009.jpg"),
            put(o, "train/cat/010.jpg", jpeg((0, 0, 0)), labels={"class": "cat"}),
        ],
        message="relabel and fix",
        author="bob",
    )
    c.tag("pets", "golden", 2)


@contextmanager
def pets_env(tmp_path: Path, *, local_mode: bool = True, in_ram: bool = False) -> Iterator[Env]:
    """A home with the pets dataset, closed afterwards. ``in_ram``: its catalog and objects in
    ``ram_dir`` (which says why)."""
    with (
        ram_dir(tmp_path) if in_ram else nullcontext(tmp_path) as data,
        _closing_env(make_env(tmp_path, local_mode=local_mode, data=data)) as e,
    ):
        fill_pets(e)
        yield e


@contextmanager
def _closing_env(e: Env) -> Iterator[Env]:
    try:
        yield e
    finally:
        e.stores.close()
        e.catalog.close()


def token_sign_in(c, token: str) -> None:
    """On the sign-in page already shown: type ``token``, sign in, and wait to leave the page
    (every browser test that signs in with a token does it so)."""
    c.find("#token").send_keys(token)
    c.find("#sign-in").click()
    c.wait_for_url(lambda url: "/login" not in url)


@contextmanager
def signed_in_pets(c, tmp_path: Path, user: str = "alice") -> Iterator[tuple[Env, str]]:
    """The pets dataset's browser served over HTTP, ``c`` (Chromium) signed in with a token
    of ``user``: the environment and the base URL."""
    from datahub.api.tokens import issue_token

    with (
        pets_env(tmp_path, local_mode=False, in_ram=True) as env,
        browser_app(env) as app,
        serving(app) as base,
    ):
        c.visit(f"{base}/login")
        token_sign_in(c, issue_token(env.catalog.store, user)[0])
        yield env, base


@contextmanager
def browser_app(env: Env):
    """``datahub serve``'s app over ``env`` (without LabelX), its cache closed afterwards."""
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=False)
    try:
        yield app
    finally:
        cache.close()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    with pets_env(tmp_path, in_ram=True) as e:
        yield e


@pytest.fixture
def app(env: Env):
    with browser_app(env) as served:
        yield served


@pytest.fixture
def client(app) -> Iterator[TestClient]:
    with TestClient(app, base_url="http://127.0.0.1") as c:
        yield c


@contextmanager
def serving(app, tls: tuple[Path, Path] | None = None, host: str = "127.0.0.1") -> Iterator[str]:
    """The app on a loopback port (on ``host``: every address with ``0.0.0.0``), served by
    uvicorn in a thread (as ``datahub serve`` does); over https with ``tls`` (certificate and
    key files)."""
    port = free_port()
    certs = {} if tls is None else {"ssl_certfile": str(tls[0]), "ssl_keyfile": str(tls[1])}
    srv = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", **certs))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    started = threading.Event()
    for _ in range(1200):  # up to 60 s on a loaded machine
        if srv.started:
            break
        started.wait(0.05)
    assert srv.started, "uvicorn did not start"
    try:
        yield f"{'http' if tls is None else 'https'}://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=30)


@pytest.fixture
def server(app) -> Iterator[str]:
    with serving(app) as url:
        yield url


@pytest.fixture(scope="package")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One headless Chromium for this package's tests: a start takes seconds (11 s at load 27
    on the 2-core machine). ``chrome`` (tests/browser/chrome.py) resets it for each test."""
    from tests.browser.chrome import Chrome  # skips when selenium is missing, as before

    c = Chrome(tmp_path_factory.mktemp("shots"))
    try:
        yield c
    finally:
        c.close()
