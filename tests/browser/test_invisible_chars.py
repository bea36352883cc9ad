"""A key stored before the bidi-control rule cannot display as another key on a page.

``img/\u202egpj.exe`` renders as ``img/exe.jpg`` in any browser: HTML escaping keeps the
override. Such keys still exist (records stored before the rule stay readable, issue 24 item
4), so every page shows invisible format characters as ``⟨U+202E⟩``, while links and the
form values sent back keep the real key (they still name the same record and folder).
"""

from __future__ import annotations

import re
from urllib.parse import quote

from datahub.catalog import Put, Record

LEGACY = "img/\u202egpj.exe"
FOLDER = "we\u2066ird\u2069/"
INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def test_pages_show_invisible_format_characters(client, env):
    url = env.objects.url_for("o/legacy")
    env.objects.put("o/legacy", b"hello")
    # written straight to the store, as a datahub from before the rule did
    env.catalog.create_dataset("legacy", description="bidi \u202eevil")
    env.catalog.store.commit(
        "legacy",
        0,
        [
            Put(Record(LEGACY, url, "e", 5, labels={"class": "\u202ecat"})),
            Put(Record(FOLDER + "a.txt", url, "e", 5)),
        ],
    )
    env.catalog.store.commit("legacy", 1, [Put(Record(LEGACY, url, "e2", 5))])
    pages = {
        "list": "/",
        "dataset": "/datasets/legacy",
        "folder": "/datasets/legacy/versions/1?prefix=img/",
        "root": "/datasets/legacy/versions/1",
        "record": "/datasets/legacy/versions/1/records/" + quote(LEGACY),
        "diff": "/datasets/legacy/diff?from=1&to=2",
        "in a folder": "/datasets/legacy/versions/1?prefix=" + quote(FOLDER),
        "labels chart": "/datasets/legacy/versions/1/charts/labels.svg",
    }
    for what, path in pages.items():
        answer = client.get(path)
        assert answer.status_code == 200, (what, answer.text[:500])
        text = answer.text
        # the only raw ones left are the form values sent back (the folder's prefix)
        text = re.sub(r'value="[^"]*"', "", text)
        assert not INVISIBLE.search(text), (what, INVISIBLE.findall(text), text[:2000])
    record = client.get(pages["record"]).text
    assert "img/⟨U+202E⟩gpj.exe" in record and "⟨U+202E⟩cat" in record
    assert "⟨U+202E⟩gpj.exe" in client.get(pages["diff"]).text
    assert "bidi ⟨U+202E⟩evil" in client.get("/").text
    # links still name the real key, and the folder's filter form sends its real prefix back
    assert f'href="/datasets/legacy/versions/2/records/{quote(LEGACY)}"' in client.get(pages["diff"]).text
    inside = client.get(pages["in a folder"]).text
    assert f'name="prefix" value="{FOLDER}"' in inside and "we⟨U+2066⟩ird⟨U+2069⟩" in inside
    assert client.get(pages["in a folder"] + "&filter=size%3E1").status_code == 200


def test_long_messages_and_descriptions_are_cut_in_tables_and_whole_on_their_page(client, env):
    long_message, long_description = "m" * 300 + "<end>" + "x" * 3000, "d" * 300 + "<end>" + "y" * 3000
    env.catalog.create_dataset("wordy", description=long_description)
    env.catalog.commit("wordy", [Put(Record("a", env.objects.url_for("o/a"), "e", 1))], message=long_message)
    listing, versions = client.get("/?q=wordy").text, client.get("/datasets/wordy").text
    assert "d" * 199 + "…" in listing and "d" * 200 not in listing  # 200 characters with the "…"
    assert "m" * 199 + "…" in versions and "m" * 200 not in versions
    assert "&lt;end&gt;" + "x" * 3000 in client.get("/datasets/wordy/versions/1").text
    assert "&lt;end&gt;" + "y" * 3000 in versions  # the dataset's own page has its description whole
