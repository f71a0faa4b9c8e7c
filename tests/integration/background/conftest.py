"""The background job specs' fixtures (``tests/unit/background``), for the specs on real stores."""

from __future__ import annotations

from tests.unit.background.conftest import clock, ids, jobs, scope, store

__all__ = ["clock", "ids", "jobs", "scope", "store"]
