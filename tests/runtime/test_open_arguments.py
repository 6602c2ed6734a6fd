"""Every argument of the open helpers and of Settings is checked before anything is
opened or written, and refused with ValidationError naming it (README: "Every error is a
RunxError subclass"; RUN-LOP-1, RUN-ACT-8, APP-OPN-1, RUN-EXE-5). The eighth session's
fresh-user findings: builtin ValueError/TypeError/AttributeError, trio's NaN deadline
error at the first drive, a store file made before a refused tool list, junk accepted."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

from runx_actors import ModelUnavailableError, RunxError, ValidationError
from runx_actors.app import Settings, open_runtime, open_sqlite_runtime, python_tool, reply
from runx_actors.executors import open_local_executor
from runx_actors.protocol.values import ModelRequest, ModelResult
from runx_actors.runtime import DispatchPolicy
from runx_actors.store.memory import MemoryStore


class _Model:
    async def complete(self, request: ModelRequest) -> ModelResult:
        return reply("hi")


def _refused(error: pytest.ExceptionInfo[ValidationError], argument: str) -> None:
    assert isinstance(error.value, RunxError)
    assert getattr(error.value, "argument", None) == argument, error.value


_SETTINGS_JUNK = [
    ("drain_timeout", math.nan), ("settle_timeout", math.nan), ("settle_timeout", -1),
    ("drain_timeout", "5"), ("max_model_steps", None), ("max_model_steps", "3"),
    ("max_model_steps", 10**30), ("max_model_steps", 2.0), ("max_tool_calls", True),
    ("max_model_resends", -1), ("max_tool_lookup_failures", 2**53),
    ("malformed_retries", 256), ("malformed_retries", None), ("scheduling", 5),
    ("dispatch", 5), ("target_resolver", 5), ("before_prepare", "x"), ("fused_commits", 1),
]


@pytest.mark.parametrize(("field", "value"), _SETTINGS_JUNK,
                         ids=[f"{f}={v!r}" for f, v in _SETTINGS_JUNK])
def test_settings_refuse_every_junk_value(field: str, value: Any) -> None:
    """RUN-LOP-1: a NaN duration was accepted and the first drive raised trio's builtin
    ``ValueError: relative deadline must not be NaN``; None/"3" gave a builtin TypeError;
    10**30 was accepted."""
    with pytest.raises(ValidationError) as error:
        Settings(**{field: value})
    _refused(error, field)


@pytest.mark.parametrize(("field", "value"), [("retries", -1), ("retries", "2"),
                                              ("backoff", math.nan), ("backoff", math.inf)])
def test_dispatch_policy_refuses_junk(field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as error:
        DispatchPolicy(**{field: value})
    _refused(error, field)


def test_settings_keep_their_documented_values() -> None:
    """The bounds' edges stay accepted: 0 switches a bound off, 2^53-1 is the largest
    count, inf is 'no limit' for the two timeouts."""
    Settings(max_model_steps=0, max_tool_calls=2**53 - 1, settle_timeout=math.inf,
             drain_timeout=math.inf, malformed_retries=255, dispatch=DispatchPolicy())


_EXECUTOR_JUNK = [
    ("max_attempts", 0), ("jitter", 2), ("jitter", math.nan), ("model_timeout", -1),
    ("model_timeout", math.inf), ("max_retry_after", math.inf),
    ("max_tool_output_bytes", -1), ("max_model_result_bytes", "1"), ("tools", None),
    ("tools", "abc"), ("tools", [5]), ("models", {"m": 5}), ("models", ["m"]),
    ("models", {"": _Model()}), ("backoff", math.nan), ("max_backoff", -1),
    ("retain", 0), ("retain_unread", 0), ("tool_max_attempts", True), ("provider", ""),
    ("epoch", 5),
]


@pytest.mark.parametrize(("argument", "value"), _EXECUTOR_JUNK,
                         ids=[f"{a}={v!r}" for a, v in _EXECUTOR_JUNK])
async def test_open_local_executor_refuses_every_junk_argument(argument: str,
                                                              value: Any) -> None:
    """RUN-EXE-5: builtin ValueError for max_attempts=0, jitter=2, model_timeout=-1,
    max_retry_after=inf, max_tool_output_bytes=-1; TypeError for tools=None; models={"m":
    5} and backoff=nan accepted. Each is a ValidationError naming the argument."""
    with pytest.raises(ValidationError) as error:
        async with open_local_executor(**{argument: value}):
            pass  # pragma: no cover - refused before the block
    _refused(error, argument)


_RUNTIME_JUNK = [("model", None), ("settings", 5), ("system", 5), ("tools", None),
                 ("tools", [5]), ("scope", "a\nb"), ("scope", 5), ("mailbox_size", 0),
                 ("sink", 5)]


@pytest.mark.parametrize(("argument", "value"), _RUNTIME_JUNK,
                         ids=[f"{a}={v!r}" for a, v in _RUNTIME_JUNK])
async def test_open_runtime_refuses_every_junk_argument_before_the_scope_opens(
        argument: str, value: Any) -> None:
    """RUN-ACT-8: model=None opened and create_run committed, then the first drive failed
    'prompt model is empty'; settings=5 gave AttributeError; system=5 was accepted. Now
    ValidationError at open, and the scope was never opened (epoch still 0)."""
    store = MemoryStore()
    kwargs: dict[str, Any] = {"model": "m", argument: value}
    async with open_local_executor(models={"m": _Model()}) as ex:
        with pytest.raises(ValidationError) as error:
            async with open_runtime(store, ex, **kwargs):
                pass  # pragma: no cover - refused before the block
    _refused(error, argument)
    writer = await store.open("default")
    assert writer.epoch == 1  # the refused open never took the scope


def _tool(ref: str, name: str | None = None) -> Any:
    return python_tool(lambda: "ok", ref=ref, name=name)


_SQLITE_JUNK: list[tuple[str, dict[str, Any], type[Exception]]] = [
    ("duplicate_ref", {"tools": [_tool("t"), _tool("t", "u")]}, ValidationError),
    ("duplicate_name", {"tools": [_tool("t"), _tool("u", "t")]}, ValidationError),
    ("tools_none", {"tools": None}, ValidationError),
    ("models_junk", {"models": {"m": 5}}, ValidationError),
    ("settings_junk", {"settings": 5}, ValidationError),
    ("model_none", {"model": None}, ValidationError),
    ("model_not_served", {"model": "other"}, ModelUnavailableError),
    ("system_junk", {"system": 5}, ValidationError),
    ("scope_junk", {"scope": ""}, ValidationError),
]


@pytest.mark.parametrize(("case", "kwargs", "kind"), _SQLITE_JUNK,
                         ids=[c for c, _, _ in _SQLITE_JUNK])
async def test_open_sqlite_runtime_makes_no_file_for_a_refused_call(
        tmp_path: Path, case: str, kwargs: dict[str, Any], kind: type[Exception]) -> None:
    """APP-OPN-1: two tools with one ref raised ValidationError after the store file was
    created (the docstring said ValueError "before anything opens"); every refusal now
    leaves the directory empty."""
    args: dict[str, Any] = {"model": "m", "models": {"m": _Model()}, **kwargs}
    with pytest.raises(kind) as error:
        async with open_sqlite_runtime(tmp_path / "app.sqlite3", **args):
            pass  # pragma: no cover - refused before the block
    assert isinstance(error.value, RunxError)
    assert os.listdir(tmp_path) == [], case
