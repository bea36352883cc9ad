"""The typed bodies of LabelX's JSON API, so its OpenAPI describes every request and answer.

Request models take exactly the fields the handlers read, and nothing else: an unknown field
is a 400 naming it (ignored, a misspelt ``value`` saved an item with no label, and a misspelt
``accept`` rejected it); response models mirror the JSON the service builds, field for field, so the wire
format does not change. A body that does not fit is a 400 ``invalid_input`` (see app.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from datahub.api.schemas import whole_number  # JSON Schema's integer, as the datahub API takes it
from datahub.validation import NAME_PATTERN, REF_PATTERN
from labelx.auth import MIN_PASSWORD, TOKEN_DAYS
from labelx.service import MAX_TASK_SIZE

# a strict integer that fits a SQLite INTEGER (larger ones are bad input, not an overflow) and is
# exact as a JSON Schema number (a double), so a schema-valid value is always one the server takes
MAX_INT = 2**53 - 1
StrictInt = Annotated[int, Field(strict=True, ge=-MAX_INT, le=MAX_INT), BeforeValidator(whole_number)]
# some character that str.strip() keeps (Python's whitespace, which counts \x1c-\x1f too)
NOT_BLANK = "[^\\t-\\r\\x1c- \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
# a class name: no control character (a line break split YOLO's classes.txt, labelx.schema
# export_clash) and some character that str.strip() keeps
_CONTROL_CHARS = "\\x00-\\x1f\\x7f"
_NO_CONTROL = f"[^{_CONTROL_CHARS}]*"
CLASS_NAME = "^" + _NO_CONTROL + NOT_BLANK.replace("[^", "[^" + _CONTROL_CHARS, 1) + _NO_CONTROL + "$"
Role = Literal["annotator", "reviewer", "admin"]  # labelx.entities.ROLES (a test keeps them equal)
# user, project and dataset names: the server's check_name rule, in the schema
Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)]

# each pattern of a request field, in words (a refused value is reported with these, app.py)
PATTERN_RULES = {
    NAME_PATTERN: "use 1-63 characters from a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
    REF_PATTERN: "use a version number (3 or v3), latest, or a tag",
    NOT_BLANK: "must not be blank",
    CLASS_NAME: "must not be blank or hold a control character (a line break, a tab ...)",
    "^#[0-9a-fA-F]{6}$": "use a colour as #rrggbb (six hexadecimal digits)",
    "^[0-9A-Za-z]$": "use one letter or digit",
    "^[A-Za-z_][A-Za-z0-9_]{0,62}$": "use 1-63 characters from A-Z, a-z, 0-9 and '_', not starting with a digit",
}


# --- requests ------------------------------------------------------------------------------------
class Body(BaseModel):
    """A request body: its fields and no others (``additionalProperties: false`` in the schema)."""

    model_config = ConfigDict(extra="forbid")


class UserCreate(Body):
    name: Name = Field(description="user name (same rules as dataset names)")
    role: Role = "annotator"
    password: str = Field(min_length=MIN_PASSWORD, description=f"at least {MIN_PASSWORD} characters")


class TokenCreate(Body):
    description: str = ""
    password: str = Field(
        "",
        max_length=1024,
        description="the caller's password: required from a browser session, not with a bearer token",
    )
    expires_days: int | None = Field(
        TOKEN_DAYS,
        ge=1,
        le=3650,
        description=f"days until it opens nothing (default {TOKEN_DAYS}); null: until revoked",
    )


class TokenRevoke(Body):
    token: str = ""
    id: str = Field("", max_length=64, description="the token's id (GET /api/tokens) instead of its secret")


class LabelClassSpec(Body):
    name: str = Field(
        pattern=CLASS_NAME,
        description="unique in the schema; at most 64 characters once stripped; no control character",
    )
    color: str | None = Field(None, pattern="^#[0-9a-fA-F]{6}$", description="default: from a palette")
    key: str | None = Field(
        None,
        pattern="^[0-9A-Za-z]$",
        description=(
            "unique one-character shortcut, not a UI key (a s u n p d b z); default: 1-9, 0, then the "
            "letters left free, by position (at most 28 classes get one)"
        ),
    )


class LabelSchemaSpec(Body):
    """The label schema. Rules JSON Schema cannot say (checked by the server, 400): class names
    and shortcut keys are unique, the UI's own keys are not shortcuts, ``multi`` is for
    classification only, and a multi-label class name holds no ';' (it joins a value's classes
    in the CSV export)."""

    kind: Literal["classification", "detection"] = "classification"  # labelx.schema.KINDS
    classes: list[Annotated[str, Field(pattern=CLASS_NAME, max_length=64)] | LabelClassSpec] = Field(
        min_length=1, max_length=64, description="class names, or objects with name/color/key"
    )
    field: str | None = Field(None, pattern="^[A-Za-z_][A-Za-z0-9_]{0,62}$", description="label field")
    multi: bool = False


class ProjectCreate(Body):
    name: Name
    dataset: Name
    version: StrictInt | Annotated[str, Field(pattern=REF_PATTERN)] | None = Field(
        None, description="version number or tag; default latest"
    )
    prefix: str | None = Field(None, description="only keys under this prefix (a key, '/' may end it)")
    filter: str | None = Field(
        None, description="record filter, as in `datahub ls --filter` (its grammar is checked by the server)"
    )
    schema_: LabelSchemaSpec = Field(alias="schema", description="the label schema")
    task_size: Annotated[int, Field(strict=True, ge=1, le=MAX_TASK_SIZE), BeforeValidator(whole_number)] = 50
    annotators: list[Name] | None = None
    assign: Literal["round-robin", "claim"] = "round-robin"


class CommitLabels(Body):
    to_dataset: str | None = Field(None, description="commit into this dataset instead of the source")
    message: str | None = None
    overwrite: bool = Field(
        False,
        description="commit over labels changed at the dataset's head since the project's version "
        "(without it such a commit is refused, 409, naming them)",
    )


class TaskAssign(Body):
    assignee: str | None = Field(None, description="user name; null or empty unassigns")


class ItemSave(Body):
    version: StrictInt = Field(description="the item version this edit is based on (409 if stale)")
    value: Any = None
    skip: bool = False


class ItemReview(Body):
    """Accept (``accept: true``), or reject with a comment that is not blank."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [
                {"required": ["accept"], "properties": {"accept": {"const": True}}},
                {
                    "required": ["comment"],
                    "properties": {"comment": {"type": "string", "pattern": NOT_BLANK}},
                },
            ]
        },
    )

    version: StrictInt
    accept: bool = False
    comment: str | None = Field(None, description="required (not blank) when rejecting")


