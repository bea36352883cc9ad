"""Issue 35: every access-control command the docs show runs here as written.

The docs' own examples (docs/cli.md, docs/csi.md, docs/api.md, docs/kubernetes.md) are read
from the Markdown: each fenced ``bash`` block that grants, revokes or sets an access list or an
owner. They run in one bash, in a network namespace of their own (``unshare --net``: only its
loopback exists), so ``http://localhost:8080`` in docs/api.md reaches the ``datahub serve``
started there and nothing else. A principal rule that drifts from the docs fails this test.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = ("cli.md", "csi.md", "api.md", "kubernetes.md")  # the order they run in: cli.md creates imgs
ACCESS = re.compile(r"--grant|--revoke|--acl|--owner|\"acl\"")
FENCE = re.compile(r"^(?P<indent> *)```bash\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)


def access_snippets(doc: str) -> list[str]:
    text = (REPO / "docs" / doc).read_text()
    blocks = []
    for m in FENCE.finditer(text):
        indent = len(m.group("indent"))
        body = "\n".join(line[indent:] for line in m.group("body").splitlines())
        if ACCESS.search(body):
            blocks.append(body)
    return blocks


def test_each_doc_shows_its_access_commands():
    for doc in DOCS:
        assert access_snippets(doc), f"docs/{doc} shows no access-control command in a bash block"


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root and unshare")
def test_the_docs_access_commands_run_as_written(tmp_path):
    bindir = Path(sys.executable).parent
    snippets = [(doc, s) for doc in DOCS for s in access_snippets(doc)]
    steps = []
    for doc, snippet in snippets:
        steps.append(f"echo {shlex.quote('--- docs/' + doc)}")
        steps.append(snippet)
    script = f"""
set -euo pipefail
ip link set lo up
export PATH={shlex.quote(str(bindir))}:$PATH
export DATAHUB_CONFIG={shlex.quote(str(tmp_path / "datahub.toml"))}
datahub init >/dev/null
datahub dataset create imagenet >/dev/null
export DATAHUB_API_TOKEN=$(datahub --json token create --principal ops --admin | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
datahub serve --auth --port 8080 >serve.log 2>&1 &
server=$!
trap 'kill $server' EXIT
for _ in $(seq 300); do curl -sf localhost:8080/healthz >/dev/null && break; sleep 0.1; done
{chr(10).join(steps)}
echo '--- final'
datahub --json dataset show imgs
datahub --json dataset show imagenet
"""
    (tmp_path / "datahub.toml").write_text(f'home = "{tmp_path / "var"}"\n')
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    done = subprocess.run(
        ["unshare", "--net", "bash", "-c", script],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    log = (tmp_path / "serve.log").read_text() if (tmp_path / "serve.log").exists() else ""
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}\nserver:\n{log[-2000:]}"
    final = done.stdout.split("--- final\n", 1)[1]
    decoder = json.JSONDecoder()
    imgs, end = decoder.raw_decode(final)
    imagenet, _ = decoder.raw_decode(final[end:].lstrip())
    # the last word on imgs is docs/api.md's PATCH; on imagenet, docs/kubernetes.md's grant
    assert imgs["owner"] == "alice@example.com"
    assert imgs["acl"] == {"system:serviceaccount:team-a:trainer": "reader", "alice": "writer"}
    assert imagenet["acl"] == {"system:serviceaccount:team-a:trainer": "reader"}
