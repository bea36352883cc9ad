"""The lead's fixes of newuser16's findings outside its files: a label chart says when it shows
only the most common of many values, counts of changes have thousands separators, and an empty
dataset's page says what makes its first version."""

from __future__ import annotations

import re

from datahub.browser.charts import TOP_VALUES
from datahub.catalog import Put, Record


def test_a_field_of_many_values_charts_the_most_common_and_one_bar_for_the_rest(client, env):
    """Before: a score of 10,000 distinct values drew twelve arbitrary values of count 1 and
    never said they were 12 of 10,000."""
    url = env.objects.url_for("o/a")
    env.catalog.create_dataset("scores")
    puts = [
        Put(Record(f"r{i:05d}", url, "e", 1, labels={"score": i / 1000, "split": "train"}))
        for i in range(1000)
    ]
    puts += [Put(Record(f"s{i}", url, "e", 1, labels={"score": 0.5, "split": "val"})) for i in range(9)]
    env.catalog.commit("scores", puts)
    svg = client.get("/datasets/scores/versions/1/charts/labels.svg").text
    assert f"labels.score ({TOP_VALUES} most common of 1,000 values)" in svg
    assert "988 other values" in svg  # 1,000 values: 12 drawn, their rest in one bar
    bars = re.findall(r"<title>([^<]*)</title>", svg)
    assert "0.5" in bars  # the one common value (10 records) is drawn
    assert "labels.split (" not in svg and "other values" not in svg.split("labels.split", 1)[1]


def test_counts_of_changes_have_thousands_separators_and_an_empty_dataset_says_what_to_run(client, env):
    url = env.objects.url_for("o/a")
    env.catalog.create_dataset("wide")
    env.catalog.commit("wide", [Put(Record(f"r{i:05d}", url, "e", 1)) for i in range(10_000)])
    version = client.get("/datasets/wide/versions/1").text
    assert "+10,000 −0 ~0" in version and "+10000" not in version
    assert "+10,000</td>" in client.get("/datasets/wide").text
    assert "+10,000 added" in client.get("/datasets/wide/diff?from=0&to=1").text
    env.catalog.create_dataset("empty")
    page = client.get("/datasets/empty").text
    assert "No version yet (<code>datahub import SRC --to empty</code> commits the first one)." in page
