"""The clock and scope of `tests/unit/background`, for the background specs on real stores."""

from __future__ import annotations

from tests.unit.background.conftest import clock, scope

__all__ = ["clock", "scope"]
