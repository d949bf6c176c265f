"""Model-test settings: the `slow` marker (large random models; run them with FMB_RUN_SLOW=1)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Register the `slow` marker so `-m "not slow"` can deselect these tests."""
    config.addinivalue_line("markers", "slow: minutes of CPU (large random models); FMB_RUN_SLOW=1 runs them")
