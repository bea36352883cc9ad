"""The CLI as docs/deployment.md drives it (platform14).

docs/deployment.md told operators to create a node's token with ``datahub token create
<principal>``, which the CLI refuses (``--principal`` is required). tests/test_docs_commands.py
let it pass: an inline span the parser refuses only for a missing argument is taken as prose
naming a command, and this one gave its argument in the wrong place. The commands an operator
copies to hand out access, ``datahub token create`` and ``datahub dataset update``, must parse
as shown wherever the docs give them with arguments, inline or fenced.
"""

from __future__ import annotations

import pytest

from tests.doc_commands import checked_commands, parse_error


@pytest.mark.parametrize("words", [("token", "create"), ("dataset", "update")])
def test_the_access_commands_the_docs_show_parse_as_written(words: tuple[str, str]) -> None:
    shown = [  # with arguments: a bare `datahub token create` in prose names the command
        c
        for c in checked_commands()
        if c.program == "datahub" and c.args[: len(words)] == words and len(c.args) > len(words)
    ]
    assert len(shown) >= 3, shown
    refused = [
        f"{c.shown.where}: `{c.shown.text}`: {error}"
        for c in shown
        if (error := parse_error(c.program, c.args)) is not None
    ]
    assert not refused, "\n".join(refused)
