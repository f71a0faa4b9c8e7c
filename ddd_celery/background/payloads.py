"""A job's payload: validated by its type when enqueued and when run, carried as JSON.

The store and the broker only ever see JSON, so what a job gets back is what ``json.loads``
gives, or its pydantic model validated from it. Errors name the job and the field, never the
value: a payload quotes data.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ValidationError

from ddd_celery.background.errors import InvalidEnqueueError
from ddd_celery.background.store import JsonValue


def json_problem(value: object, path: str = "payload") -> str | None:
    """The path of the first part of ``value`` JSON would not give back unchanged, or None.

    JSON is None, bool, int, finite float, str, lists of JSON and dicts of str to JSON: a tuple
    would come back a list, an int key a str, NaN not at all.
    """
    if value is None or isinstance(value, bool | int | str):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, list):
        for index, item in enumerate(value):
            problem = json_problem(item, f"{path}[{index}]")
            if problem is not None:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} (a key that is not a str)"
            problem = json_problem(item, f"{path}.{key}")
            if problem is not None:
                return problem
        return None
    return path


def require_json(value: object, *, what: str, job: str) -> JsonValue:
    """``value`` when it is JSON; ``InvalidEnqueueError`` naming the part that is not."""
    problem = json_problem(value, what)
    if problem is not None:
        kind = f" (a {type(value).__name__})" if problem == what else ""
        raise InvalidEnqueueError(
            f"{problem}{kind} cannot be carried as JSON", job=job, field=problem
        )
    return value


def to_stored(job: str, payload: object, payload_type: type[BaseModel] | None) -> JsonValue:
    """The JSON to store for ``payload``: validated by ``payload_type`` when it is a model.

    A model instance is dumped in JSON mode; a mapping is validated by the model first. Raises
    ``InvalidEnqueueError`` naming the field that is wrong.
    """
    if payload_type is not None:
        model = validate(job, payload, payload_type)
        return model.model_dump(mode="json")
    if isinstance(payload, BaseModel):
        return payload.model_dump(mode="json")
    return require_json(payload, what="payload", job=job)


def validate(job: str, payload: object, payload_type: type[BaseModel]) -> BaseModel:
    """``payload`` as ``payload_type``; ``InvalidEnqueueError`` naming the first bad field."""
    if isinstance(payload, payload_type):
        return payload
    try:
        if isinstance(payload, BaseModel):
            payload = payload.model_dump()
        return payload_type.model_validate(payload)
    except ValidationError as error:
        first = error.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "payload"
        raise InvalidEnqueueError(
            f"the payload's field {field!r} is refused by {payload_type.__name__} "
            f"({first['type']})",
            job=job,
            field=field,
        ) from None


def from_stored(job: str, stored: JsonValue, payload_type: type[BaseModel] | None) -> Any:
    """What ``run`` gets: the model validated from the stored JSON, or the JSON itself."""
    if payload_type is None:
        return stored
    return validate(job, stored, payload_type)
