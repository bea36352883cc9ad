"""The diff page's field-by-field changes: every changed field once, nothing else."""

from __future__ import annotations

import re

from datahub.browser.diffs import Change, field_changes
from datahub.catalog import Put, Record


def rec(**fields) -> Record:
    return Record("k", "s3://b/k", fields.pop("etag", "e"), 1, **fields)


def test_labels_given_to_a_record_without_any_are_listed_field_by_field_only():
    assert field_changes(rec(), rec(labels={"class": "cat"})) == (Change("labels.class", "", '"cat"'),)
    assert field_changes(rec(labels={"class": "cat"}), rec()) == (Change("labels.class", '"cat"', ""),)
    assert field_changes(rec(labels={"box": {}}), rec(labels={"box": {"x": 1}})) == (
        Change("labels.box.x", "", "1"),
    )


def test_an_emptied_or_removed_field_still_shows():
    assert field_changes(rec(labels={"box": {}}), rec()) == (Change("labels.box", "{}", ""),)
    assert field_changes(rec(labels={"box": 1}), rec(labels={"box": {}})) == (
        Change("labels.box", "1", "{}"),
    )
    assert field_changes(rec(meta={"s": "a"}, etag="1"), rec(meta={"s": "b"}, etag="2")) == (
        Change("etag", "1", "2"),
        Change("meta.s", '"a"', '"b"'),
    )


def test_label_values_on_record_cards_are_json(client, env):
    url = env.objects.url_for("o/a")
    labels = {"ok": True, "none": None, "box": {"x": [1, "<b>"]}}
    env.catalog.create_dataset("cards")
    env.catalog.commit("cards", [Put(Record("a.bin", url, "e", 1, labels=labels))])
    env.catalog.commit("cards", [Put(Record("b.bin", url, "e", 1, labels={"long": ["v" * 100]}))])
    page = client.get("/datasets/cards/versions/2").text
    assert "box={&#34;x&#34;: [1, &#34;&lt;b&gt;&#34;]}" in page and "none=null" in page
    # the page's own PyTorch script is Python (shuffle=True, batch_size=None): the cards are not
    cards = re.sub(r'<pre class="mono script".*?</pre>', "", page, flags=re.S)
    assert "True" not in cards and "None" not in cards
    assert "long=[&#34;" + "v" * 77 + "…" in page and "v" * 78 not in page  # cut at 80 characters


class CountingCatalog:
    """The real catalog, counting the diffs read (the counts must come from the versions)."""

    def __init__(self, catalog) -> None:
        self.catalog, self.diffs = catalog, 0

    def diff(self, *args, **kwargs):
        self.diffs += 1
        return self.catalog.diff(*args, **kwargs)


def test_diff_counts_known_from_the_versions_read_no_diff(env):
    from datahub.browser.diffs import Counts

    c, counting = env.catalog, CountingCatalog(env.catalog)
    versions = {seq: c.resolve("pets", seq) for seq in (1, 2)}  # 0: the empty state
    counts = Counts()
    for a, b in [(0, 2), (0, 1), (1, 2), (2, 1), (2, 2)]:
        entries = list(c.diff("pets", a, b))
        expected = tuple(sum(e.kind == kind for e in entries) for kind in ("added", "removed", "modified"))
        assert counts.get(counting, "pets", versions.get(a), versions[b]) == expected, (a, b)
    assert counting.diffs == 0


def test_a_long_chart_label_keeps_its_start(client, env):
    """A label value is drawn from its start, cut at its column (whole in its tooltip): a
    right-anchored text drew a long one past the picture's left edge, its start unseen."""
    url = env.objects.url_for("o/a")
    value = '"><svg onload=alert(8)> and then a long tail of words'
    env.catalog.create_dataset("charted")
    env.catalog.commit("charted", [Put(Record("a", url, "e", 1, labels={"class": value}))])
    svg = client.get("/datasets/charted/versions/1/charts/labels.svg").text
    escaped = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&#34;")
    assert f"<title>{escaped}</title>" in svg
    shown = re.search(r"</title>([^<]*)</text>", svg)[1]
    assert shown.startswith("&#34;&gt;&lt;svg onload") and shown.endswith("…"), shown
    assert 'text-anchor="end"' not in svg.split("</clipPath>", 1)[1].split("<rect", 1)[0]
