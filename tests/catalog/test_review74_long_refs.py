"""review74: a version reference of more than 4,300 digits was "this is a datahub bug".

``Catalog.resolve`` turned a reference's digits into a number with ``int()``, which CPython
refuses beyond 4,300 digits (ValueError). So ``datahub ls ds@999…`` said "this is a datahub
bug", the API answered 500, and ``v000…1`` (version 1 with leading zeros, as ``v01`` is) was
refused the same way, where docs/catalog.md says a number too large to be a version is simply
not found. The CLI's whole-number options (``--base``) said "invalid parse value".
"""

from __future__ import annotations

import pytest

from datahub.catalog import Catalog, Put
from datahub.errors import VersionNotFound
from tests.api.conftest import Api, api  # noqa: F401 - fixture
from tests.catalog.conftest import rec
from tests.cli.test_cli import dh, src  # noqa: F401 - fixtures

LONG = "9" * 5000  # beyond CPython's 4,300-digit conversion limit


@pytest.mark.parametrize("ref", [LONG, f"v{LONG}", f"-{LONG}"], ids=["digits", "v", "negative"])
def test_a_reference_of_thousands_of_digits_is_not_found(catalog: Catalog, ref: str) -> None:
    catalog.create_dataset("ds")
    catalog.commit("ds", [Put(rec("a"))])
    with pytest.raises(VersionNotFound) as missing:
        catalog.resolve("ds", ref)
    assert "'ds'" in missing.value.message and len(missing.value.message) < 200, missing.value.message
    with pytest.raises(VersionNotFound):
        list(catalog.diff("ds", ref, 1))


def test_leading_zeros_by_the_thousand_still_name_the_version(catalog: Catalog) -> None:
    catalog.create_dataset("ds")
    catalog.commit("ds", [Put(rec("a"))])
    assert catalog.resolve("ds", "v" + "0" * 5000 + "1").seq == 1


def test_the_api_answers_404(api: Api) -> None:  # noqa: F811
    for path in (f"/v1/datasets/pets/versions/{LONG}", f"/v1/datasets/pets/diff?from=1&to=v{LONG}"):
        answer = api.get(path)
        assert answer.status_code == 404, (path[:60], answer.status_code, answer.text[:300])
        assert answer.json()["error"]["code"] == "version_not_found"


def test_the_cli_exits_3_and_refuses_a_long_base_as_a_number(dh, src, tmp_path, capsys) -> None:  # noqa: F811
    assert dh("import", str(src), "--to", "pets")[0] == 0
    code, _, err = dh("ls", f"pets@{LONG}")
    assert code == 3 and "'pets'" in err and "datahub bug" not in err, err[:300]
    changes = tmp_path / "changes.jsonl"
    changes.write_text('{"op": "delete", "key": "x"}\n')
    for base, said in ((LONG, "(5000 digits) is too large a number"), ("-+1", "'-+1' is not a whole number")):
        with pytest.raises(SystemExit) as refused:  # argparse's refusal
            dh("commit", "pets", "--changes", str(changes), f"--base={base}")
        err = capsys.readouterr().err
        assert refused.value.code == 2 and "argument --base: " in err and said in err, err[:300]


def test_a_mount_of_a_version_with_thousands_of_leading_zeros_names_its_path() -> None:
    from fuse_adapter.layout import VersionSpec

    assert VersionSpec.parse("ds@v" + "0" * 5000 + "3").entry() == "v3"
