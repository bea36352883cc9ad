"""newuser42: the browser's pages of a dataset with no versions say how version 1 is made.

The diff page of a dataset just created said only "dataset 'fresh' has no versions to compare
yet", and its version page "has no versions yet; import or commit to create version 1": no
command to run. Both now name ``import`` and ``commit`` as commands (shown as ``<code>``).
"""

from __future__ import annotations

import pytest

PAGE = {"Accept": "text/html"}
COMMANDS = (
    "create version 1 with <code>datahub import SRC --to fresh</code> or "
    "<code>datahub commit fresh --changes FILE.jsonl</code>"
)


@pytest.mark.parametrize(
    ("address", "status", "says"),
    [
        ("/datasets/fresh/diff", 400, "has no versions to compare yet"),
        ("/datasets/fresh/diff?from=0&to=1", 400, "has no versions to compare yet"),
        ("/datasets/fresh/versions/latest", 404, "has no versions yet"),
        ("/datasets/fresh/versions/v1", 404, "has no versions yet"),
    ],
)
def test_a_page_of_a_dataset_with_no_versions_names_the_commands_that_make_one(
    env, client, address, status, says
):
    env.catalog.create_dataset("fresh")
    page = client.get(address, headers=PAGE)
    assert page.status_code == status, page.text[:500]
    assert f"dataset &#39;fresh&#39; {says}: {COMMANDS}" in page.text, page.text[-1500:]
