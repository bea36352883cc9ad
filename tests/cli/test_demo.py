"""``make run``'s demo and ``datahub serve`` as real processes: they serve, stop cleanly, and re-runs reuse v1."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from datahub.catalog import open_catalog
from fuse_adapter.daemon import is_mounted
from tests.servers import free_port

REPO = Path(__file__).resolve().parents[2]


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DATAHUB_CONFIG", None)
    return subprocess.Popen(
        [sys.executable, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_healthy(proc: subprocess.Popen, url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"exited early with {proc.returncode}:\n{out}\n{err}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"{url}/healthz did not answer within {timeout}s")


def stop(proc: subprocess.Popen, sig: int) -> tuple[str, str]:
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return out, err


@pytest.mark.slow
def test_demo_serves_stops_on_sigint_and_reuses_v1(tmp_path):
    home, port = tmp_path / "var", free_port()
    url = f"http://127.0.0.1:{port}"
    # the first run is `make run` whole, its mount step included (a real FUSE mount)
    demo = ["-m", "datahub.demo", "--home", str(home), "--port", str(port)]
    proc = start(demo, tmp_path)
    wait_healthy(proc, url, timeout=300.0)  # the mount step runs three epochs before the API starts
    records = httpx.get(f"{url}/v1/datasets/sample/versions/1/records", params={"limit": 5}).json()
    assert len(records["items"]) == 5 and records["items"][0]["labels"]["class"] in (
        "airplane",
        "automobile",
        "bird",
    )
    # the dataset browser answers at the root, and the demo prints its URL
    page = httpx.get(f"{url}/datasets/sample/versions/latest")
    assert page.status_code == 200 and "sample@v1" in page.text
    out, err = stop(proc, signal.SIGINT)
    assert proc.returncode == 0, err
    assert "committed sample@v1 (300 added" in err
    assert_mount_step(home, out + err)
    assert f"{url}/ " in out and "dataset browser" in out
    assert f"{url}/healthz" in out and "datahub --home" in out and "demo stopped cleanly" in out

    proc = start([*demo, "--skip", "mount"], tmp_path)
    wait_healthy(proc, url)
    out, err = stop(proc, signal.SIGTERM)
    assert proc.returncode == 0, err
    assert "sample exists (latest v1, 300 records): left as it is" in err
    with open_catalog(f"sqlite:///{home / 'catalog.db'}") as catalog:
        assert [v.seq for v in catalog.log("sample")] == [1]
        assert catalog.resolve("sample").record_count == 300


def assert_mount_step(home: Path, said: str) -> None:
    """The mount step as a new user meets it: ``sample@latest`` mounted, a DataLoader epoch over
    it twice, the same epoch over the same files on local disk as the same-run baseline,
    and, once the demo has stopped, nothing left mounted or running."""
    mnt = home / "mnt"
    if not os.path.exists("/dev/fuse"):
        assert "[mount] skipped: /dev/fuse is not available here" in said
        return
    assert f"sample@latest mounted read-only at {mnt} (v1)" in said
    epochs = re.findall(r"torch DataLoader (.+?): (\d+) images in [\d.]+s = \d+ images/s", said)
    assert epochs == [
        ("epoch 1 over the mount", "300"),
        ("epoch 2 over the mount", "300"),
        ("the same epoch over the same files on local disk", "300"),
    ], said
    assert re.search(r"epoch 2 over the mount ran at [\d.]+x the loader over local disk", said), said
    # the unmount it names is a command a user can type after `make run` (the venv is not on PATH)
    hint = re.search(r"unmounted when the demo stops; by hand: (\S+) --home (\S+) umount (\S+)\)", said)
    assert hint is not None and os.access(hint.group(1), os.X_OK) and hint.group(3) == str(mnt), said
    assert not is_mounted(str(mnt))
    leftover = subprocess.run(["pgrep", "-f", f"fuse_adapter.*{mnt}"], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", leftover.stdout


def test_a_second_run_never_writes_over_the_users_newer_versions(tmp_path):
    """Issue 37 item 3: after the user committed v2 (a relabel) and v3 (a removal), a demo
    restart imported the manifest again as v4 and undid both at ``latest``."""
    from datahub.catalog import Delete, Patch
    from datahub.demo import main

    home = tmp_path / "var"
    quick = ["--home", str(home), "--no-wait", "--skip", "listen", "--skip", "mount", "--skip", "serve"]
    assert main(quick) == 0
    with open_catalog(f"sqlite:///{home / 'catalog.db'}") as catalog:
        first = sorted(r.key for r in catalog.list_records("sample", 1))[0]
        catalog.commit("sample", [Patch(first, labels={"class": "relabelled"})], message="cli relabel")
        catalog.commit("sample", [Delete(sorted(r.key for r in catalog.list_records("sample", 2))[-1])])
    assert main(quick) == 0
    with open_catalog(f"sqlite:///{home / 'catalog.db'}") as catalog:
        assert [v.seq for v in catalog.log("sample")] == [3, 2, 1]
        assert catalog.get_record("sample", "latest", first).labels == {"class": "relabelled"}
        assert catalog.resolve("sample").record_count == 299


def test_demo_on_a_busy_port_fails_with_a_clear_message(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = start(["-m", "datahub.demo", "--home", str(tmp_path / "var"), "--port", str(port)], tmp_path)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 4
    assert f"port {port} on 127.0.0.1 is already in use" in err and "Traceback" not in err
    assert "[sample]" not in err  # the port is checked before any slow setup
    assert not (tmp_path / "var").exists()


def test_demo_refuses_an_unknown_step_name(tmp_path):
    proc = start(["-m", "datahub.demo", "--home", str(tmp_path / "var"), "--skip", "nope"], tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "unknown step(s) nope for --skip" in err


def test_serve_with_auth_requires_tokens_and_stops_on_sigterm(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = ["-m", "datahub.cli.main", "--home", str(tmp_path / "var"), "serve", "--auth", "--port", str(port)]
    proc = start(args, tmp_path)
    wait_healthy(proc, url)
    r = httpx.get(f"{url}/v1/datasets")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    out, err = stop(proc, signal.SIGTERM)
    assert proc.returncode == 0 and "bearer tokens required" in err and "stopped" in err


def test_the_demo_ratio_says_when_a_busy_machine_made_it_noise() -> None:
    """One short epoch each: on a busy machine the ratio moved from 2.46x to 0.65x between two
    runs (newuser16), so the line says the load when it exceeds the cores, and nothing else."""
    from fuse_adapter.demo_step import busy_note

    assert busy_note(load=1.5, cores=2) == ""
    note = busy_note(load=14.2, cores=2)
    assert note.startswith(" (load average 14.2 on 2 cores: a busy machine's wall-clock ratio is noise")
    assert note.endswith("docs/benchmarks.md)")
