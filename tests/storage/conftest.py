"""One ``backend`` fixture that runs the contract suite over memory, local, moto, Ceph RGW and RADOS."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from datahub.config import Config, load_config
from datahub.storage import ObjectStore, drop_memory_space, open_store
from tests.servers import S3Endpoint


@dataclass
class Backend:
    """Opens stores of one kind; S3 roots get a prefix so prefix handling is always exercised."""

    name: str
    root_url: str
    config: Config
    endpoint: S3Endpoint | None = None
    bucket: str = ""
    _opened: list[ObjectStore] = field(default_factory=list)

    @property
    def is_s3(self) -> bool:
        return self.endpoint is not None

    def open(self, **s3: object) -> ObjectStore:
        """A store on the backend's root; ``s3`` overrides config.s3 fields (e.g. thresholds)."""
        for k, v in s3.items():
            if k != "page_size":
                setattr(self.config.s3, k, v)
        options = {"page_size": s3["page_size"]} if "page_size" in s3 and self.is_s3 else {}
        store = open_store(self.root_url, self.config, **options)
        self._opened.append(store)
        return store

    def close(self) -> None:
        for store in self._opened:
            store.close()


def make_config(tmp_path: Path, endpoint: S3Endpoint | None = None) -> Config:
    overrides: dict = {"home": str(tmp_path / "var")}
    if endpoint is not None:
        overrides.update(endpoint.s3_config_overrides())
    return load_config(env={}, overrides=overrides)


@pytest.fixture(
    params=[
        "memory",
        "local",
        "moto",
        pytest.param("ceph", marks=pytest.mark.ceph),
        pytest.param("rados", marks=pytest.mark.ceph),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    kind = request.param
    if kind == "rados":  # the session Ceph's librados pool, a fresh prefix per test
        ceph = request.getfixturevalue("ceph_cluster")
        monkeypatch = request.getfixturevalue("monkeypatch")
        monkeypatch.syspath_prepend(ceph.vars["CEPH_PYLIB"])  # Debian's python3-rados
        monkeypatch.setenv("CEPH_CONF", ceph.vars["CEPH_CONF"])
        root = f"rados://{ceph.vars['CEPH_POOL']}/t-{uuid.uuid4().hex[:12]}"
        b = Backend(kind, root, make_config(tmp_path))
        yield b
        b.close()
        return
    if kind == "memory":
        space = f"t-{uuid.uuid4().hex[:12]}"
        b = Backend(kind, f"memory://{space}/root", make_config(tmp_path))
        yield b
        b.close()
        drop_memory_space(space)
        return
    if kind == "local":
        b = Backend(kind, (tmp_path / "objects").as_uri(), make_config(tmp_path))
        yield b
        b.close()
        return
    endpoint: S3Endpoint = request.getfixturevalue(f"{kind}_endpoint")
    bucket = endpoint.new_bucket()
    b = Backend(kind, f"s3://{bucket}/root", make_config(tmp_path, endpoint), endpoint, bucket)
    yield b
    b.close()


@pytest.fixture
def store(backend: Backend) -> ObjectStore:
    return backend.open()


@pytest.fixture
def fake_sleep() -> Callable[[float], None]:
    """A sleep that records instead of waiting, so retry tests never depend on timing."""
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)

    sleep.slept = slept  # type: ignore[attr-defined]
    return sleep
