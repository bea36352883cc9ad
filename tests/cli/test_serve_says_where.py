"""What ``datahub serve`` prints on start names the dataset browser a person opens.

It printed "datahub API on http://127.0.0.1:8093 (…); docs at http://127.0.0.1:8093/docs":
a new user who ran it as docs/browser.md says learnt of the API and its docs, and nothing of
the browser at the root (newuser13's finding).
"""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_demo import start
from tests.cli.test_serve_early_signal import EARLY
from tests.servers import free_port


def test_serve_names_the_dataset_browser_and_labelx(tmp_path: Path) -> None:
    port = free_port()
    proc = start(["-c", EARLY, "--home", str(tmp_path / "var"), "serve", "--port", str(port)], tmp_path)
    try:
        _, err = proc.communicate(timeout=120)  # a hang guard, never a timing goal
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    url = f"http://127.0.0.1:{port}"
    assert f"dataset browser at {url}/," in err, err
    assert f"API docs at {url}/docs" in err, err
    assert f"LabelX on {url}/labelx/" in err, err
