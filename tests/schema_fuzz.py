"""A bounded schemathesis run over one app's OpenAPI, in-process (ASGI, no sockets).

Every operation gets ``max_examples`` generated requests; each answer must not be a server
error and must match the schema of its documented status. Shared by the datahub API and
LabelX tests so both apps are held to the same checks.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

CHECKS = [not_a_server_error, response_schema_conformance]


def fuzz(app: Any, openapi_path: str, headers: dict[str, str], max_examples: int) -> list[str]:
    """Run every operation; return one message per operation that failed a check."""
    schema = schemathesis.openapi.from_asgi(openapi_path, app)
    failures = []
    for result in schema.get_all_operations():
        op = result.ok()

        @given(op.as_strategy())
        @settings(
            max_examples=max_examples,
            deadline=None,  # the machine is shared: never fail on timing
            suppress_health_check=list(HealthCheck),
            derandomize=True,  # the same cases every run
            database=None,
        )
        def check(case: Any) -> None:
            case.call_and_validate(headers=headers, checks=CHECKS)

        try:
            check()
        except (Exception, BaseExceptionGroup) as exc:
            failures.append(f"{op.label}: {exc}")
    return failures
