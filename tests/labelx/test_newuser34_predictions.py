"""What newuser34 read from ``datahub labelx preannotate P --predictions FILE`` with a line that
is not JSON: "predictions line 1: Expecting value: line 1 column 1 (char 0)", Python's JSON
reader's words, naming neither what was wrong nor what a line should be. It now says the line
is not JSON and what each line holds."""

from __future__ import annotations

import pytest

from datahub.errors import ManifestError
from labelx.preannotate import parse_jsonl
from labelx.schema import parse_schema


@pytest.mark.parametrize("line", ["not json", '{"key": "a.jpg", "value": "cat"'])
def test_a_line_that_is_not_json_says_so_and_what_a_line_holds(line: str) -> None:
    schema = parse_schema({"kind": "classification", "classes": ["cat", "dog"]})
    good = '{"key": "b.jpg", "value": "dog"}'
    with pytest.raises(ManifestError) as caught:
        list(parse_jsonl([good, line], schema))
    message = caught.value.message
    assert message.startswith("predictions line 2: not JSON ("), message
    assert '{"key": KEY, "value": LABEL, "score": 0.9, "model": NAME}' in message, message
    assert message.endswith("; nothing was imported"), message
    assert "(char " not in message, message
