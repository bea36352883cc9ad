"""A bounded schemathesis run over one app's OpenAPI, in-process (ASGI, no sockets).

Every operation gets ``max_examples`` schema-valid requests and ``max_examples`` schema-invalid
ones; every answer goes through ALL of schemathesis' built-in checks (no server error, status,
content type, headers and body match the schema, schema-valid data accepted, schema-invalid data
rejected, 405 carries ``Allow``, ...). Shared by the datahub API and LabelX tests so both apps
are held to the same checks. Bounded (fixed examples, derandomized) so it stays under a minute
per app on 2 cores, and deterministic: the same cases every run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig

# Targeted check settings (every check stays on; each line says why it differs from the default):
# - negative_data_rejection also takes 413: a schema-invalid body longer than api.max_body_bytes
#   is refused by the body-size guard before it is parsed, which is a rejection all the same.
NEGATIVE_REJECTION_STATUSES = [
    *("400", "401", "403", "404", "405", "406", "409", "415", "422", "428", "429", "5xx"),
    "413",
]
# - positive_data_acceptance also takes 412: a well-formed If-Match naming a revision the
#   dataset is no longer at fails a precondition on the resource's state (RFC 9110), the same
#   kind of answer as the 409 the check already takes; the request itself was valid.
POSITIVE_ACCEPTANCE_STATUSES = ["2xx", "3xx", "401", "403", "404", "409", "412", "429", "5xx"]
CONFIG = {
    "checks": {
        "negative_data_rejection": {"expected-statuses": NEGATIVE_REJECTION_STATUSES},
        "positive_data_acceptance": {"expected-statuses": POSITIVE_ACCEPTANCE_STATUSES},
    }
}


def fuzz(
    app: Any,
    openapi_path: str,
    headers: dict[str, str],
    max_examples: int,
    prepare: Callable[[Any], None] | None = None,
) -> list[str]:
    """Run every operation in both generation modes; return one message per failure.

    ``prepare(case)`` may adjust a schema-valid case before it is sent, only to steer it clear
    of a rule JSON Schema cannot express (each caller lists its rules and why); it must keep
    the case schema-valid, and it never touches the negative cases.
    """
    config = SchemathesisConfig.from_dict(CONFIG)
    schema = schemathesis.openapi.from_asgi(openapi_path, app, config=config)
    failures = []
    for result in schema.get_all_operations():
        op = result.ok()
        for mode in GenerationMode:
            steer = prepare if mode is GenerationMode.POSITIVE else None
            try:
                _run(op, mode, headers, max_examples, steer)
            except Unsatisfiable as exc:
                # Fine only in negative mode, for an operation with no parameter or body at
                # all (/healthz): there is no schema-invalid request to make.
                if mode is GenerationMode.POSITIVE:
                    failures.append(f"{op.label} [{mode.value}]: {exc}")
            except (Exception, BaseExceptionGroup) as exc:
                failures.append(f"{op.label} [{mode.value}]: {exc}")
    return failures


def _run(
    op: Any,
    mode: GenerationMode,
    headers: dict[str, str],
    max_examples: int,
    steer: Callable[[Any], None] | None,
) -> None:
    """``max_examples`` cases of one operation in one mode, each through every check."""

    @given(op.as_strategy(generation_mode=mode))
    @settings(
        max_examples=max_examples,
        deadline=None,  # the machine is shared: never fail on timing
        suppress_health_check=list(HealthCheck),
        derandomize=True,  # the same cases every run
        database=None,
    )
    def check(case: Any) -> None:
        if steer is not None:
            steer(case)
        case.call_and_validate(headers=headers)  # checks=None: every built-in check

    check()
