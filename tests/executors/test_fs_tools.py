"""fs.read / fs.write confined to a workspace root (architecture §5; loop-host §3.5)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

import pytest
from local_helpers import outcome_of, tool_assignment

from runx_actors import effect
from runx_actors.executors import (
    LocalExecutor,
    Tool,
    ToolError,
    Workspace,
    fs_read_tool,
    fs_write_tool,
    open_local_executor,
    workspace_tools,
)
from runx_actors.protocol.values import ToolPlacement, ToolReplay


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """``root`` (the workspace) with NOTES.md, a sub directory and links; ``outside``
    holds a secret next to it."""
    root = tmp_path / "workspace"
    outside = tmp_path / "outside"
    (root / "docs").mkdir(parents=True)
    outside.mkdir()
    (root / "NOTES.md").write_text("hello notes\n", encoding="utf-8")
    (root / "docs" / "a.txt").write_text("alpha", encoding="utf-8")
    (outside / "secret.txt").write_text("top secret", encoding="utf-8")
    (root / "escape.txt").symlink_to(outside / "secret.txt")
    (root / "escape_dir").symlink_to(outside, target_is_directory=True)
    (root / "inside.txt").symlink_to(root / "docs" / "a.txt")
    return root, outside


ESCAPES = ["../outside/secret.txt", "docs/../../outside/secret.txt", "/etc/passwd",
           str(Path("/") / "tmp" / "x"), "..", "..\\outside\\secret.txt", "\\windows",
           "C:/x", "escape.txt", "escape_dir/secret.txt", "", ".", "docs/..", "a\x00b"]


async def _run(ex: LocalExecutor, tool: Tool, arguments: Mapping[str, object],
               name: str) -> effect.OutcomeResult | None:
    a = tool_assignment(tool, json.dumps(arguments), effect_id=name)
    await ex.dispatch(a)
    return (await outcome_of(ex, a.key)).result


def _fs_tools(root: Path) -> tuple[Tool, Tool]:
    return workspace_tools(root)


async def test_fs_read_inside_the_workspace_works(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    read, _write = _fs_tools(root)
    async with open_local_executor(tools=[read]) as ex:
        assert await ex.validate(tool_assignment(read, '{"path":"NOTES.md"}')) is None
        result = await _run(ex, read, {"path": "NOTES.md"}, "r1")
        assert isinstance(result, effect.ToolExecutionSucceeded)
        data = b"hello notes\n"
        assert json.loads(result.result.output) == {
            "path": "NOTES.md", "size_bytes": len(data),
            "sha256": "sha256:" + hashlib.sha256(data).hexdigest(),
            "text": "hello notes\n"}
        # a symlink that stays inside the workspace is fine
        inside = await _run(ex, read, {"path": "./inside.txt"}, "r2")
        assert isinstance(inside, effect.ToolExecutionSucceeded)
        assert json.loads(inside.result.output)["text"] == "alpha"
        assert json.loads(inside.result.output)["path"] == "inside.txt"


@pytest.mark.parametrize("path", ESCAPES)
async def test_fs_paths_escaping_the_workspace_are_refused(layout: tuple[Path, Path],
                                                           path: str) -> None:
    """``..``, absolute paths and symlinks leading outside are refused with the KNOWN
    class invalid_arguments: at validate (the call is declined) and when run."""
    root, outside = layout
    read, write = _fs_tools(root)
    async with open_local_executor(tools=[read, write]) as ex:
        for tool, arguments in ((read, {"path": path}), (write, {"path": path, "text": "x"})):
            failure = await ex.validate(tool_assignment(tool, json.dumps(arguments)))
            assert failure is not None and failure.class_ == "invalid_arguments", path
            result = await _run(ex, tool, arguments, f"{tool.ref}-run")
            assert isinstance(result, effect.ToolExecutionFailed), path
            assert result.failure.class_ == "invalid_arguments"
            assert result.retry is effect.RetryDisposition.NEVER
    assert (outside / "secret.txt").read_text(encoding="utf-8") == "top secret"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


async def test_fs_read_failures(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    (root / "big.txt").write_bytes(b"x" * 11)
    (root / "binary.bin").write_bytes(b"\xff\xfe")
    read = fs_read_tool(root, max_bytes=10)
    async with open_local_executor(tools=[read]) as ex:
        classes = {}
        for name, path in (("missing", "nope.md"), ("big", "big.txt"),
                           ("binary", "binary.bin"), ("dir", "docs")):
            result = await _run(ex, read, {"path": path}, name)
            assert isinstance(result, effect.ToolExecutionFailed), name
            classes[name] = result.failure.class_
    assert classes == {"missing": "not_found", "big": "too_large", "binary": "invalid_input",
                       "dir": "invalid_input"}


async def test_fs_write_inside_the_workspace(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    _read, write = _fs_tools(root)
    async with open_local_executor(tools=[write]) as ex:
        result = await _run(ex, write, {"path": "out/new/file.txt", "text": "héllo"}, "w1")
        assert isinstance(result, effect.ToolExecutionSucceeded)
        data = "héllo".encode()
        assert json.loads(result.result.output) == {
            "path": "out/new/file.txt", "size_bytes": len(data),
            "sha256": "sha256:" + hashlib.sha256(data).hexdigest()}
        assert (root / "out" / "new" / "file.txt").read_bytes() == data
        again = await _run(ex, write, {"path": "NOTES.md", "text": "replaced"}, "w2")
        assert isinstance(again, effect.ToolExecutionSucceeded)
        assert (root / "NOTES.md").read_text(encoding="utf-8") == "replaced"
        onto_dir = await _run(ex, write, {"path": "docs", "text": "x"}, "w3")
        assert isinstance(onto_dir, effect.ToolExecutionFailed)
        assert onto_dir.failure.class_ == "invalid_input"
    assert not [p for p in root.rglob(".runx-write-*")]  # no temporary files left


async def test_fs_tool_declarations(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    read, write = _fs_tools(root)
    assert (read.ref, write.ref) == ("fs.read", "fs.write")
    assert read.placement is write.placement is ToolPlacement.WORKSPACE
    assert read.replay is ToolReplay.ALLOWED and write.replay is ToolReplay.NEVER
    assert read.spec().definition_digest == read.definition_digest
    async with open_local_executor(tools=[read, write]) as ex:
        bad = tool_assignment(read, '{"path":"NOTES.md","mode":"x"}')
        failure = await ex.validate(bad)
        assert failure is not None and failure.class_ == "invalid_arguments"
        declared_elsewhere = tool_assignment(read, '{"path":"NOTES.md"}',
                                             placement=ToolPlacement.NONE)
        failure = await ex.validate(declared_elsewhere)
        assert failure is not None and failure.class_ == "tool_definition_mismatch"


def test_workspace_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Workspace(tmp_path / "missing")
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(ValueError):
        Workspace(tmp_path / "file")


def test_workspace_locate_normalises(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    workspace = Workspace(root)
    assert workspace.locate("./docs//a.txt") == ("docs/a.txt", root / "docs" / "a.txt")
    with pytest.raises(ToolError) as caught:
        workspace.locate(7)
    assert caught.value.class_ == "invalid_arguments"


@pytest.mark.skipif(not hasattr(os, "O_NOFOLLOW"), reason="needs O_NOFOLLOW")
def test_fs_read_never_follows_a_final_symlink(layout: tuple[Path, Path]) -> None:
    root, outside = layout
    workspace = Workspace(root)
    # the check passed for a regular file that is then swapped for a link to outside
    _, target = workspace.locate("docs/a.txt")
    target.unlink()
    target.symlink_to(outside / "secret.txt")
    with pytest.raises(ToolError) as caught:
        workspace.read("docs/a.txt")
    assert caught.value.class_ == "invalid_arguments"


def test_fs_write_refuses_oversized_text(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    write = fs_write_tool(root, max_bytes=4)
    with pytest.raises(ToolError) as caught:
        write.fn(path="x.txt", text="12345")
    assert caught.value.class_ == "too_large"
    assert not (root / "x.txt").exists()
