"""Fixtures of the page's tests: an app of the test's own on the real Redis or PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis import Redis
from sqlalchemy import Engine
from web_support import KINDS, Site, site_of


@pytest.fixture(params=KINDS)
def site(request: pytest.FixtureRequest, redis_client: Redis, engine: Engine) -> Iterator[Site]:
    with site_of(request.param, redis_client, engine) as built:
        yield built
