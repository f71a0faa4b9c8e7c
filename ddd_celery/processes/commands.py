"""Commands as the outbox keeps them: ``{"type": <class name>, "body": <JSON>}``.

Only the command types a process declares may be stored, and only those are built back, so
stored data never chooses what class is imported.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pydantic import BaseModel, ValidationError

from ddd_celery.declarations.process import ProcessDeclaration
from ddd_celery.processes.errors import InvalidDecisionError


def encode_command(declaration: ProcessDeclaration, command: object) -> dict[str, Any]:
    """The stored form of ``command``; ``InvalidDecisionError`` for an undeclared type or a
    body JSON cannot carry."""
    kind = type(command).__name__
    if declaration.commands.get(kind) is not type(command):
        raise InvalidDecisionError(
            f"it sends a {kind}, which is not one of its declared commands "
            f"({', '.join(sorted(declaration.commands)) or 'none'})",
            process=declaration.name,
        )
    if isinstance(command, BaseModel):
        body: Any = command.model_dump(mode="json")
    else:
        body = {f.name: getattr(command, f.name) for f in dataclasses.fields(command)}  # type: ignore[arg-type]
    try:
        text = json.dumps(body, allow_nan=False)
    except (TypeError, ValueError):
        text = None
    if text is None or json.loads(text) != body:
        raise InvalidDecisionError(
            f"the {kind} it sends cannot be stored as JSON: give it fields of JSON values",
            process=declaration.name,
        )
    return {"type": kind, "body": body}


def decode_command(declaration: ProcessDeclaration, stored: Any) -> object:
    """The command ``encode_command`` stored; ``ValueError`` for a type or body it cannot
    build (the message names the type, never the body)."""
    kind = stored.get("type") if isinstance(stored, dict) else None
    command_type = declaration.commands.get(kind) if isinstance(kind, str) else None
    if command_type is None or not isinstance(stored.get("body"), dict):
        raise ValueError(
            f"process {declaration.name!r}: a stored command of type {kind!r} is not one it "
            "declares"
        )
    body = stored["body"]
    try:
        if issubclass(command_type, BaseModel):
            return command_type.model_validate(body)
        return command_type(**body)
    except (ValidationError, TypeError):
        pass
    # raised outside the except: pydantic's error, as a context, would quote the body
    raise ValueError(f"process {declaration.name!r}: a stored {kind} no longer fits its type")
