"""A job's payload: validated by its type when enqueued and when run, carried as JSON.

The store and the broker only ever see JSON, so what a job gets back is what ``json.loads``
gives, or its pydantic model validated from it. Errors name the job and the field, never the
value: a payload quotes data. A dict key can be data too (an id, a name), so a path names a
dict's entries ``<key>`` (``payload.<key>[3].<key>``); a model's own field names are kept.

``check_storable`` holds the limits every store keeps alike, checked before any is asked: a
payload at most ``max_payload_bytes`` as compact UTF-8 JSON, nested at most ``MAX_NESTING``
levels, no NUL character in any of its strings or keys; ``check_text`` those of a tenant id and
an idempotency key, which a store keeps as a column or a key.
"""

from __future__ import annotations

import functools
import json
import math
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ValidationError

from ddd_celery.background.errors import InvalidEnqueueError
from ddd_celery.background.store import JsonValue

DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576
"""1 MiB: a store hands a job's payload whole to a claim; Redis serves nobody meanwhile."""
MAX_NESTING = 100
"""Lists and dicts within each other, at most: far past any document, far below a recursion."""
KEY = "<key>"
"""What a path says for a dict's entry: the key itself may be data."""

NOT_JSON = "cannot be carried as JSON"
HOLDS_NUL = "holds a NUL character, which no store keeps"
NOT_UNICODE = "holds a lone surrogate (not valid Unicode), which no store keeps"
TOO_DEEP = f"is nested deeper than {MAX_NESTING} levels"


def json_problem(value: object, path: str = "payload") -> str | None:
    """The path of the first part of ``value`` JSON would not give back unchanged, or None.

    JSON is None, bool, int, finite float, str, lists of JSON and dicts of str to JSON: a tuple
    would come back a list, an int key a str, NaN not at all. Past ``MAX_NESTING`` levels the
    walk stops and names the part too deep, so no nesting reaches Python's recursion limit.
    """
    try:
        _bound(value, 1, False)
    except _Refused as refused:
        return refused.path(path)
    return None


def require_json(value: object, *, what: str, job: str) -> JsonValue:
    """``value`` when it is JSON; ``InvalidEnqueueError`` naming the part that is not."""
    try:
        _bound(value, 1, False)
    except _Refused as refused:
        _refuse(job, value, what, refused)
    return value


def check_storable(job: str, stored: object, *, max_payload_bytes: int) -> JsonValue:
    """``stored`` when every store can keep it; else ``InvalidEnqueueError``.

    It must be JSON, with no NUL character in a string or a key, nested at most
    ``MAX_NESTING`` levels, and its compact JSON as the stores keep it (ASCII, the rest
    escaped) at most ``max_payload_bytes``. One walk checks it all and bounds the size; the
    JSON is written to measure it only when that bound is over the limit. The message names
    the job, the part (a path without dict keys) and the size: never a value.
    """
    try:
        bound = _bound(stored, 1, True)
    except _Refused as refused:
        _refuse(job, stored, "payload", refused)
    if bound <= max_payload_bytes:
        return stored
    try:
        size = len(json.dumps(stored, separators=(",", ":")))
    except ValueError:  # an int past Python's digits limit for str(); the message quotes none
        raise InvalidEnqueueError(
            "the payload holds an int too long to be written as JSON",
            job=job,
            field="payload",
        ) from None
    if size > max_payload_bytes:
        raise InvalidEnqueueError(
            f"the payload is {size} bytes of JSON, more than max_payload_bytes "
            f"({max_payload_bytes})",
            job=job,
            field="payload",
        )
    return stored


def check_text(job: str, field: str, value: str, *, max_bytes: int | None = None) -> None:
    """Refuse a text a store keeps as a column or a key: with a NUL character or a lone
    surrogate (UTF-8 cannot encode it), or longer than ``max_bytes`` in UTF-8."""
    if "\x00" in value:
        raise InvalidEnqueueError(f"{field} {HOLDS_NUL}", job=job, field=field)
    try:
        size = len(value.encode())
    except UnicodeEncodeError:
        raise InvalidEnqueueError(f"{field} {NOT_UNICODE}", job=job, field=field) from None
    if max_bytes is not None and size > max_bytes:
        raise InvalidEnqueueError(
            f"{field} is {size} bytes (UTF-8), more than {max_bytes}", job=job, field=field
        )


