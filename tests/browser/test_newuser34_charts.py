"""What newuser34 read under a version page's charts: a filter matching nothing said "no records
of 0 records" and "no labels to count of 0 records", and a folder of one file (or a version of
one) "of 1 records" and "Of all 1 records of this version.". The captions now count in words
that read."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from datahub.catalog import Put, Record
from tests.browser.conftest import Env


def _note(client: TestClient, url: str) -> str:
    svg = client.get(url)
    assert svg.status_code == 200, svg.text
    return re.search(r"<text[^>]*>([^<]*)</text>", svg.text)[1]


def test_chart_captions_count_no_record_and_one_record(env: Env, client: TestClient) -> None:
    info = env.objects.put("one/metrics.txt", b"epoch 1: loss 0.42\n")
    record = Record("metrics.txt", env.objects.url_for("one/metrics.txt"), info.etag, info.size)
    env.catalog.create_dataset("outputs")
    env.catalog.commit("outputs", [Put(record)], message="one file")
    base = "/datasets/outputs/versions/1"
    page = client.get(base).text
    assert re.search(r'id="charts-of">([^<]*)<', page)[1] == "Of the one record of this version."
    assert _note(client, f"{base}/charts/sizes.svg") == "of 1 record"
    assert _note(client, f"{base}/charts/labels.svg") == "no labels to count of 1 record"
    nothing = "filter=labels.class%3Dzebra"
    assert _note(client, f"{base}/charts/sizes.svg?{nothing}") == "no record to count"
    assert _note(client, f"{base}/charts/labels.svg?{nothing}") == "no record to count"
