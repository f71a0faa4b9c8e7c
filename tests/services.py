"""The two servers the tests talk to, named once: Redis and PostgreSQL.

``REDIS_URL`` and ``DATABASE_URL`` are read from the environment, with the defaults that
``scripts/services.sh`` starts and exports. Imported by plain name (``from services import
REDIS_URL``): pyproject.toml puts ``tests`` on pytest's ``pythonpath``. The fixtures on these
servers are in ``tests/conftest.py``.
"""

from __future__ import annotations

import os

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
