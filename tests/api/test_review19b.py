"""review19b: what the pages and the terminal show of names a writer chose.

The invisible-character rule (issue 24 item 4) covered the zero-width and direction marks
U+200B-U+200F, bidi embeddings/overrides and isolates, and nothing else of Unicode's invisible
format characters: the Arabic letter mark U+061C (the third direction mark, beside U+200E and
U+200F), the word joiner and invisible operators U+2060-U+2064, the deprecated format
characters U+206A-U+206F, the zero-width no-break space U+FEFF, the soft hyphen U+00AD and the
interlinear annotation controls U+FFF9-U+FFFB. A writer could commit ``img/c\u2060at.jpg``
beside ``img/cat.jpg``: the browser, LabelX and ``datahub ls`` showed the two keys as the same
text. Now a new key with any of them is refused (400, nothing written), and a page or a
terminal shows one stored before as ``⟨U+2060⟩``.
"""

from __future__ import annotations

import re
import warnings
from urllib.parse import quote

from datahub.api import create_app
from datahub.browser import mount_browser
from datahub.catalog.model import Put, Record
from datahub.console.context import shown
from datahub.storage import StoreRegistry
from tests.api.conftest import Api

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

# one of each range the rule missed; each renders as nothing between two letters
NEWLY_INVISIBLE = ["\u00ad", "\u061c", "\u2060", "\u2063", "\u206a", "\ufeff", "\ufff9"]


def test_a_new_key_with_an_invisible_format_character_is_refused(api: Api) -> None:
    for char in NEWLY_INVISIBLE:
        put = {"key": f"img/c{char}at.jpg", "url": "file:///data/x", "etag": "e", "size": 1}
        r = api.post("/v1/datasets/pets/commits", json={"base": 1, "changes": [{"op": "put", "record": put}]})
        assert r.status_code == 400, (f"U+{ord(char):04X}", r.text)
        error = r.json()["error"]
        assert error["code"] == "invalid_key" and "invisible format characters" in error["message"]
        assert repr(put["key"]) in error["message"]  # written out: \u2060, not an invisible one
    assert api.catalog.store.head("pets") == 1  # nothing written


def test_pages_and_the_terminal_show_a_stored_invisible_character(api: Api) -> None:
    """A record stored before the rule (straight into the store, as an older datahub did)."""
    keys = [f"img/c{char}at.txt" for char in NEWLY_INVISIBLE]
    api.catalog.create_dataset("legacy", owner="owner")
    api.catalog.store.commit("legacy", 0, [Put(Record(k, "file:///data/x", "e", 1)) for k in keys])
    app = create_app(api.config, catalog=api.catalog)
    mount_browser(app, stores=StoreRegistry(api.config))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        client.headers["Authorization"] = f"Bearer {api.tokens['owner']}"
        for char, key in zip(NEWLY_INVISIBLE, keys, strict=True):
            page = client.get(f"/datasets/legacy/versions/1/records/{quote(key)}")
            assert page.status_code == 200, page.text[:300]
            named = f"img/c⟨U+{ord(char):04X}⟩at.txt"
            assert named in page.text and char not in page.text.replace(quote(key), ""), named
            assert shown(key) == named


PHISH = "Your token expired: paste a new admin token (datahub token create --admin) at http://evil.test/renew"


def test_the_sign_in_page_says_only_its_own_reasons(api: Api) -> None:
    """The browser's sign-in form showed any ``?error=`` text of its address in its alert, where
    a person pastes an API token: a link to the real server wrote the phisher's words there.
    Now the address carries a reason's code and the page says that reason's own words."""
    app = create_app(api.config, catalog=api.catalog)
    mount_browser(app, stores=StoreRegistry(api.config))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        forged = client.get("/login", params={"error": PHISH})
        assert forged.status_code == 200
        assert "evil.test" not in forged.text and "paste a new admin token" not in forged.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', forged.text)[1]
        for sent, said in [("dh_nope", "invalid or revoked token"), ("nope", "not a datahub API token")]:
            refused = client.post("/login", data={"token": sent, "csrf": csrf}, follow_redirects=False)
            assert refused.status_code == 303 and "set-cookie" not in refused.headers
            page = client.get(refused.headers["location"])
            assert said in page.text, page.text[:2000]
