"""A dataset version mounted read-only for real: listing, bytes, stat fields, EROFS, concurrency."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuse.conftest import Dataset, sample_objects

pytestmark = pytest.mark.fuse


def _version_dir(mnt: Path, sample: Dataset) -> Path:
    return mnt / sample.name / f"v{sample.seq}"


def test_layout_shows_resolved_version_and_latest(ro_mount: Path, sample: Dataset) -> None:
    assert sorted(os.listdir(ro_mount)) == ["sample"]
    assert sorted(os.listdir(ro_mount / "sample")) == ["latest", f"v{sample.seq}"]
    assert os.readlink(ro_mount / "sample" / "latest") == f"v{sample.seq}"
    assert (ro_mount / "sample" / "latest" / "README.txt").read_bytes() == sample.objects["README.txt"]


def test_listing_equals_version_listing(ro_mount: Path, sample: Dataset) -> None:
    root = _version_dir(ro_mount, sample)
    seen = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            seen[path.relative_to(root).as_posix()] = path.stat().st_size
    assert seen == {k: len(v) for k, v in sample.objects.items()}


def test_stat_fields(ro_mount: Path, sample: Dataset) -> None:
    root = _version_dir(ro_mount, sample)
    f = (root / "train/class_0/img_000.bin").stat()
    assert stat.S_ISREG(f.st_mode) and stat.S_IMODE(f.st_mode) == 0o444
    assert (f.st_uid, f.st_gid) == (os.getuid(), os.getgid())
    assert f.st_mtime == pytest.approx(1_600_000_000.0 + len("train/class_0/img_000.bin"))  # record meta
    r = (root / "README.txt").stat()
    assert r.st_mtime == pytest.approx(sample.created_at, abs=1e-3)  # no meta: the version's time
    d = (root / "train").stat()
    assert stat.S_ISDIR(d.st_mode) and stat.S_IMODE(d.st_mode) == 0o555
    with pytest.raises(FileNotFoundError):
        (root / "train" / "nope.bin").stat()


keys = st.sampled_from(sorted(sample_objects()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=keys, offset_frac=st.floats(0, 1.2), size=st.integers(0, 3 * 1024**2))
def test_reads_are_byte_exact(
    ro_mount: Path, sample: Dataset, key: str, offset_frac: float, size: int
) -> None:
    data = sample.objects[key]
    offset = int(len(data) * offset_frac)
    fd = os.open(_version_dir(ro_mount, sample) / key, os.O_RDONLY)
    try:
        assert os.pread(fd, size, offset) == data[offset : offset + size]
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "action",
    [
        lambda p: os.open(p / "README.txt", os.O_RDWR),
        lambda p: os.open(p / "new.txt", os.O_WRONLY | os.O_CREAT),
        lambda p: os.mkdir(p / "newdir"),
        lambda p: os.unlink(p / "README.txt"),
        lambda p: os.rename(p / "README.txt", p / "moved.txt"),
        lambda p: os.chmod(p / "README.txt", 0o644),
        lambda p: os.truncate(p / "README.txt", 0),
        lambda p: os.rmdir(p / "many"),
        lambda p: os.symlink("README.txt", p / "link"),
    ],
    ids=["open-rw", "create", "mkdir", "unlink", "rename", "chmod", "truncate", "rmdir", "symlink"],
)
def test_writes_fail_with_erofs(ro_mount: Path, sample: Dataset, action) -> None:
    with pytest.raises(OSError) as exc:
        action(_version_dir(ro_mount, sample))
    assert exc.value.errno == errno.EROFS


def test_sixteen_threads_different_and_same_files(ro_mount: Path, sample: Dataset) -> None:
    root = _version_dir(ro_mount, sample)
    keys = sorted(sample.objects)
    big = "train/class_1/img_007.bin"
    errors: list[str] = []
    start = threading.Barrier(16)

    def reader(i: int) -> None:
        start.wait()
        for round_ in range(3):
            key = big if i % 2 else keys[(i * 3 + round_) % len(keys)]
            if (root / key).read_bytes() != sample.objects[key]:
                errors.append(key)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


def test_torch_dataloader_two_workers(ro_mount: Path, sample: Dataset) -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    root = _version_dir(ro_mount, sample)
    keys = sorted(k for k in sample.objects if k.startswith("many/"))

    class Files(torch_data.Dataset):
        def __len__(self) -> int:
            return len(keys)

        def __getitem__(self, i: int) -> tuple[str, int]:
            return keys[i], len((root / keys[i]).read_bytes())

    loader = torch_data.DataLoader(Files(), batch_size=8, num_workers=2, shuffle=True, collate_fn=list)
    got = {k: n for batch in loader for k, n in batch}
    assert got == {k: len(sample.objects[k]) for k in keys}
