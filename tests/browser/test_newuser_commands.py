"""Every command a ``make run`` user is shown runs as shown, in a shell whose PATH is a fresh
machine's (the checkout's ``.venv/bin`` is not on it; ``make`` puts it there for its own
recipes only).

One demo process serves a home laid out as a clone's (``./.venv`` and ``./var`` side by side,
started as ``make run`` starts it: ``.venv/bin/python -m datahub.demo`` from the checkout).
Against it run: the URLs and the ``Try:`` lines it prints, docs/quickstart.md's "Try it"
block as written (its port and ``/tmp/`` moved into this test's directory), and the version
page's "Mount it" snippet (``/mnt/`` moved likewise), which mounts for real.
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from fuse_adapter.daemon import is_mounted
from tests.servers import free_port

REPO = Path(__file__).resolve().parents[2]
SHELL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # a root login shell's
READY = "Ctrl-C stops the demo."
pytestmark = [pytest.mark.slow]  # one demo process for the module: ~10 s to its first answer


@dataclass
class Demo:
    cwd: Path  # where `make run` was typed: .venv and var side by side
    url: str
    port: int
    printed: str


def _shell(script: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``script`` in bash, stopping at the first failing line; no ``pipefail``, as in the
    user's interactive shell (``… | head`` ends the CLI's output early, and that is fine)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "VIRTUAL_ENV"))}
    env["PATH"] = SHELL_PATH
    env["PYTHONPATH"] = str(REPO)  # the checkout under test, as a clone's editable install names it
    return subprocess.run(
        ["bash", "-eu", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    cwd = tmp_path_factory.mktemp("clone")
    (cwd / ".venv").symlink_to(REPO / ".venv")
    port = free_port()
    log = cwd / "demo.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    env["PYTHONPATH"] = str(REPO)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [".venv/bin/python", "-m", "datahub.demo", "--port", str(port), "--skip", "mount"],
            cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while READY not in log.read_text():
            assert proc.poll() is None, f"the demo exited with {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the demo did not get ready:\n{log.read_text()}"
            time.sleep(0.1)
        yield Demo(cwd, f"http://127.0.0.1:{port}", port, log.read_text())
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert proc.returncode == 0, log.read_text()


def test_the_urls_and_commands_the_demo_prints_answer_and_run(demo: Demo) -> None:
    urls = re.findall(r"^  (http://\S+)", demo.printed, re.M)
    assert len(urls) == 8, demo.printed
    for url in urls:
        response = httpx.get(url, headers={"Accept": "text/html"}, follow_redirects=True, timeout=60)
        assert response.status_code == 200, (url, response.status_code, response.text[:300])
    tried = demo.printed.split("Try:\n", 1)[1].split("\n\n", 1)[0]
    commands = [line.strip() for line in tried.splitlines()]
    assert commands and all(c.startswith(".venv/bin/datahub --home ") for c in commands), tried
    script = "\n".join(commands).replace("> /tmp/", f"> {demo.cwd}/")
    proc = _shell(script, demo.cwd)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, f"{script}\n{proc.stdout}\n{proc.stderr}"
    assert (demo.cwd / "sample.ndjson").read_text().count("\n") == 300


def test_the_quickstart_try_it_block_runs_as_written(demo: Demo) -> None:
    section = (REPO / "docs" / "quickstart.md").read_text().split("## Try it", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    assert "localhost:8080" in block and "> /tmp/" in block
    script = block.replace("localhost:8080", f"localhost:{demo.port}").replace("> /tmp/", f"> {demo.cwd}/qs-")
    proc = _shell(script, demo.cwd)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, f"{script}\n{proc.stdout}\n{proc.stderr}"
    assert '{"status":"ok"}' in proc.stdout and "sample@golden -> v1" in proc.stdout
    assert (demo.cwd / "qs-sample.ndjson").read_text().count("\n") == 300


def test_the_quickstart_try_it_block_runs_with_the_home_in_datahub_home(demo: Demo, tmp_path: Path) -> None:
    """The quickstart offers ``DATAHUB_HOME=DIR make run``; its block read ``--home var`` and
    every ``$D`` line failed there ("no catalog at var/catalog.db", newuser26). Run from a
    checkout whose ./var is not the home, with ``DATAHUB_HOME`` exported naming the demo's."""
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    section = (REPO / "docs" / "quickstart.md").read_text().split("## Try it", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    script = block.replace("localhost:8080", f"localhost:{demo.port}").replace("> /tmp/", f"> {tmp_path}/qs-")
    proc = _shell(f"export DATAHUB_HOME={demo.cwd / 'var'}\n{script}", tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, f"{script}\n{proc.stdout}\n{proc.stderr}"
    assert "sample@golden -> v1" in proc.stdout
    assert (tmp_path / "qs-sample.ndjson").read_text().count("\n") == 300
    assert not (tmp_path / "var").exists()


def test_the_quickstart_try_it_block_runs_with_a_home_holding_a_space(demo: Demo, tmp_path: Path) -> None:
    """``DATAHUB_HOME="/tmp/my home" make run`` then the block with that home exported: its
    ``D=".venv/bin/datahub --home ${DATAHUB_HOME:-var}"`` split the home in two at ``$D``
    (newuser32: "invalid choice: 'home'"). The demo's home is reached through a link whose name
    holds a space."""
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    home = tmp_path / "my home"
    home.symlink_to(demo.cwd / "var")
    section = (REPO / "docs" / "quickstart.md").read_text().split("## Try it", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    script = block.replace("localhost:8080", f"localhost:{demo.port}").replace("> /tmp/", f"> {tmp_path}/qs-")
    proc = _shell(f"export DATAHUB_HOME='{home}'\n{script}", tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, f"{script}\n{proc.stdout}\n{proc.stderr}"
    assert "sample@golden -> v1" in proc.stdout
    assert (tmp_path / "qs-sample.ndjson").read_text().count("\n") == 300
    assert not (tmp_path / "var").exists()


@pytest.mark.fuse
def test_the_version_pages_mount_snippet_mounts_as_shown(demo: Demo, tmp_path: Path) -> None:
    """Before, it read ``datahub mount …``: 'datahub: command not found' after ``make run``."""
    page = httpx.get(f"{demo.url}/datasets/sample/versions/latest", timeout=60).text
    snippet = html.unescape(re.search(r'id="snippet-text-1">([^<]*)<', page).group(1))
    assert (
        snippet.startswith("mkdir -p /mnt/sample && ")
        and " mount --background /mnt/sample sample@v1" in snippet
    )
    point = tmp_path / "sample"
    cli = snippet.split(" && ", 1)[1].split(" mount ", 1)[0]
    try:
        proc = _shell(snippet.replace("/mnt/", f"{tmp_path}/"), demo.cwd)
        assert proc.returncode == 0, f"{snippet}\n{proc.stdout}\n{proc.stderr}"
        assert len(list((point / "sample" / "v1").rglob("*.jpg"))) == 300
    finally:
        if is_mounted(str(point)):
            _shell(f"{cli} umount {point}", demo.cwd)
        if is_mounted(str(point)):
            subprocess.run(["fusermount3", "-uz", str(point)], check=False)
    assert not is_mounted(str(point))


def test_a_command_an_error_page_names_runs_as_shown(demo: Demo) -> None:
    """A mistyped version's page says "see `datahub log sample`": under make run a bare
    ``datahub`` is not on PATH (newuser24); it names the demo's command, as the pages do."""
    page = httpx.get(f"{demo.url}/datasets/sample/versions/9", timeout=60)
    assert page.status_code == 404
    command = html.unescape(
        re.search(r'class="error-message"[^>]*>.*?<code>([^<]*)</code>', page.text).group(1)
    )
    assert command.startswith(".venv/bin/datahub --home ") and command.endswith(" log sample"), command
    proc = _shell(command, demo.cwd)
    assert proc.returncode == 0 and "sample images generated by make run" in proc.stdout, proc.stderr


def test_a_command_a_labelx_error_names_runs_as_shown(demo: Demo) -> None:
    """LabelX's messages name commands too (a bad API token: "create one with `datahub labelx
    create-token NAME …`"); under make run they name the demo's command."""
    answer = httpx.get(
        f"{demo.url}/labelx/api/projects", headers={"Authorization": "Bearer bogus"}, timeout=60
    )
    assert answer.status_code == 401
    command = re.search(r"`([^`]*)`", answer.json()["error"]["message"]).group(1)
    assert command.startswith(".venv/bin/datahub --home ") and " labelx create-token NAME " in command, (
        command
    )
    proc = _shell(command.replace("NAME", "admin").replace("WHAT", "walk"), demo.cwd)
    assert proc.returncode == 0 and proc.stdout.startswith("lx_"), proc.stderr


def test_the_version_pages_pytorch_script_runs_as_shown(demo: Demo) -> None:
    """The PyTorch snippet is a whole script: saved as it says, run with the command it names,
    it reads the page's records in a DataLoader. Before (newuser24) it was one line,
    ``VersionDataset.from_catalog(catalog, "sample", "v1", CacheSource(config))``, naming
    three things it never defined and no import: a NameError as pasted. A packed version
    (``datahub pack``: shards and index.json) is read with PackedDataset: VersionDataset would
    decode its LMDB shards as pictures."""
    packed = _shell(".venv/bin/datahub --home var pack sample@v1 --to sample-64 --resize 64x64", demo.cwd)
    assert packed.returncode == 0, packed.stderr
    cases = (
        ("sample", "", 300),
        ("sample", "?prefix=train%2F&filter=labels.class%3Dcat", 27),
        ("sample-64", "", 300),
    )
    for name, query, expected in cases:
        page = httpx.get(f"{demo.url}/datasets/{name}/versions/latest{query}", timeout=60).text
        found = re.search(
            r'<span class="snippet-label" id="snippet-3">PyTorch</span>\s*<pre[^>]*id="snippet-text-3"[^>]*>([^<]*)</pre>',
            page,
        )
        assert found, page
        script = html.unescape(found.group(1))
        first = script.splitlines()[0]
        saved_as, run = re.fullmatch(r"# save as (\S+), then run: (.+)", first).groups()
        assert run == f".venv/bin/python {saved_as}", first  # the venv's: python on PATH has no datahub
        (demo.cwd / saved_as).write_text(script)
        proc = _shell(run, demo.cwd)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (
            f"{script}\n{proc.stdout}\n{proc.stderr}"
        )
        assert proc.stdout.strip() == f"{expected} samples of {name}@v1 read", proc.stdout
        assert ("PackedDataset.open(" in script) == (name == "sample-64"), script


def test_the_quickstart_own_data_block_runs_as_written(demo: Demo, moto_endpoint, tmp_path: Path) -> None:
    """docs/quickstart.md's "Your own data": a directory, an S3 prefix and a manifest, each into
    its own dataset, then a refresh of the directory that commits only what changed. Put in
    place first: ``/data/pets`` (this test's directory), ``s3://bucket/`` (a moto bucket with
    the ``[s3]`` settings the block names, in ``./datahub.toml``) and ``pets.jsonl``."""
    section = (REPO / "docs" / "quickstart.md").read_text().split("## Your own data", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    first, later = block.split("# later", 1)
    pets = tmp_path / "data" / "pets"
    for name in ("cat/1.jpg", "dog/2.jpg"):
        (pets / name).parent.mkdir(parents=True, exist_ok=True)
        (pets / name).write_bytes(name.encode() * 50)
    bucket = moto_endpoint.new_bucket("pets")
    moto_endpoint.client().put_object(Bucket=bucket, Key="pets/a.jpg", Body=b"a" * 100)
    (demo.cwd / "pets.jsonl").write_text(
        json.dumps({"url": (pets / "cat/1.jpg").as_uri(), "key": "cat/1.jpg", "labels": {"class": "cat"}})
        + "\n"
    )
    s3 = moto_endpoint.s3_config_overrides()["s3"]
    toml = demo.cwd / "datahub.toml"
    toml.write_text("[s3]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in s3.items()))

    def run(script: str) -> subprocess.CompletedProcess:
        script = script.replace("/data/pets", str(pets)).replace("s3://bucket/", f"s3://{bucket}/")
        proc = _shell(script, demo.cwd)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (
            f"{script}\n{proc.stdout}\n{proc.stderr}"
        )
        return proc

    try:
        run(first)
        (pets / "cat" / "3.jpg").write_bytes(b"new" * 50)  # the source changed
        proc = run('D=".venv/bin/datahub --home var"\n# later' + later)
    finally:
        toml.unlink()
    assert "committed pets@v2: 1 added, 0 removed, 0 modified" in proc.stdout, proc.stdout
    assert proc.stdout.strip().endswith("+ cat/3.jpg"), proc.stdout  # the diff: only the change


def test_the_quickstart_serving_block_runs_as_written(demo: Demo, tmp_path: Path) -> None:
    """docs/quickstart.md's "Serving beyond this machine", after "Your own data" made ``pets``
    (here: a one-file directory): two tokens, a grant, the server on every address (its port
    moved to a free one), and the curl line with alice's token (``dh_…`` and ``host`` filled
    in): alice sees pets, and the server stops on SIGTERM."""
    section = (REPO / "docs" / "quickstart.md").read_text().split("## Serving beyond this machine", 1)[1]
    lines = re.search(r"```bash\n(.*?)```", section, re.S).group(1).strip().splitlines()
    setup, serve, curl = lines[:-2], lines[-2], lines[-1]
    assert serve.startswith("$D serve --auth --host 0.0.0.0 --port 8080"), serve
    home = tmp_path / "var"  # a home of its own: the demo's server holds its catalog in local mode
    source = tmp_path / "pets"
    source.mkdir()
    (source / "1.jpg").write_bytes(b"x" * 100)
    d = f'D=".venv/bin/datahub --home {home}"\n'
    made = _shell(d + f"$D import {source} --to pets\n" + "\n".join(setup), demo.cwd)
    assert made.returncode == 0, made.stderr
    alice = re.findall(r"^(dh_\S+)$", made.stdout, re.M)[1]  # the second token printed
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")} | {"PATH": SHELL_PATH}
    proc = subprocess.Popen(
        ["bash", "-c", d + "exec " + serve.split("#")[0].replace("8080", str(port))],
        cwd=demo.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120  # a hang guard, never a timing goal
        asked = curl.replace("dh_…", alice).replace("host:8080", f"127.0.0.1:{port}")
        while True:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "datahub serve did not answer"
            answer = _shell(asked + " -sf", demo.cwd)
            if answer.returncode == 0:
                break
            time.sleep(0.2)
        assert [d["name"] for d in json.loads(answer.stdout)] == ["pets"], answer.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert "bearer tokens required" in err, err  # its clean stop: tests/cli/test_demo.py
