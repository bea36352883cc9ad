"""A cold read through a real read-only dataset mount from an origin that accepts
connections and never answers: the reader gets EIO before a generous guard (the budget is
``s3.total_timeout``, set small here; the per-attempt timeouts and attempts are large), and
the daemon log names the object, and the stalled origin is asked once, not once per kernel
read request. Only "returned before the guard" is asserted about time."""

from __future__ import annotations

import errno
import re
from pathlib import Path

from tests.fuse.conftest import make_env, upload_dataset
from tests.storage.stallserver import StallingServer
from tests.storage.test_s3_stall import run_guarded


def test_a_stalled_origin_gives_the_reader_eio_within_the_budget(tmp_path: Path, moto_endpoint) -> None:
    env = make_env(tmp_path / "env", moto_endpoint)
    upload_dataset(env, "stalled", {"img/a.jpg": b"x" * 200_000})
    with StallingServer() as server:
        text = env.config_path.read_text()
        text = re.sub(r'endpoint_url = ".*"', f'endpoint_url = "{server.url}"', text)
        text = text.replace(
            "max_attempts = 3\n",
            "max_attempts = 20\nconnect_timeout = 60.0\nread_timeout = 60.0\ntotal_timeout = 1.0\n",
        )
        env.config_path.write_text(text)
        mnt = env.mountpoint("stalled")
        with env.mounted(mnt, "stalled"):
            path = next(mnt.glob("stalled/*/img/a.jpg"))

            def read() -> None:
                with open(path, "rb") as f:
                    f.read()

            error = run_guarded(read)
            requests = server.accepted
        log = (env.root / f"mount-{mnt.name}.log").read_text()
    assert isinstance(error, OSError) and error.errno == errno.EIO, error
    assert "img/a.jpg" in log and "s3.total_timeout" in log
    # The kernel re-asks a failed readahead with a synchronous read of the same page; the
    # daemon answers that from the remembered timeout instead of waiting a second budget.
    assert requests == 1
