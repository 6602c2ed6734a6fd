"""The executor suite the plugin collects for ``--runx-executor`` (see ``pytest_plugin``)."""

from __future__ import annotations

from typing import Any

import pytest

from . import executor_conformance
from .pytest_plugin import factory_search_path, load_factory


@pytest.fixture
def executor_factory(request: pytest.FixtureRequest) -> Any:
    return load_factory(request.config.getoption("--runx-executor"), "--runx-executor",
                        search=factory_search_path(request.config))


for _name, _scenario in executor_conformance.SCENARIOS.items():
    globals()[_name] = pytest.mark.trio(_scenario)
