"""The Lua scripts of the stores, kept as files whose headers document the key layout."""

from __future__ import annotations

from importlib import resources

from redis import Redis
from redis.commands.core import Script


def register(client: Redis, name: str) -> Script:
    """Register ``lua/<name>`` on ``client``: each call is then one EVALSHA round trip.

    redis-py loads the script itself the first time Redis answers NOSCRIPT (a new or restarted
    server), at the cost of two more round trips once.
    """
    source = resources.files(__package__).joinpath("lua", name).read_text(encoding="utf-8")
    return client.register_script(source)
