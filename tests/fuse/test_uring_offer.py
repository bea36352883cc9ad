"""fuse_adapter.uring: when a mount asks for FUSE over io_uring, and what it says when it cannot.

Plain unit tests: the module parameter and the io_uring sysctl are files given by path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fuse_adapter import uring


@pytest.fixture
def param(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "enable_uring"
    monkeypatch.setenv("DATAHUB_FUSE_URING_PARAM", str(path))
    monkeypatch.setattr(uring, "DISABLED_SYSCTL", tmp_path / "io_uring_disabled")
    (tmp_path / "io_uring_disabled").write_text("0\n")
    return path


def test_an_offer_that_is_on_is_used(param: Path) -> None:
    param.write_text("Y\n")
    assert uring.kernel_offer() is None
    assert uring.mount_transport(True, True) == (True, "io_uring (one queue per CPU)")


def test_an_offer_that_is_off_is_turned_on_when_the_daemon_may(param: Path) -> None:
    param.write_text("N\n")
    assert uring.kernel_offer(enable=False) == f"{param} is off"
    assert param.read_text() == "N\n"
    assert uring.kernel_offer() is None
    assert param.read_text() == "Y"


def test_an_offer_that_cannot_be_turned_on_keeps_dev_fuse_and_says_why(
    param: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    param.write_text("N\n")

    def refuse(self: Path, *args: object, **kwargs: object) -> int:
        raise PermissionError(13, "Permission denied")  # /sys to a daemon without root

    monkeypatch.setattr(Path, "write_text", refuse)
    use, why = uring.mount_transport(True, True)
    assert use is False
    assert why == f"/dev/fuse ({param} is off and could not be turned on (Permission denied; needs root))"


def test_a_kernel_without_it_or_with_io_uring_disabled_keeps_dev_fuse(param: Path, tmp_path: Path) -> None:
    assert "no FUSE over io_uring" in uring.mount_transport(True, True)[1]
    param.write_text("Y")
    (tmp_path / "io_uring_disabled").write_text("2\n")
    use, why = uring.mount_transport(True, True)
    assert use is False and "kernel.io_uring_disabled = 2" in why


def test_asked_off_or_without_the_c_loop_thread(param: Path) -> None:
    param.write_text("Y")
    assert uring.mount_transport(False, True) == (False, "/dev/fuse (--no-io-uring)")
    use, why = uring.mount_transport(True, False)
    assert use is False and "C loop thread" in why
