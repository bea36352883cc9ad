"""What a new user met in the dataset browser after committing a workspace (newuser15), in
headless Chromium: the size chart of a small metrics file beside a large checkpoint."""

from __future__ import annotations

from datahub.catalog import Put, Record
from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env


def test_the_size_chart_counts_every_record_whatever_the_span_of_sizes(
    chrome: Chrome,  # noqa: F811
    env: Env,
    server: str,
) -> None:
    """A workspace's 19-byte metrics file and 8 MiB checkpoint span 19 powers of two. The chart
    drew the largest 16 and dropped the rest: "of 2 records" over bars adding up to 1."""
    files = {"metrics.txt": b"epoch 1: loss 0.42\n", "ckpt.pt": bytes(8 << 20)}
    changes = []
    for key, data in files.items():
        info = env.objects.put(f"ws/{key}", data)
        changes.append(Put(Record(key, env.objects.url_for(f"ws/{key}"), info.etag, info.size)))
    env.catalog.create_dataset("outputs")
    env.catalog.commit("outputs", changes, message="workspace run-42")
    c = chrome
    c.visit(f"{server}/datasets/outputs/versions/1", "newuser15-version-charts")
    assert c.find("#charts-of").text == "Of all 2 records of this version."
    c.visit(f"{server}/datasets/outputs/versions/1/charts/sizes.svg", "newuser15-sizes-svg", axe=False)
    texts = [t.text for t in c.find_all("text")]
    assert texts[0] == "of 2 records"
    counts = [int(t) for t in texts if t.isdigit()]
    assert sum(counts) == 2, texts
    assert len(counts) == 16, texts  # still 16 bars at most
    assert texts[2].startswith("0 B – 512 B") and counts[0] == 1, texts  # the first bar holds the small file
