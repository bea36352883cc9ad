"""review73: a tag spelt like a version reference in another case (``V3``, ``Latest``) was taken.

Tags never look like version references so that ``ds@v3`` always means version 3, whoever
tagged what; the rule compared case-sensitively, so a tag ``V3`` on version 7 made ``ds@V3``
read version 7 while ``ds@v3`` read version 3, and a tag ``Latest`` made ``ds@Latest`` an old
version instead of the head. Such tags are refused in any case now (the API's schema says the
same); one stored before the rule still resolves and can be deleted.
"""

from __future__ import annotations

import pytest

from datahub.catalog import Catalog, Put
from datahub.errors import InvalidName
from tests.catalog.conftest import raw_store, rec


def _three_versions(catalog: Catalog) -> None:
    catalog.create_dataset("ds")
    for i in range(3):
        catalog.commit("ds", [Put(rec(f"k{i}"))])


@pytest.mark.parametrize("tag", ["V3", "V1", "Latest", "LATEST", "V007"])
def test_a_tag_like_a_version_in_another_case_is_refused(catalog: Catalog, tag: str) -> None:
    _three_versions(catalog)
    with pytest.raises(InvalidName, match="version reference"):
        catalog.tag("ds", tag, 1)
    assert all(v.tags == () for v in catalog.log("ds"))


def test_such_a_tag_stored_before_the_rule_still_resolves_and_can_be_deleted(catalog: Catalog) -> None:
    _three_versions(catalog)
    raw_store(catalog).set_tag("ds", "V3", 1)  # as an older datahub allowed
    assert catalog.resolve("ds", "V3").seq == 1 and catalog.resolve("ds", "v3").seq == 3
    catalog.untag("ds", "V3")
    assert catalog.resolve("ds", 1).tags == ()
