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
    found = _problem(value, path, 1, storable=False)
    return None if found is None else found[0]


def require_json(value: object, *, what: str, job: str) -> JsonValue:
    """``value`` when it is JSON; ``InvalidEnqueueError`` naming the part that is not."""
    found = _problem(value, what, 1, storable=False)
    if found is not None:
        _refuse(job, value, what, found)
    return value


def check_storable(job: str, stored: JsonValue, *, max_payload_bytes: int) -> None:
    """Refuse (``InvalidEnqueueError``) a JSON payload some store cannot keep, or too large.

    Its size is that of the compact JSON the stores keep (ASCII, non-ASCII escaped). The
    message names the job, the part (a path without dict keys) and the size: never a value.
    """
    found = _problem(stored, "payload", 1, storable=True)
    if found is not None:
        _refuse(job, stored, "payload", found)
    size = len(json.dumps(stored, separators=(",", ":")))
    if size > max_payload_bytes:
        raise InvalidEnqueueError(
            f"the payload is {size} bytes of JSON, more than max_payload_bytes "
            f"({max_payload_bytes})",
            job=job,
            field="payload",
        )


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


def to_stored(job: str, payload: object, payload_type: type[BaseModel] | None) -> JsonValue:
    """The JSON to store for ``payload``: validated by ``payload_type`` when it is a model.

    A model instance is dumped in JSON mode; a mapping is validated by the model first. Raises
    ``InvalidEnqueueError`` naming the field that is wrong.
    """
    if payload_type is not None:
        return _dumped(job, validate(job, payload, payload_type))
    if isinstance(payload, BaseModel):
        return _dumped(job, payload)
    return require_json(payload, what="payload", job=job)


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


def _problem(value: object, path: str, depth: int, *, storable: bool) -> tuple[str, str] | None:
    """``(path, what is wrong)`` of the first part of ``value`` that is not JSON (or, when
    ``storable``, that holds a NUL character), or None."""
    if isinstance(value, str):
        return (path, HOLDS_NUL) if storable and "\x00" in value else None
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, NOT_JSON)
    if isinstance(value, list | dict) and depth > MAX_NESTING:
        return path, TOO_DEEP
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _problem(item, f"{path}[{index}]", depth + 1, storable=storable)
            if found is not None:
                return found
        return None
    if isinstance(value, dict):
        entry = f"{path}.{KEY}"
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} (a key that is not a str)", NOT_JSON
            if storable and "\x00" in key:
                return f"{path} (a key)", HOLDS_NUL
            found = _problem(item, entry, depth + 1, storable=storable)
            if found is not None:
                return found
        return None
    return path, NOT_JSON


def _refuse(job: str, value: object, what: str, found: tuple[str, str]) -> typing.NoReturn:
    path, reason = found
    kind = f" (a {type(value).__name__})" if path == what and reason == NOT_JSON else ""
    raise InvalidEnqueueError(f"{path}{kind} {reason}", job=job, field=path)


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
