"""Readers of datahub.torch, the loader docs/torch.md shows, and ``datahub://`` send no
``isatty()`` ioctl (TCGETS) for a dataset file.

Why it matters: the kernel forwards every ioctl on a FUSE file to the daemon
(``FUSE_IOCTL``, never remembered as refused), and Python 3.11's ``open(path, "rb")`` asks
``isatty()`` on each file it opens. On a warm datahub mount that request is the only round
trip left per file (docs/fuse.md). strace (``-y``: each descriptor's path) runs the reader in
a subprocess and counts ``ioctl(fd</dataset file>, TCGETS, ...)``; a plain ``open()`` over
the same files is the control, so the count is known to see them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.config import Config
from tests.pack.conftest import import_manifest, write_source
from tests.torch.test_mount import _mounted

REPO = Path(__file__).resolve().parents[2]
N = 6

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(shutil.which("fusermount3") is None, reason="needs fuse3"),
]


def _tcgets(code: str, under: Path | list[Path], tmp_path: Path) -> int:
    """Run ``code`` in a Python subprocess under strace; TCGETS ioctls on files below ``under``."""
    strace = shutil.which("strace")
    assert strace, "strace is missing: run scripts/install.sh"
    out = tmp_path / "ioctl.trace"
    script = tmp_path / "reader.py"
    script.write_text(code)
    cmd = [strace, "-f", "-qq", "-y", "-e", "trace=ioctl", "-o", str(out), sys.executable, str(script)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "read ok" in done.stdout, done.stdout + done.stderr
    dirs = "|".join(re.escape(str(d)) for d in (under if isinstance(under, list) else [under]))
    pattern = re.compile(r"ioctl\(\d+<(?:" + dirs + r")/[^>]*>, TCGETS")
    return sum(1 for line in out.read_text().splitlines() if pattern.search(line))


def _doc_block(marker: str) -> str:
    """The python block of docs/torch.md that contains ``marker``, as written."""
    text = (REPO / "docs" / "torch.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"docs/torch.md: {len(found)} python blocks with {marker!r}"
    return found[0]


@pytest.fixture
def photos(config: Config, tmp_path: Path) -> tuple[Config, int]:
    catalog = open_catalog(config.resolved_catalog_url)
    try:
        seq = import_manifest(catalog, config, write_source(tmp_path / "src", N), "photos")
    finally:
        catalog.close()
    return config, seq


def test_mounted_readers_send_no_tcgets(photos: tuple[Config, int], tmp_path: Path) -> None:
    config, seq = photos
    mnt = tmp_path / "mnt"
    root = mnt / "photos" / f"v{seq}"
    head = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from datahub.catalog import open_catalog
        from datahub.config import load_config
        config = load_config(env={{}}, overrides={{"home": {config.home!r}}})
        root = {str(root)!r}
        paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
        assert len(paths) == {N}, paths
    """)
    with _mounted(config, mnt, f"photos@v{seq}", warm_up=False):
        control = head + "for p in paths:\n    open(p, 'rb').read()\nprint('read ok')\n"
        assert _tcgets(control, mnt, tmp_path) == N  # Python's default open(): one per file

        dataset = head + textwrap.dedent(f"""
            from datahub.torch import MountSource, VersionDataset
            ds = VersionDataset.from_catalog(open_catalog(config.resolved_catalog_url), "photos", {seq},
                                             MountSource(root), transform=lambda data, labels: bytes(data))
            assert [len(ds[i]) for i in range(len(ds))] == [os.path.getsize(p) for p in paths]
            print("read ok")
        """)
        assert _tcgets(dataset, mnt, tmp_path) == 0

        # the PIL loader docs/torch.md shows, as written
        pil = (
            head
            + _doc_block("def load_rgb")
            + textwrap.dedent("""
            assert all(load_rgb(p).mode == "RGB" for p in paths)
            print("read ok")
        """)
        )
        assert _tcgets(pil, mnt, tmp_path) == 0

        helper = head + textwrap.dedent("""
            from datahub.torch import image_loader, read_file
            assert all(image_loader(p).size for p in paths)
            assert [len(read_file(p)) for p in paths] == [os.path.getsize(p) for p in paths]
            print("read ok")
        """)
        assert _tcgets(helper, mnt, tmp_path) == 0


def test_the_imagefolder_line_of_the_docs_sends_no_tcgets(photos: tuple[Config, int], tmp_path: Path) -> None:
    pytest.importorskip("torchvision", reason="torchvision is not a datahub dependency")
    config, seq = photos
    mnt = tmp_path / "mnt"
    block = _doc_block("ImageFolder(").replace("/mnt/datahub/photos/v1", str(mnt / "photos" / f"v{seq}"))
    with _mounted(config, mnt, f"photos@v{seq}", warm_up=False):
        code = (
            block
            + f"assert len(train) == {N}\nassert all(img.mode == 'RGB' for img, _ in train)\nprint('read ok')\n"
        )
        assert _tcgets(code, mnt, tmp_path) == 0


def test_the_fsspec_reader_sends_no_tcgets(photos: tuple[Config, int], tmp_path: Path) -> None:
    """``datahub://`` reads through the tiered cache in-process: no dataset file is opened
    with Python's ``open()``, neither the origin's nor the disk tier's page files."""
    config, seq = photos
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        import fsspec
        import datahub.fs
        fs = fsspec.filesystem("datahub", home={config.home!r})
        keys = sorted(fs.find("photos@v{seq}"))
        assert len(keys) == {N}, keys
        for k in keys:
            with fs.open(k, "rb") as f:
                assert f.read()
        assert [fs.cat_file(k) for k in keys]
        open({str(tmp_path / "src" / "img" / "00000.jpg")!r}, "rb").read()  # the control: counted
        print("read ok")
    """)
    assert _tcgets(code, [Path(config.home), tmp_path / "src"], tmp_path) == 1
