"""moto in server mode on 127.0.0.1, for the cold-path benches (its own process and port).

Why its own module: ``run.py`` (read benches) and ``flush.py`` (write-back flush) each need
an S3 server whose request log they can count and whose CPU they can measure, on a port
no other bench uses. It is moto's app over HTTP/1.1 keep-alive connections
(``tests/moto_http11.py``: ``moto_server`` closes every connection, which no real object
store does); its log has one line per request, the format the peers harness
(``bench/peers/run_bench.py`` ``RequestLog``) reads.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path


class Moto:
    """``Moto(port, run_dir)``: started at once; ``url``, ``pid``, ``log_path``; ``stop()``.

    Writes ``run_dir/moto.pid`` (where the peers harness looks for the endpoint's PID).
    """

    def __init__(self, port: int, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.url = f"http://127.0.0.1:{port}"
        self.run_dir = run_dir
        self.log_path = run_dir / "moto.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the server
        # HTTP/1.1 keep-alive, as a real object store (tests/moto_http11.py says why)
        server = Path(__file__).resolve().parents[2] / "tests" / "moto_http11.py"
        self.proc = subprocess.Popen(
            [sys.executable, str(server), "-H", "127.0.0.1", "-p", str(port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.pid = self.proc.pid
        (run_dir / "moto.pid").write_text(str(self.pid))
        for _ in range(300):
            if self.proc.poll() is not None:
                break
            try:
                urllib.request.urlopen(self.url, timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto did not answer on {self.url} (port taken?); see {self.log_path}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        (self.run_dir / "moto.pid").unlink(missing_ok=True)

    def __enter__(self) -> Moto:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
