"""The one rule a Redis Cluster adds to the key layout: a script's keys are in one hash slot.

A store's scripts read many keys under its prefix (``read_many``, ``begin``, the job store's
indexes), so on a cluster every prefix carries a hash tag, ``{...}``: Redis then hashes only
the tag, and every key under the prefix falls in the tag's slot. On one Redis nothing changes:
the keys keep the names they have always had, and a prefix without a tag is what it was.
"""

from __future__ import annotations

from ddd_celery.redis.connection import RedisClient, is_cluster

CLUSTER_PREFIX = "{ddd_celery}:"
"""The key prefix of the Celery settings on a cluster when none is given."""


def hash_tag(prefix: str) -> str | None:
    """The hash tag that every key under ``prefix`` is hashed on, or None when the names after
    the prefix decide (no ``{...}`` with something inside, closed within the prefix)."""
    start = prefix.find("{")
    end = prefix.find("}", start + 1)
    if start < 0 or end < 0 or end == start + 1:
        return None
    return prefix[start + 1 : end]


def require_one_slot(client: RedisClient, store: str, **prefixes: str) -> None:
    """Refuse, on a cluster, prefixes whose keys one script of ``store`` would spread over
    slots: each must carry a hash tag, and the same one."""
    if not is_cluster(client):
        return
    tags = {name: hash_tag(prefix) for name, prefix in prefixes.items()}
    for name, tag in tags.items():
        if tag is None:
            raise ValueError(
                f"{store} on a Redis Cluster needs a hash tag in its {name} "
                f"{prefixes[name]!r}, so that one script's keys share a slot: "
                f"e.g. {tagged(prefixes[name])!r}"
            )
    if len(set(tags.values())) > 1:
        given = ", ".join(f"{name} {prefix!r}" for name, prefix in prefixes.items())
        raise ValueError(f"{store} on a Redis Cluster needs one hash tag in all of {given}")


def tagged(prefix: str) -> str:
    """``prefix`` with its first part as the hash tag: ``ddd_celery:run:`` is
    ``{ddd_celery}:run:``, and the empty prefix ``{ddd_celery}:``."""
    head, colon, rest = prefix.partition(":")
    return CLUSTER_PREFIX if not prefix else f"{{{head}}}{colon}{rest}"


def same_slot(client: RedisClient, *prefixes: str) -> bool:
    """Whether one script may touch keys under all of ``prefixes`` (always, on one Redis)."""
    return not is_cluster(client) or len({hash_tag(prefix) for prefix in prefixes}) == 1
