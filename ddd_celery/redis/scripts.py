"""The Lua scripts of the stores, kept as files whose headers document the key layout."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from importlib import resources
from typing import Any
from weakref import WeakKeyDictionary

from redis.exceptions import NoScriptError

from ddd_celery.redis import _held_connections
from ddd_celery.redis._held_connections import HeldConnections
from ddd_celery.redis.connection import RedisClient

_HELD: WeakKeyDictionary[RedisClient, HeldConnections] = WeakKeyDictionary()
"""One ``HeldConnections`` per client: every store of a client shares a thread's connection."""


class LuaScript:
    """A script run by its sha in one round trip, on the thread's held connection
    (``HeldConnections``); loaded again when Redis lost it (a restart, a ``SCRIPT FLUSH``).

    redis-py's ``Script`` does the same through the client's command path, and first checks
    whether its client is a pipeline: an ``isinstance`` against a class built on typing's
    ``Protocol``, a slow check, paid by every round trip of beat and of the workers. With
    ``_held_connections.HELD`` false every call is that ``Script``'s.
    """

    def __init__(self, client: RedisClient, source: str) -> None:
        self._connections = held_connections(client)
        self._script = client.register_script(source)

    def __call__(self, *, keys: Sequence[str] = (), args: Sequence[str | int] = ()) -> Any:
        if not _held_connections.HELD:  # redis-py's own path: its Script, a pooled connection
            return self._script(keys=list(keys), args=list(args))
        try:
            return self._connections.execute("EVALSHA", self._script.sha, len(keys), *keys, *args)
        except NoScriptError:  # redis-py's Script loads it, then runs it
            return self._script(keys=list(keys), args=list(args))

    def each(self, calls: Iterable[tuple[Sequence[str], Sequence[str | int]]]) -> list[Any]:
        """The script run for each ``(keys, args)`` of ``calls``, its replies in order, each
        call sent as soon as it is made, before the replies of those before are read
        (``HeldConnections.execute_each``): Redis runs one while the caller makes the next."""
        if not _held_connections.HELD:
            return [self._script(keys=list(keys), args=list(args)) for keys, args in calls]
        made: list[tuple[Any, ...]] = []

        def commands() -> Iterator[tuple[Any, ...]]:
            for keys, args in calls:
                command = ("EVALSHA", self._script.sha, len(keys), *keys, *args)
                made.append(command)
                yield command

        pending = commands()
        try:
            return self._connections.execute_each(pending)
        except NoScriptError:  # loaded, then every call sent again (each is safe to run twice)
            self._script.registered_client.script_load(self._script.script)
            # those made so far, then the rest (a client that sends each in turn stopped there)
            return self._connections.execute_each(itertools.chain(list(made), pending))


def register(client: RedisClient, name: str, *, after: str | None = None) -> LuaScript:
    """``lua/<name>`` on ``client``, preceded by ``lua/<after>`` (helpers it shares) if given.

    Each call is one EVALSHA round trip; the first time Redis answers NOSCRIPT (a new or
    restarted server) it is loaded, at the cost of two more round trips once.
    """
    lua = resources.files(__package__).joinpath("lua")
    source = lua.joinpath(name).read_text(encoding="utf-8")
    if after is not None:
        source = lua.joinpath(after).read_text(encoding="utf-8") + source
    return LuaScript(client, source)


def held_connections(client: RedisClient) -> HeldConnections:
    """The ``HeldConnections`` of ``client``, shared by every store built on it."""
    held = _HELD.get(client)
    if held is None:
        held = _HELD.setdefault(client, HeldConnections(client))
    return held