def to_stored(
    job: str,
    payload: object,
    payload_type: type[BaseModel] | None,
    *,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> JsonValue:
    """The JSON to store for ``payload``: validated by ``payload_type`` when it is a model,
    and one every store keeps (``check_storable``).

    A model instance is dumped in JSON mode; a mapping is validated by the model first. Raises
    ``InvalidEnqueueError`` naming the field that is wrong.
    """
    if payload_type is not None:
        payload = _dumped(job, validate(job, payload, payload_type))
    elif isinstance(payload, BaseModel):
        payload = _dumped(job, payload)
    return check_storable(job, payload, max_payload_bytes=max_payload_bytes)


def validate(job: str, payload: object, payload_type: type[BaseModel]) -> BaseModel:
    """``payload`` as ``payload_type``; ``InvalidEnqueueError`` naming the first bad field.

    The field is the model's path to it, each dict key written ``<key>`` (``lines[2].<key>``).
    """
    if isinstance(payload, payload_type):
        return payload
    try:
        if isinstance(payload, BaseModel):
            payload = payload.model_dump()
        return payload_type.model_validate(payload)
    except ValidationError as error:
        first = error.errors(include_url=False, include_input=False)[0]
        field = field_path(first["loc"], payload_type)
        raise InvalidEnqueueError(
            f"the payload's field {field!r} is refused by {payload_type.__name__} "
            f"({first['type']})",
            job=job,
            field=field,
        ) from None
    except RecursionError:
        raise InvalidEnqueueError(f"the payload {TOO_DEEP}", job=job, field="payload") from None


def from_stored(job: str, stored: JsonValue, payload_type: type[BaseModel] | None) -> Any:
    """What ``run`` gets: the model validated from the stored JSON, or the JSON itself."""
    if payload_type is None:
        return stored
    return validate(job, stored, payload_type)


def field_path(loc: tuple[int | str, ...], payload_type: type[BaseModel]) -> str:
    """A pydantic error's location as a path: the model's field names kept, indexes as
    ``[n]``, any other part (a dict's key, which may be data) as ``<key>``."""
    names = _field_names(payload_type)
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            shown = part if part in names else KEY
            path += f".{shown}" if path else shown
    return path or "payload"


class _Refused(Exception):
    """A part of a payload that cannot be kept; its path is built on the way out only."""

    def __init__(self, reason: str, suffix: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.trail = [suffix] if suffix else []
        """The path's parts, innermost first."""

    def path(self, root: str) -> str:
        return root + "".join(reversed(self.trail))


_ENTRY = f".{KEY}"
_BIG_INT_BITS = 12_000
"""An int this long may pass Python's limit of digits for ``str()`` (4,300 by default)."""


def _bound(value: object, depth: int, storable: bool) -> int:
    """A bound of the size of ``value``'s compact JSON (at least it); ``_Refused`` for a part
    that is not JSON or, when ``storable``, holds a NUL character.

    A text counts 6 bytes a character (``\\uXXXX``), an int a digit per 3 bits, a float 24.
    """
    if isinstance(value, str):
        if storable and "\x00" in value:
            raise _Refused(HOLDS_NUL)
        return 6 * len(value) + 2
    if value is None or value is True or value is False:
        return 5
    if isinstance(value, int):
        bits = value.bit_length()
        return bits // 3 + 3 if bits < _BIG_INT_BITS else 1 << 62
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Refused(NOT_JSON)
        return 24
    if isinstance(value, list):
        if depth > MAX_NESTING:
            raise _Refused(TOO_DEEP)
        total = 2 + len(value)
        for index, item in enumerate(value):
            try:
                total += _bound(item, depth + 1, storable)
            except _Refused as refused:
                refused.trail.append(f"[{index}]")
                raise
        return total
    if isinstance(value, dict):
        if depth > MAX_NESTING:
            raise _Refused(TOO_DEEP)
        total = 2 + len(value)
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Refused(NOT_JSON, " (a key that is not a str)")
            if storable and "\x00" in key:
                raise _Refused(HOLDS_NUL, " (a key)")
            try:
                total += 6 * len(key) + 3 + _bound(item, depth + 1, storable)
            except _Refused as refused:
                refused.trail.append(_ENTRY)
                raise
        return total
    raise _Refused(NOT_JSON)


def _refuse(job: str, value: object, what: str, refused: _Refused) -> typing.NoReturn:
    path = refused.path(what)
    kind = f" (a {type(value).__name__})" if path == what and refused.reason == NOT_JSON else ""
    raise InvalidEnqueueError(f"{path}{kind} {refused.reason}", job=job, field=path) from None


def _dumped(job: str, model: BaseModel) -> JsonValue:
    """The model in JSON mode; one its serializer cannot dump (nested too deep) is refused."""
    try:
        return model.model_dump(mode="json")
    except RecursionError:
        reason = TOO_DEEP
    except ValueError as error:  # pydantic's own message, never a value
        reason = TOO_DEEP if "depth" in str(error) else f"{NOT_JSON} ({type(error).__name__})"
    raise InvalidEnqueueError(f"the payload {reason}", job=job, field="payload")


@functools.cache
def _field_names(model: type[BaseModel]) -> frozenset[str]:
    """The field names and aliases of ``model`` and of every model its fields hold."""
    names: set[str] = set()
    seen: set[type[BaseModel]] = set()
    waiting = [model]
    while waiting:
        current = waiting.pop()
        if current in seen:
            continue
        seen.add(current)
        for name, info in current.model_fields.items():
            names.add(name)
            for alias in (info.alias, info.validation_alias, info.serialization_alias):
                if isinstance(alias, str):
                    names.add(alias)
            waiting.extend(_models_in(info.annotation))
    return frozenset(names)


def _models_in(annotation: object) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for argument in typing.get_args(annotation):
        yield from _models_in(argument)
