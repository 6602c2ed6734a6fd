"""The names README's "API in brief" lists import from the modules it names."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

#: module -> names the README says it offers.
README_API = {
    "runx_actors": ["open_runtime", "MemoryStore", "open_sqlite_store", "OwnershipLostError",
                    "StaleRuntimeError"],
    "runx_actors.runtime": ["open_runtime", "Settings", "ActorRuntime", "RunHandle",
                            "Reconciler", "Runtime", "LoopResult", "LoopDisposition",
                            "Answer", "WaitingCall", "Created", "Event", "EventKind",
                            "approve", "reject", "answer", "accept_input", "cancel_run"],
    "runx_actors.app": ["open_sqlite_runtime", "Runtime", "python_tool", "reply",
                        "call_tools", "tool_call", "ModelRequest", "ModelResult",
                        "ResponsePolicy", "RunConflictError", "OwnershipLostError"],
    "runx_actors.host": ["LoopHost", "LoopSpec", "HostConfig", "LoopOutcome", "load_package"],
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


#: The facade's own names: each documents itself and every public method, and the
#: facade's methods cite the requirement they implement (issue 10).
FACADE = {"runx_actors.runtime": ["open_runtime", "Runtime", "LoopResult", "Answer",
                                  "WaitingCall", "Created", "Event", "EventKind",
                                  "approve", "reject", "answer", "accept_input",
                                  "cancel_run", "TranscriptBuilder"],
          "runx_actors.app": ["open_sqlite_runtime"]}
REQUIREMENT = re.compile(r"\b(?:RUN|APP)-[A-Z]{3}-\d+\b")


def _members(obj: object) -> list[tuple[str, object]]:
    out = []
    for name, value in vars(obj).items():
        if name.startswith("_"):
            continue
        target = value.fget if isinstance(value, property) else value
        if callable(target) and not isinstance(target, type):
            out.append((name, target))
    return out


def test_readme_api_names_are_documented() -> None:
    missing = []
    for module, names in README_API.items():
        loaded = importlib.import_module(module)
        for name in names:
            obj = getattr(loaded, name)
            if not (getattr(obj, "__doc__", None) or "").strip():
                missing.append(f"{module}.{name}")
    assert missing == [], f"undocumented: {missing}"


def test_facade_documents_methods_and_requirements() -> None:
    problems = []
    for module, names in FACADE.items():
        loaded = importlib.import_module(module)
        for name in names:
            obj = getattr(loaded, name)
            doc = obj.__doc__ or ""
            if not doc.strip():
                problems.append(f"{name}: no docstring")
            if not inspect.isclass(obj) and not REQUIREMENT.search(doc):
                problems.append(f"{name}: cites no requirement")
            if inspect.isclass(obj):
                for member, target in _members(obj):
                    text = getattr(target, "__doc__", None) or ""
                    if not text.strip():
                        problems.append(f"{name}.{member}: no docstring")
                    elif obj.__name__ == "Runtime" and not REQUIREMENT.search(text):
                        problems.append(f"{name}.{member}: cites no requirement")
    assert problems == [], problems
