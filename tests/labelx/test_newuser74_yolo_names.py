"""YOLO zip member names that no unzip reads as more than a name (newuser74).

The zip's label files were named by the record keys as they are, and a key may hold ``\\``,
``:``, ``%`` and a segment ending in ``.``: ``x\\..\\..\\evil.jpg`` was the member
``labels/x\\..\\..\\evil.txt``, two levels up and out of the target for a Windows unzip (zip
slip), ``C:/win.jpg`` a drive. Each name is now the key's stem with those percent-encoded
(docs/labelx.md): extracted with Python's zipfile, and read as a Windows path, every member stays
inside the target, and each decodes to its own key.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import PurePosixPath, PureWindowsPath
from urllib.parse import unquote

from tests.labelx.conftest import Session, make_project
from tests.labelx.test_export_collisions import CAT, _add_png, _label

KEYS = {
    "img/x\\..\\..\\evil.jpg": "labels/img/x%5C..%5C..%5Cevil.txt",
    "..\\up.jpg": "labels/..%5Cup.txt",
    "C:/win.jpg": "labels/C%3A/win.txt",
    "img/d:stream.jpg": "labels/img/d%3Astream.txt",
    "img/100%.jpg": "labels/img/100%25.txt",
    "img/100%25.jpg": "labels/img/100%2525.txt",
    "dots./x.jpg": "labels/dots%2E/x.txt",
    "img/0004.jpg": "labels/img/0004.txt",
}


def test_yolo_members_stay_inside_and_decode_to_their_keys(app, env, tmp_path):
    for key in KEYS:
        if not key.startswith("img/0"):
            _add_png(env, tmp_path, key)
    admin = Session(app, "admin")
    schema = {"kind": "detection", "classes": ["cat", "dog"]}
    pid = make_project(admin, task_size=40, annotators=[], schema=schema)["id"]
    _label(admin, pid, dict.fromkeys(KEYS, CAT))
    resp = admin.get(f"/api/projects/{pid}/export/yolo")
    assert resp.status_code == 200, resp.text
    zf = zipfile.ZipFile(io.BytesIO(resp.content))
    members = [n for n in zf.namelist() if n != "classes.txt"]
    assert sorted(members) == sorted(KEYS.values())
    for name in members:
        win = PureWindowsPath(name)  # how a Windows unzip splits it: \\ and / both separate
        assert not win.drive and not win.is_absolute() and ".." not in win.parts, name
        assert "\\" not in name and ":" not in name, name
        key = next(k for k, v in KEYS.items() if v == name)
        assert unquote(name.removeprefix("labels/")) == str(PurePosixPath(key).with_suffix(".txt"))
    target = tmp_path / "unzipped"
    zf.extractall(target)
    extracted = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert extracted == sorted([*KEYS.values(), "classes.txt"])
    for p in target.rglob("*"):
        assert p.resolve().is_relative_to(target.resolve()), p
    assert ok_text(zf, "labels/img/x%5C..%5C..%5Cevil.txt") == "0 0.500000 0.500000 1.000000 1.000000\n"


def ok_text(zf: zipfile.ZipFile, name: str) -> str:
    return zf.read(name).decode()
