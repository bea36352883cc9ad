"""``Chrome.screenshot`` takes a picture only when ``DATAHUB_SCREENSHOTS`` asks for one, and puts
the window through the same sizes either way (suite25: nothing reads the pictures, and each
full-page capture cost up to half a second of a browser test's wall). Checked on a recording
stand-in for the driver, so no Chromium is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser import chrome as chrome_module
from tests.browser.chrome import Chrome


class _Driver:
    """What the screenshot code asks of selenium's driver, recorded."""

    def __init__(self, height: int) -> None:
        self.height = height
        self.calls: list[tuple] = []

    def execute_script(self, script: str) -> int:
        assert "scrollHeight" in script
        return self.height

    def set_window_size(self, width: int, height: int) -> None:
        self.calls.append(("size", width, height))

    def save_screenshot(self, path: str) -> bool:
        self.calls.append(("save", path))
        Path(path).write_bytes(b"png")
        return True


def _chrome(tmp_path: Path, height: int) -> Chrome:
    c = Chrome.__new__(Chrome)  # no Chromium: only the driver's calls matter here
    c.driver = _Driver(height)
    c.shots = tmp_path / "shots"
    return c


@pytest.mark.parametrize("height", [300, 2500, 9000])
def test_without_the_variable_no_picture_is_taken_and_the_window_goes_through_the_same_sizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, height: int
) -> None:
    monkeypatch.setattr(chrome_module, "SHOTS", None)
    c = _chrome(tmp_path, height)
    assert c.screenshot("page") is None
    assert c.save_view("phone") is None
    tall = min(max(900, height), 4000)
    assert c.driver.calls == [("size", 1360, tall), ("size", 1360, 900)]
    assert not c.shots.exists()


def test_with_the_variable_the_page_and_the_view_are_saved_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chrome_module, "SHOTS", str(tmp_path / "kept"))
    c = _chrome(tmp_path, 2500)
    c.shots = tmp_path / "kept"  # as Chrome.reset sets it when the variable is set
    page = c.screenshot("page")
    view = c.save_view("phone")
    assert page == tmp_path / "kept" / "page.png" and view == tmp_path / "kept" / "phone.png"
    assert c.driver.calls == [
        ("size", 1360, 2500),
        ("save", str(page)),
        ("size", 1360, 900),
        ("save", str(view)),
    ]
    assert page.read_bytes() == b"png" and view.read_bytes() == b"png"
