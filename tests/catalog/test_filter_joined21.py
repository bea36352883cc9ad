"""A filter term joined by a word instead of a comma (newuser21 found it): ``labels.class=cat
and meta.split=val`` parsed as one term with the value ``cat and meta.split=val``, which
matched nothing and said nothing. And ``str(filter)``, which a LabelX project keeps and parses
again at export, must parse back to the same filter for every value it holds."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from datahub.catalog.filter import RecordFilter
from datahub.errors import InvalidInput


@pytest.mark.parametrize(
    ("spec", "hint"),
    [
        ("labels.class=cat and meta.split=val", "labels.class=cat,meta.split=val"),
        ("labels.class=cat AND size>3", "labels.class=cat,size>3"),
        ("meta.split!=test && key=a/b.jpg", "meta.split!=test,key=a/b.jpg"),
        ("labels.class=cat or labels.class=dog", "labels.class=cat|VALUE"),
    ],
)
def test_a_term_joined_by_a_word_is_refused_with_the_comma_form(spec: str, hint: str) -> None:
    with pytest.raises(InvalidInput) as err:
        RecordFilter.parse(spec)
    assert hint in str(err.value) and "joined by ','" in str(err.value)


def test_a_value_that_holds_such_words_is_kept_bare_or_quoted() -> None:
    assert RecordFilter.parse("meta.caption=a cat and a dog").terms[0].values == ("a cat and a dog",)
    quoted = RecordFilter.parse('labels.class="cat and meta.split=val"')
    assert quoted.terms[0].values == ("cat and meta.split=val",)


# ',' separates terms and '|' values, quoted or not: no value holds either
_values = st.one_of(
    st.text(st.characters(blacklist_characters=",|", blacklist_categories=("Cs",)), min_size=1, max_size=20),
    st.sampled_from(["=cat", "123", "true", "null", '"x"', " padded ", "cat and meta.a=b"]),
)


@given(st.lists(_values, min_size=1, max_size=3), st.sampled_from(["=", "!="]))
def test_str_of_a_filter_parses_back_to_the_same_filter(values: list[str], op: str) -> None:
    made = RecordFilter.parse([f"labels.class{op}" + "|".join(json.dumps(v) for v in values)])
    assert made is not None
    assert RecordFilter.parse(str(made)) == made
