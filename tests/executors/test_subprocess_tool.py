"""subprocess_tool: a fixed program run with an argv, never a shell (architecture §5).

The programs are ``sys.executable -c ...`` so the tests run wherever Python does. Only
the timeout and the cancellation tests spend real time (a child must really start and
really be stopped); they wait on events (a FIFO, a pidfd), never on fixed sleeps.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
from local_helpers import outcome_of, tool_assignment

from runx_actors import effect
from runx_actors.executors import (
    EXIT_NONZERO,
    SUBPROCESS_PARAMETERS,
    LocalExecutor,
    ScriptedModel,
    Tool,
    call_tools,
    minimal_env,
    open_local_executor,
    reply,
    subprocess_tool,
    tool_call,
)
from runx_actors.protocol.values import ModelRequest, ModelResult, ToolReplay
from runx_actors.runtime import open_runtime
from runx_actors.store.memory import MemoryStore

PY = sys.executable
posix_only = pytest.mark.skipif(os.name != "posix", reason="FIFOs and process groups")


def python(code: str, **declaration: Any) -> Tool:
    """A subprocess tool running ``python -c code`` (ref ``py``)."""
    return subprocess_tool("py", [PY, "-c", code], **declaration)


async def run(ex: LocalExecutor, tool: Tool, arguments: Mapping[str, Any] | None = None,
              name: str = "e1") -> effect.OutcomeResult | None:
    a = tool_assignment(tool, json.dumps(arguments or {}), effect_id=name)
    await ex.dispatch(a)
    return (await outcome_of(ex, a.key)).result


def output(result: effect.OutcomeResult | None) -> Any:
    assert isinstance(result, effect.ToolExecutionSucceeded), result
    return json.loads(result.result.output)


def failure(result: effect.OutcomeResult | None) -> effect.ToolFailure:
    assert isinstance(result, effect.ToolExecutionFailed), result
    return result.failure


# -- declaration ---------------------------------------------------------------------------


def test_declaration_defaults() -> None:
    tool = subprocess_tool("sh.echo", [Path(PY), "-c", "pass"])
    assert tool.ref == "sh.echo" and tool.name == "sh.echo"
    assert tool.replay is ToolReplay.NEVER  # running a program is an external act
    assert tool.schema == dict(SUBPROCESS_PARAMETERS)
    assert tool.is_async and tool.timeout is None  # the tool enforces its own timeout
    # the description names the program by base name: the digest is machine independent
    assert os.path.basename(PY) in tool.definition.description
    assert os.path.dirname(PY) not in tool.definition.description
    for argv in ([], [""], [PY, "a\x00b"], [PY, 3]):
        with pytest.raises(ValueError):
            subprocess_tool("bad", argv)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        subprocess_tool("bad", [PY], env={"A=B": "x"})
    with pytest.raises(ValueError):
        subprocess_tool("bad", [PY], timeout=0)
    with pytest.raises(ValueError):
        subprocess_tool("bad", [PY], max_output_bytes=-1)


# -- results ---------------------------------------------------------------------------------


async def test_success_output_shape() -> None:
    code = ("import sys; print('out é'); sys.stdout.flush(); "
            "sys.stdout.buffer.write(b'\\xff\\n'); print('err', file=sys.stderr)")
    tool = python(code)
    async with open_local_executor(tools=[tool]) as ex:
        assert await ex.validate(tool_assignment(tool, "{}")) is None
        assert output(await run(ex, tool)) == {
            "argv": [PY, "-c", code], "exit_code": 0,
            "stdout": "out é\n\ufffd\n",  # UTF-8, errors="replace"
            "stderr": "err\n"}


async def test_args_are_appended_verbatim_without_a_shell() -> None:
    tool = python("import json, sys; print(json.dumps(sys.argv[1:]))")
    args = ["a b", "$HOME", "*", "; echo pwned", "'q'", ""]
    async with open_local_executor(tools=[tool]) as ex:
        out = output(await run(ex, tool, {"args": args}))
        assert json.loads(out["stdout"]) == args
        assert out["argv"][3:] == args


async def test_stdin_is_passed_and_defaults_to_empty() -> None:
    tool = python("import sys; data = sys.stdin.read(); print(repr(data.upper()))")
    async with open_local_executor(tools=[tool]) as ex:
        assert output(await run(ex, tool, {"stdin": "héllo\nworld"}))["stdout"] == \
            "'HÉLLO\\nWORLD'\n"
        # no stdin argument: /dev/null, never this process's stdin
        assert output(await run(ex, tool, {}, "e2"))["stdout"] == "''\n"


async def test_custom_schema_and_build_args() -> None:
    tool = subprocess_tool(
        "py.greet", [PY, "-c", "import sys; print('hello', *sys.argv[1:])"],
        parameters={"type": "object", "properties": {"who": {"type": "string"}},
                    "required": ["who"], "additionalProperties": False},
        build_args=lambda arguments: ["--", arguments["who"]])
    async with open_local_executor(tools=[tool]) as ex:
        assert output(await run(ex, tool, {"who": "ada"}))["stdout"] == "hello -- ada\n"
        refused = await ex.validate(tool_assignment(tool, "{}"))
        assert refused is not None and refused.class_ == "invalid_arguments"


async def test_nonzero_exit_is_a_known_failure_with_code_and_stderr() -> None:
    code = "import sys; print('partial'); print('boom: disk full', file=sys.stderr); sys.exit(3)"
    strict = python(code)
    lenient = subprocess_tool("py.ok3", [PY, "-c", code], ok_exit_codes=(0, 3))
    async with open_local_executor(tools=[strict, lenient]) as ex:
        result = await run(ex, strict)
        assert isinstance(result, effect.ToolExecutionFailed)  # KNOWN: the program ended
        assert result.failure.class_ == EXIT_NONZERO
        assert "status 3" in result.failure.message
        assert "boom: disk full" in result.failure.message
        assert "partial" in result.failure.message
        assert result.retry is effect.RetryDisposition.UNKNOWN  # never retried
        # a declared exit status is an ordinary result
        out = output(await run(ex, lenient, name="e2"))
        assert out["exit_code"] == 3 and out["stdout"] == "partial\n"


async def test_output_over_the_limit_fails_too_large() -> None:
    tool = python("import sys; sys.stdout.write('x' * int(sys.argv[1]))", max_output_bytes=100)
    async with open_local_executor(tools=[tool]) as ex:
        assert output(await run(ex, tool, {"args": ["100"]}))["stdout"] == "x" * 100
        big = failure(await run(ex, tool, {"args": ["200000"]}, "e2"))
        assert big.class_ == "too_large"
        assert "200000 bytes" in big.message and "status 0" in big.message


async def test_minimal_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNX_TEST_SECRET", "s3cret")
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    default = python(code)
    explicit = subprocess_tool("py.env", [PY, "-c", code], env={"ONLY": "this"})
    assert "RUNX_TEST_SECRET" not in minimal_env()
    async with open_local_executor(tools=[default, explicit]) as ex:
        env = json.loads(output(await run(ex, default))["stdout"])
        env.pop("LC_CTYPE", None)  # Python may coerce the C locale
        assert "RUNX_TEST_SECRET" not in env
        assert env == minimal_env()
        env = json.loads(output(await run(ex, explicit, name="e2"))["stdout"])
        env.pop("LC_CTYPE", None)
        assert env == {"ONLY": "this"}


async def test_cwd(tmp_path: Path) -> None:
    tool = python("import os; print(os.getcwd())", cwd=tmp_path)
    async with open_local_executor(tools=[tool]) as ex:
        assert output(await run(ex, tool))["stdout"] == f"{tmp_path.resolve()}\n"


# -- validation ------------------------------------------------------------------------------


async def test_invalid_calls_are_refused_at_validate_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    tool = python(f"open({str(marker)!r}, 'w').close()")
    bad = [{"args": [1]}, {"args": "x"}, {"stdin": 5}, {"other": True},
           {"args": ["a\x00b"]}, []]
    async with open_local_executor(tools=[tool]) as ex:
        for i, arguments in enumerate(bad):
            a = tool_assignment(tool, json.dumps(arguments), effect_id=f"bad{i}")
            refused = await ex.validate(a)
            assert refused is not None and refused.class_ == "invalid_arguments", arguments
            # dispatched anyway: refused again before the program starts
            await ex.dispatch(a)
            assert failure((await outcome_of(ex, a.key)).result).class_ == "invalid_arguments"
        assert not marker.exists()
        assert output(await run(ex, tool))["exit_code"] == 0  # the control: it does run
        assert marker.exists()


async def test_missing_program_or_cwd_is_not_found(tmp_path: Path) -> None:
    missing = subprocess_tool("nope", ["runx-no-such-program-xyz", "--help"])
    relative = subprocess_tool("rel", ["./bin/tool"], cwd=tmp_path)
    not_executable = tmp_path / "plain.txt"
    not_executable.write_text("data")
    plain = subprocess_tool("plain", [str(not_executable)])
    no_cwd = python("pass", cwd=tmp_path / "gone")
    async with open_local_executor(tools=[missing, relative, plain, no_cwd]) as ex:
        for tool in (missing, relative, plain, no_cwd):
            refused = await ex.validate(tool_assignment(tool, "{}"))
            assert refused is not None and refused.class_ == "not_found", tool.ref
            assert failure(await run(ex, tool, name=tool.ref)).class_ == "not_found"


# -- timeout and cancellation ------------------------------------------------------------


async def test_timeout_stops_the_program_and_is_unknown() -> None:
    tool = python("import sys, time; print('started', flush=True); time.sleep(30)",
                  timeout=0.5)
    async with open_local_executor(tools=[tool]) as ex:
        start = trio.current_time()
        result = await run(ex, tool)
        assert trio.current_time() - start < 10  # far less than the program's 30 s
        # it may have done part of its work: UNKNOWN, never a KNOWN failure
        assert isinstance(result, effect.ToolExecutionUnknown)
        assert result.failure.class_ == "timeout"


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    if os.name != "posix":
        pytest.skip("FIFOs are POSIX")
    path = tmp_path / "pids"
    os.mkfifo(path)
    yield path


async def read_pids(path: Path, count: int) -> list[int]:
    """Wait (on the FIFO, no polling) until *count* pids were written to *path*."""
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)  # RDWR: never blocks, never EOF
    data = b""
    try:
        with trio.fail_after(20):
            while data.count(b"\n") < count:
                await trio.lowlevel.wait_readable(fd)
                data += os.read(fd, 4096)
    finally:
        os.close(fd)
    return [int(line) for line in data.split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


REPORT = ("import os, sys; fd = os.open(sys.argv[1], os.O_WRONLY); "
          "os.write(fd, b'%d\\n' % os.getpid()); os.close(fd)")


@posix_only
async def test_cancellation_kills_and_reaps_the_child(fifo: Path) -> None:
    tool = python(REPORT + "; import time; time.sleep(60)")
    async with open_local_executor(tools=[tool]) as ex:
        a = tool_assignment(tool, json.dumps({"args": [str(fifo)]}))
        await ex.dispatch(a)
        (pid,) = await read_pids(fifo, 1)
        assert alive(pid)
        await ex.cancel(a.key)
        with trio.fail_after(10):
            outcome = await outcome_of(ex, a.key)
        assert isinstance(outcome.result, effect.Cancelled)
        assert not alive(pid)  # killed and reaped before the Outcome settled


@posix_only
async def test_cancellation_signals_the_whole_process_group(fifo: Path) -> None:
    if not hasattr(os, "pidfd_open"):
        pytest.skip("needs os.pidfd_open (Linux)")
    grandchild = REPORT + "; import time; time.sleep(60)"
    tool = python(REPORT + f"; import subprocess; subprocess.Popen([sys.executable, '-c', "
                           f"{grandchild!r}, sys.argv[1]]).wait()")
    async with open_local_executor(tools=[tool]) as ex:
        a = tool_assignment(tool, json.dumps({"args": [str(fifo)]}))
        await ex.dispatch(a)
        _child, grand = await read_pids(fifo, 2)  # the child writes first
        try:
            handle = os.pidfd_open(grand)
        except ProcessLookupError:
            pytest.fail("the grandchild died on its own")
        try:
            await ex.cancel(a.key)
            assert isinstance((await outcome_of(ex, a.key)).result, effect.Cancelled)
            with trio.fail_after(10):  # readable once the grandchild has exited
                await trio.lowlevel.wait_readable(handle)
        finally:
            os.close(handle)


# -- end to end ------------------------------------------------------------------------------


def _second_turn(request: ModelRequest) -> ModelResult:
    messages = json.loads(request.body)["messages"]
    tool_messages = [m for m in messages if m["role"] == "tool"]
    ok = next(m for m in tool_messages if "content" in m)
    failed = next(m for m in tool_messages if "error" in m)
    return reply(f"said {ok['content']['stdout'].strip()}; then {failed['error']['class']}")


async def test_a_run_calls_the_subprocess_tool_end_to_end() -> None:
    code = "import sys; print(*sys.argv[1:]); sys.exit(len(sys.argv) > 2)"
    tool = subprocess_tool("sys.echo", [PY, "-c", code], name="echo")
    model = ScriptedModel([
        call_tools(tool_call("echo", {"args": ["hello"]}),
                   tool_call("echo", {"args": ["too", "many"]})),
        _second_turn])
    async with open_local_executor(tools=[tool], models={"scripted": model}) as ex, \
            open_runtime(MemoryStore(), ex, scope="sub", model="scripted",
                         tools=[tool]) as rt:
        await rt.create_run("run-sub", ["echo hello"])
        result = await rt.drive("run-sub")
        assert result.result is not None and result.result.status.value == "completed"
        facts = [f.WIRE_NAME for f in await rt.writer.run_facts("run-sub")]
        assert facts.count("tool_call_started") == 2
        assert "tool_call_completed" in facts and "tool_call_failed" in facts
    # the model saw the output as a result and the non-zero exit as a tool failure
    messages = json.loads(model.requests[1].body)["messages"]
    # (one tool message per call, in settlement order: the calls run concurrently)
    results = {m["toolCallId"]: m for m in messages if m["role"] == "tool"}
    assert results["call_1"]["content"] == {"argv": [PY, "-c", code, "hello"],
                                            "exit_code": 0, "stdout": "hello\n",
                                            "stderr": ""}
    assert results["call_2"]["error"]["class"] == EXIT_NONZERO
    assert "status 1" in results["call_2"]["error"]["message"]
    assert model.calls == 2