# --- responses -----------------------------------------------------------------------------------


class UserOut(BaseModel):
    name: str
    role: str


class TokenOut(BaseModel):
    token: str


class TokenInfoOut(BaseModel):
    """A live token as listed: never its secret (none is kept; the id is its SHA-256)."""

    id: str
    user: str
    description: str
    created: float
    expires: float | None = None  # None: until revoked
    made_by: str | None = None  # the id of the token it was made with: revoking that one revokes this


class Ok(BaseModel):
    ok: bool


class ProjectOut(BaseModel):
    id: int
    name: str
    dataset: str
    version: int
    prefix: str
    filter: str
    schema_: dict[str, Any] = Field(alias="schema")
    task_size: int
    created_by: str
    created_at: float
    item_count: int


class TaskSummary(BaseModel):
    id: int
    number: int
    assignee: str | None
    assignee_id: int | None
    counts: dict[str, int]
    total: int


class TaskTaken(BaseModel):
    task_id: int


class ItemOut(BaseModel):
    id: int
    task_id: int
    position: int
    key: str
    original: Any = Field(
        description="the version's label if it is a value of the project's schema (the starting value)"
    )
    dataset_label: Any = Field(
        description="the version's label as the dataset has it, whether or not it fits the schema"
    )
    dataset_label_fits: bool = Field(
        description="false when dataset_label is not a value of the schema: committing a label replaces it; "
        "a skipped item keeps it"
    )
    value: Any
    status: str
    version: int
    comment: str | None
    suggestion: dict[str, Any] | None
    committed_in: int | None = Field(
        default=None,
        description="the version of the project's dataset that holds this item's accepted label "
        "(committed); null until then",
    )


class TaskHead(BaseModel):
    id: int
    number: int
    assignee: str | None


class TaskView(BaseModel):
    task: TaskHead
    project: ProjectOut
    items: list[ItemOut]
    can_edit: bool


class Submitted(BaseModel):
    submitted: int


class HourCount(BaseModel):
    hour: int
    items: int


class ExportOut(BaseModel):
    dataset: str
    seq: int
    changed: int
    author: str
    created_at: float


class Stats(BaseModel):
    project: ProjectOut
    counts: dict[str, int]
    per_annotator: dict[str, dict[str, int]]
    per_class: dict[str, dict[str, int]]
    per_hour: list[HourCount]
    suggestions: dict[str, dict[str, int | float]] = Field(
        description="per class: accepted, corrected and the acceptance rate"
    )
    exports: list[ExportOut]
    replaces_unfit: int = Field(
        description="accepted labels the next commit writes over a version's label that is not a value "
        "of the schema (dataset_label_fits false)"
    )
    to_commit: int = Field(
        0,
        description="accepted labels a commit onto the project's dataset would write (changed, not yet committed)",
    )
    nothing_to_commit: str | None = Field(
        None,
        description="when to_commit is 0: why a commit onto the project's dataset finds nothing, and what "
        "to do (the message the commit's 409 gives)",
    )


class Committed(BaseModel):
    dataset: str
    seq: int
    modified: int


class Matched(BaseModel):
    matched: int


class ErrorDetail(BaseModel):
    code: str = Field(description="stable machine-readable code, e.g. invalid_input, stale_version")
    message: str = Field(description="what went wrong and what to do")
    details: dict[str, Any] | None = None


class ErrorBody(BaseModel):
    """Every LabelX error: ``{"error": {code, message, details?}}``."""

    error: ErrorDetail


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in {
        400: "invalid input (a body or parameter that does not fit, a bad schema or value)",
        401: "not logged in and no API token",
        403: "the caller's role may not do this, or the CSRF token is missing",
        404: "unknown project, task, item, user or token (or one the caller may not see)",
        409: "conflict (a stale item version, a name taken, an item claimed by someone else)",
        412: "the image behind an item changed in storage since the project was made",
        413: "request body larger than api.max_body_bytes",
    }.items()
}
