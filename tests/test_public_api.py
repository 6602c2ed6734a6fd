"""The names README's "API in brief" lists import from the modules it names."""

from __future__ import annotations

import importlib

import pytest

#: module -> names the README says it offers.
README_API = {
    "runx_actors": ["open_runtime", "MemoryStore", "open_sqlite_store", "OwnershipLostError",
                    "StaleRuntimeError"],
    "runx_actors.runtime": ["open_runtime", "Settings", "RunRuntime", "RunHandle",
                            "Reconciler"],
    "runx_actors.store": ["MemoryStore", "open_sqlite_store", "open_postgres_store"],
    "runx_actors.store.postgres": ["open_postgres_store"],
    "runx_actors.store.sqlite": ["open_sqlite_store"],
    "runx_actors.store.memory": ["MemoryStore"],
    "runx_actors.executors": ["open_local_executor", "python_tool", "ScriptedModel",
                              "LocalExecutor", "OpenAIChatModel", "subprocess_tool",
                              "fs_read_tool", "fs_write_tool"],
    "runx_actors.effect": ["FailureCode", "Watcher"],
    "runx_actors.host.loop": ["LoopHost", "LoopSpec", "HostConfig"],
    "runx_actors.host.package": ["load_package"],
    "runx_actors.host.receipts": ["ReceiptStore", "Signer", "Verifier"],
}


@pytest.mark.parametrize("module", sorted(README_API))
def test_readme_names_import(module: str) -> None:
    loaded = importlib.import_module(module)
    missing = [name for name in README_API[module] if not hasattr(loaded, name)]
    assert missing == [], f"{module} lacks {missing}"


def test_store_package_names_nothing_else() -> None:
    store = importlib.import_module("runx_actors.store")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        store.nope  # noqa: B018
