"""The ExecutionPort conformance suite against the LocalExecutor (RUN-CMP-2)."""

from __future__ import annotations

import pytest

from runx_actors.testing.executor_conformance import *  # noqa: F403
from runx_actors.testing.executor_conformance import ExecutorFactory, local_executor_factory


@pytest.fixture
def executor_factory() -> ExecutorFactory:
    return local_executor_factory
