"""Executors classify hostile input honestly (issue 12 bullet 4; RUN-EXE-5, RUN-EXE-11).

* an exception raised by a tool's argument ``check`` (any exception, a self-referential
  symlink's ``RuntimeError`` included) is a KNOWN ``invalid_arguments`` refusal, at
  ``validate`` and when the tool runs, and never escapes ``validate``;
* the fs tools map every ``OSError`` raised before anything was written to a KNOWN
  failure (``ToolExecutionFailed``), never ``ToolExecutionUnknown``;
* a tool output over the executor's cap is a KNOWN ``too_large`` failure.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from local_helpers import outcome_of, tool_assignment

from runx_actors import effect
from runx_actors.executors import (
    Tool,
    Workspace,
    fs_read_tool,
    fs_write_tool,
    open_local_executor,
    python_tool,
)

INVALID = effect.ToolFailureClass.INVALID_ARGUMENTS


async def _outcome(tool: Tool, arguments: dict[str, Any], **options: Any
                   ) -> effect.OutcomeResult | None:
    """Dispatch *tool* with *arguments* (bypassing validate) and return its Outcome."""
    a = tool_assignment(tool, json.dumps(arguments))
    async with open_local_executor(tools=[tool], **options) as ex:
        await ex.dispatch(a)
        return (await outcome_of(ex, a.key)).result


# -- argument checks that raise --------------------------------------------------------------

@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyError("k"), RecursionError(),
                                   ValueError("bad")])
async def test_an_exception_from_a_check_hook_is_invalid_arguments(error: Exception) -> None:
    ran: list[int] = []

    def check(arguments: Any) -> effect.ToolFailure | None:
        raise error

    def fn() -> str:
        ran.append(1)
        return "ran"

    tool = python_tool(fn, ref="t", check=check)
    a = tool_assignment(tool)
    async with open_local_executor(tools=[tool]) as ex:
        failure = await ex.validate(a)  # must not raise
        assert failure is not None and failure.class_ == INVALID
        assert type(error).__name__ in failure.message
        await ex.dispatch(a)  # validate was skipped: the run-time check refuses it too
        result = (await outcome_of(ex, a.key)).result
    assert isinstance(result, effect.ToolExecutionFailed)
    assert result.failure.class_ == INVALID
    assert result.retry is effect.RetryDisposition.NEVER and not ran


async def test_a_check_hook_returning_a_non_failure_is_invalid_arguments() -> None:
    tool = python_tool(lambda: "x", ref="t", check=lambda _: "not a ToolFailure")  # type: ignore[arg-type,return-value]
    async with open_local_executor(tools=[tool]) as ex:
        failure = await ex.validate(tool_assignment(tool))
    assert failure is not None and failure.class_ == INVALID


@pytest.mark.parametrize("path", ["loop", "loop/x", "a/../loop"])
async def test_a_self_referential_symlink_is_invalid_arguments(tmp_path: Path,
                                                               path: str) -> None:
    (tmp_path / "loop").symlink_to("loop")
    read = fs_read_tool(tmp_path)
    write = fs_write_tool(tmp_path)
    async with open_local_executor(tools=[read, write]) as ex:
        for tool, arguments in ((read, {"path": path}), (write, {"path": path, "text": "x"})):
            failure = await ex.validate(tool_assignment(tool, json.dumps(arguments)))
            assert failure is not None and failure.class_ == INVALID, (tool.ref, failure)
    for tool, arguments in ((read, {"path": "loop"}), (write, {"path": "loop", "text": "x"})):
        result = await _outcome(tool, arguments)
        assert isinstance(result, effect.ToolExecutionFailed), (tool.ref, result)
        assert result.failure.class_ == INVALID
    assert (tmp_path / "loop").is_symlink()  # nothing was written through it


# -- fs tools: every OSError before a write is KNOWN -----------------------------------------

async def test_fs_write_with_an_overlong_name_is_known_and_writes_nothing(tmp_path: Path
                                                                         ) -> None:
    write = fs_write_tool(tmp_path)
    for path in ("n" * 300 + "/f.txt", "d/" + "n" * 300):
        result = await _outcome(write, {"path": path, "text": "x"})
        assert isinstance(result, effect.ToolExecutionFailed), (path, result)
        assert "File name too long" in result.failure.message or "too long" in (
            result.failure.message)
    assert sorted(p.name for p in tmp_path.rglob("*")) in ([], ["d"])


async def test_fs_read_with_an_overlong_name_is_known(tmp_path: Path) -> None:
    result = await _outcome(fs_read_tool(tmp_path), {"path": "n" * 300})
    assert isinstance(result, effect.ToolExecutionFailed), result


def _raiser(code: int) -> Any:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise OSError(code, os.strerror(code))
    return fail


@pytest.mark.parametrize("code", [errno.EACCES, errno.ENOSPC, errno.EROFS, errno.EIO,
                                  errno.EDQUOT, errno.EMFILE])
@pytest.mark.parametrize("where", ["mkdir", "mkstemp", "fsync", "replace"])
async def test_fs_write_os_errors_before_the_replace_are_known(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, where: str) -> None:
    """Running as root, permissions cannot be provoked: the failing call is patched."""
    (tmp_path / "keep.txt").write_text("old", encoding="utf-8")
    target = {"mkdir": (Path, "mkdir"), "mkstemp": (tempfile, "mkstemp"),
              "fsync": (os, "fsync"), "replace": (os, "replace")}[where]
    monkeypatch.setattr(*target, _raiser(code))
    result = await _outcome(fs_write_tool(tmp_path),
                            {"path": "sub/keep.txt" if where == "mkdir" else "keep.txt",
                             "text": "new"})
    assert isinstance(result, effect.ToolExecutionFailed), result
    assert os.strerror(code) in result.failure.message
    assert (tmp_path / "keep.txt").read_text(encoding="utf-8") == "old"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".runx-write-")]


@pytest.mark.parametrize("code", [errno.EACCES, errno.EIO, errno.EMFILE, errno.ENAMETOOLONG])
async def test_fs_read_os_errors_are_known(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           code: int) -> None:
    (tmp_path / "a.txt").write_text("a", encoding="utf-8")
    real_open = os.open

    def guarded(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith("a.txt"):
            raise OSError(code, os.strerror(code))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded)
    result = await _outcome(fs_read_tool(tmp_path), {"path": "a.txt"})
    assert isinstance(result, effect.ToolExecutionFailed), result


async def test_fs_write_onto_a_directory_is_known(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("file", encoding="utf-8")
    write = fs_write_tool(tmp_path)
    for path in ("d", "f/x.txt"):  # EISDIR, and ENOTDIR from mkdir under a file
        result = await _outcome(write, {"path": path, "text": "x"})
        assert isinstance(result, effect.ToolExecutionFailed), (path, result)
    assert (tmp_path / "f").read_text(encoding="utf-8") == "file"


def test_workspace_locate_never_raises_runtime_error(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    failure = Workspace(tmp_path).check_path({"path": "a/x"})
    assert failure is not None and failure.class_ == INVALID


# -- tool outputs over the cap ------------------------------------------------------------------

async def test_a_tool_output_over_the_cap_is_a_known_too_large_failure() -> None:
    tool = python_tool(lambda: "x" * 5000, ref="big")
    result = await _outcome(tool, {}, max_tool_output_bytes=4096)
    assert isinstance(result, effect.ToolExecutionFailed), result
    assert result.failure.class_ == "too_large" and "4096" in result.failure.message
    small = await _outcome(tool, {}, max_tool_output_bytes=8192)
    assert isinstance(small, effect.ToolExecutionSucceeded)


async def test_a_deeply_nested_tool_output_is_a_known_failure() -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    result = await _outcome(python_tool(lambda: deep, ref="deep"), {})
    assert isinstance(result, effect.ToolExecutionFailed), result


async def test_validate_raises_nothing_whatever_a_tool_does() -> None:
    class Broken(Tool):
        def declaration_failure(self, body: effect.ToolAssignment) -> effect.ToolFailure | None:
            raise RuntimeError("a broken tool object")

    base = python_tool(lambda: "x", ref="broken")
    broken = Broken(ref=base.ref, definition=base.definition, fn=base.fn)
    async with open_local_executor(tools=[broken]) as ex:
        failure = await ex.validate(tool_assignment(broken))
    assert failure is not None and failure.class_ == INVALID
    assert "RuntimeError" in failure.message


# -- model results over the cap (any model) ----------------------------------------------------

async def test_a_model_result_over_the_cap_is_malformed_naming_the_size() -> None:
    from local_helpers import model_assignment

    from runx_actors.executors import ScriptedModel, reply

    big = ScriptedModel([reply("x" * 5000)], repeat_last=True)
    for cap, expected in ((4096, effect.ModelFailed), (8192, effect.ModelSucceeded)):
        async with open_local_executor(models={"m": big},
                                       max_model_result_bytes=cap) as ex:
            a = model_assignment("m")
            await ex.dispatch(a)
            result = (await outcome_of(ex, a.key)).result
        assert isinstance(result, expected), result
        if isinstance(result, effect.ModelFailed):
            assert result.code is effect.FailureCode.MALFORMED_RESULT
            assert "5006 bytes" in result.message and "4096" in result.message  # + "{}", "stop"
