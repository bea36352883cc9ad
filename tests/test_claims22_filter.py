"""A filter's second term joined by `||` is refused as `and`, `or` and `&&` are (claims22).

docs/cli.md: a term joined by a word or operator instead of a comma exits 2 naming the comma
form (newuser21). `||` was in the rule's pattern, but the value is cut at each `|` (one field's
alternatives) before the rule looks, so `labels.class=cat || size>1` was one term whose values
were `cat `, `` and ` size>1`: it matched nothing and said only that nothing matched.
"""

from __future__ import annotations

import pytest

from datahub.catalog.filter import RecordFilter
from datahub.errors import InvalidInput


@pytest.mark.parametrize("spec", ["labels.class=cat || size>1", "labels.class=cat || labels.class=dog"])
def test_a_term_joined_by_two_pipes_is_refused_naming_the_way_to_write_it(spec: str) -> None:
    with pytest.raises(InvalidInput, match=r"terms are joined by ',' \(all must hold\), not '\|\|'") as info:
        RecordFilter.parse(spec)
    assert "labels.class=cat|VALUE" in str(info.value)
    # since newuser24 a quoted value may hold `|` (before, every `|` cut it, so the message
    # offered no quoting): the quoted form it names parses, as one value holding `||`
    quoted = str(info.value).split("is quoted: ", 1)[1]
    assert RecordFilter.parse(quoted).terms[0].values == (spec.split("=", 1)[1],)


def test_alternatives_still_parse() -> None:
    assert RecordFilter.parse("labels.class=cat|dog").terms[0].values == ("cat", "dog")
    assert RecordFilter.parse("labels.class=cat | dog").terms[0].values == ("cat", "dog")
