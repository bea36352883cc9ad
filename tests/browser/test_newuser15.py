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


def test_a_mistyped_version_links_back_to_its_dataset_and_shows_commands_as_code(
    chrome: Chrome,  # noqa: F811
    server: str,
) -> None:
    """A version, record or filter typo under an existing dataset: the error page showed the
    message's command with its backticks (`datahub log pets`) and linked only to "All datasets"."""
    c = chrome
    for path in ("/datasets/pets/versions/9", "/datasets/pets/versions/2/records/nope.jpg"):
        c.visit(f"{server}{path}", "newuser15-typo", error_page=True)
        back = c.driver.find_element("link text", "Back to pets")
        assert back.get_attribute("href") == f"{server}/datasets/pets"
        assert [a.text for a in c.find_all(".crumbs a")] == ["Datasets", "pets"]
    c.visit(f"{server}/datasets/pets/versions/9", "newuser15-typo-version", error_page=True)
    assert c.find(".error-message").text == "dataset 'pets' has no version 9; see datahub log pets"
    assert c.find(".error-message code").text == "datahub log pets"
    c.driver.find_element("link text", "Back to pets").click()
    c.wait_for_url(lambda url: url == f"{server}/datasets/pets")
    # a missing dataset's page links nowhere but the list (an unreadable one's is the same page)
    c.visit(f"{server}/datasets/nope/versions/1", "newuser15-typo-dataset", error_page=True)
    assert not c.driver.find_elements("link text", "Back to nope") and not c.find_all(".crumbs a")
