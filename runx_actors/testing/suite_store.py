"""The store suite the plugin collects for ``--runx-store`` (see ``pytest_plugin``)."""

from __future__ import annotations

from typing import Any

import pytest

from . import conformance
from .machines import run_store_machine
from .pytest_plugin import factory_search_path, load_factory


@pytest.fixture
def store_factory(request: pytest.FixtureRequest) -> Any:
    return load_factory(request.config.getoption("--runx-store"), "--runx-store",
                        search=factory_search_path(request.config))


for _name, _scenario in conformance.SCENARIOS.items():
    globals()[_name] = pytest.mark.trio(_scenario)


def test_store_machine(store_factory: Any, request: pytest.FixtureRequest) -> None:
    """Your store and the memory store, driven side by side (runx_actors.testing.machines)."""
    run_store_machine(store_factory,
                      max_examples=request.config.getoption("--runx-machine-examples"))
