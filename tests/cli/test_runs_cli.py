"""``runx-actors runs …`` on a SQLite store (APP-INS-1, APP-INS-2): list, show, log,
timeline, and approve/reject/respond/cancel, as tables and as JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from runs_scenario import build_store

from runx_actors.cli import main


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("runs") / "runs.sqlite3")


@pytest.fixture
def store(built: Path, tmp_path: Path) -> Path:
    """A private copy (the write commands change it)."""
    copy = tmp_path / "runs.sqlite3"
    shutil.copy(built, copy)
    return copy


def cli(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def cli_json(*args: str) -> Any:
    out = cli(*args, "--json")
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_list_filters_by_status_and_scope(store: Path) -> None:
    rows = cli_json("runs", "list", "--store", str(store))["runs"]
    assert {(r["run_id"], r["status"], r["waiting"]) for r in rows} == {
        ("asks", "active", 1), ("busy", "completed", 0), ("done", "completed", 0),
        ("pending", "active", 1), ("slow", "completed", 0)}
    active = cli_json("runs", "list", "--store", str(store), "--status", "active")["runs"]
    assert [r["run_id"] for r in active] == ["asks", "pending"]
    assert [r["run_id"] for r in cli_json("runs", "list", "--store", str(store), "--scope",
                                          "app")["runs"]] == [
        "asks", "busy", "done", "pending", "slow"]
    # a scope the store does not have is an error (RUN-CLI-2), not an empty list
    unknown = cli("runs", "list", "--store", str(store), "--scope", "other")
    assert unknown.exit_code == 1
    assert "the store has no scope 'other'" in unknown.stderr
    table = cli("runs", "list", "--store", str(store))
    assert table.exit_code == 0 and "pending" in table.stdout and "completed" in table.stdout


def test_show_state_usage_answer_and_waiting(store: Path) -> None:
    busy = cli_json("runs", "show", "busy", "--store", str(store))
    assert busy["status"] == "completed" and busy["epoch"] == 2 and busy["head"] == 14
    assert busy["usage"] == {"input_tokens": 30, "output_tokens": 10}
    assert busy["answer"]["text"] == "finished; failures: effect_unknown"
    pending = cli_json("runs", "show", "pending", "--store", str(store))
    (call,) = pending["waiting"]
    assert call["tool"] == "svc.deploy" and call["arguments"] == {"name": "api"}
    assert call["kind"] == "approval" and pending["current"].startswith("tool")
    table = cli("runs", "show", "pending", "--store", str(store))
    assert "waiting for" in table.stdout and "svc.deploy" in table.stdout


def test_log_lists_positions_epochs_and_commit_ids(store: Path) -> None:
    doc = cli_json("runs", "log", "busy", "--store", str(store))
    facts = doc["facts"]
    assert [f["position"] for f in facts] == list(range(15))
    assert facts[0]["fact"] == "run_created" and facts[0]["commit_id"] == "create:busy"
    assert {f["epoch"] for f in facts[:10]} == {1} and {f["epoch"] for f in facts[10:]} == {2}
    assert facts[10]["fact"] == "tool_call_failed"
    assert facts[10]["payload"]["failure"]["class"] == "effect_unknown"


def test_timeline_mermaid_and_json(store: Path) -> None:
    out = cli("runs", "timeline", "busy", "--store", str(store))
    assert out.exit_code == 0
    text = out.stdout
    assert text.startswith("gantt\n") and "section tool #2" in text
    assert "epoch 1→2 :milestone" in text and "svc.deploy unknown :crit" in text
    tl = json.loads(cli("runs", "timeline", "busy", "--store", str(store), "--format",
                        "json").stdout)
    assert tl["lanes"] == ["run", "model", "tool #1", "tool #2"]
    kinds = {(m["kind"], m["lane"]) for m in tl["marks"]}
    assert {("takeover", "run"), ("approval", "tool #2"), ("recovery", "tool #2")} <= kinds
    assert [b["epoch"] for b in tl["epochs"]] == [1, 2]
    slow = json.loads(cli("runs", "timeline", "slow", "--store", str(store), "--format",
                          "json").stdout)
    model = [(s["outcome"], s["start"], s["end"]) for s in slow["spans"]]
    assert [o for o, _, _ in model] == ["recovered", "completed"]
    assert ("recovery", "model") in {(m["kind"], m["lane"]) for m in slow["marks"]}


def test_approve_then_replay(store: Path) -> None:
    (call,) = cli_json("runs", "show", "pending", "--store", str(store))["waiting"]
    first = cli_json("runs", "approve", "pending", call["call_id"], "--store", str(store))
    assert first["status"] == "accepted" and first["call_id"] == call["call_id"]
    # the call no longer waits: approving it again is refused, nothing is written (not
    # even the epoch bump of opening a writer: the call is checked first, RUN-STO-4)
    before = _bytes_of(store)
    again = cli("runs", "approve", "pending", call["call_id"], "--store", str(store))
    assert again.exit_code == 1 and "no waiting call" in again.stderr
    assert _bytes_of(store) == before
    log = cli_json("runs", "log", "pending", "--store", str(store))["facts"]
    assert log[-1]["fact"] == "tool_call_approved"
    assert sum(f["fact"] == "tool_call_approved" for f in log) == 1


def test_reject_and_cancel(store: Path) -> None:
    out = cli("runs", "reject", "pending", "--reason", "no", "--store", str(store))
    assert out.exit_code == 0 and "rejected" not in out.stderr
    log = cli_json("runs", "log", "pending", "--store", str(store))["facts"]
    assert log[-1]["fact"] == "tool_call_failed"
    assert log[-1]["payload"]["failure"]["class"] == "permission_denied"
    cancelled = cli_json("runs", "cancel", "asks", "--store", str(store))
    assert cancelled["status"] == "accepted"
    assert cli_json("runs", "show", "asks", "--store", str(store))["status"] == "stopped"
    ended = cli("runs", "cancel", "asks", "--store", str(store))  # replay: same id
    assert ended.exit_code == 0 and "already_applied" in ended.stdout


def test_respond_with_json_payload(store: Path, tmp_path: Path) -> None:
    (call,) = cli_json("runs", "show", "asks", "--store", str(store))["waiting"]
    assert call["kind"] == "external_response"
    bad = cli("runs", "respond", "asks", call["call_id"], '{"a": 1, "a": 2}',
              "--store", str(store))
    assert bad.exit_code == 64 and "strict JSON" in bad.stderr
    huge = cli("runs", "respond", "asks", call["call_id"], "-", "--store", str(store),
               input='"' + "x" * (1 << 20) + '"')
    assert huge.exit_code == 64 and "larger than" in huge.stderr
    deep = cli("runs", "respond", "asks", call["call_id"], "[" * 5000 + "]" * 5000,
               "--store", str(store))
    assert deep.exit_code == 64 and "Traceback" not in deep.output
    payload = tmp_path / "answer.json"
    payload.write_text('{"region": "eu", "n": 3}')
    ok = cli_json("runs", "respond", "asks", call["call_id"], f"@{payload}",
                  "--store", str(store))
    assert ok["status"] == "accepted"
    log = cli_json("runs", "log", "asks", "--store", str(store))["facts"]
    assert log[-1]["fact"] == "tool_call_answered"


def test_respond_payload_depth_is_the_readers_limit(store: Path) -> None:
    # F22 (break7): 100 nested arrays were accepted; every reader of outside input stops
    # at 64 levels (README "Hostile input"), and nothing is written when it refuses
    (call,) = cli_json("runs", "show", "asks", "--store", str(store))["waiting"]
    before = _bytes_of(store)
    deep = cli("runs", "respond", "asks", call["call_id"], "[" * 65 + "]" * 65,
               "--store", str(store))
    assert deep.exit_code == 64 and "deeper than 64" in deep.stderr
    assert _bytes_of(store) == before
    ok = cli_json("runs", "respond", "asks", call["call_id"], "[" * 64 + "]" * 64,
                  "--store", str(store))
    assert ok["status"] == "accepted"


def test_respond_null_is_an_answer(store: Path) -> None:
    # a response payload may be any JSON value (spec tool_response_payload); only a
    # tool's own output refuses null (RUN-WIR-4)
    (call,) = cli_json("runs", "show", "asks", "--store", str(store))["waiting"]
    ok = cli_json("runs", "respond", "asks", call["call_id"], "null", "--store", str(store))
    assert ok["status"] == "accepted"


def test_a_call_of_the_other_kind_or_unknown_gets_its_own_hint(store: Path) -> None:
    # F22 (break7): approve of a call waiting for a response said "reload and derive
    # again: ApproveToolCall: call does not wait for approval" with no hint line; a wrong
    # call id got the --scope hint
    (answerable,) = cli_json("runs", "show", "asks", "--store", str(store))["waiting"]
    (approvable,) = cli_json("runs", "show", "pending", "--store", str(store))["waiting"]
    before = _bytes_of(store)
    for args, said, hint in (
            (("approve", "asks", answerable["call_id"]), "waits for a response, not an "
             "approval", "hint: answer it with `runx-actors runs respond RUN CALL PAYLOAD`"),
            (("approve", "asks"), "waits for a response", "runs respond RUN CALL"),
            (("respond", "pending", approvable["call_id"], "1"),
             "waits for an approval, not a response",
             "hint: answer it with `runx-actors runs approve|reject RUN CALL`"),
            (("respond", "asks", "nosuchcall", "1"),
             f"no waiting call 'nosuchcall' (it waits for: {answerable['call_id']} (a "
             "response))", "hint: name one of the waiting calls listed above"),
            (("reject", "pending", "nosuchcall"), "no waiting call 'nosuchcall'",
             "hint: name one of the waiting calls")):
        out = cli("runs", *args, "--store", str(store))
        assert out.exit_code == 1, (args, out.output)
        assert said in out.stderr and hint in out.stderr, (args, out.stderr)
        assert "--scope" not in out.stderr and "derive again" not in out.stderr
    assert _bytes_of(store) == before  # refused before the writer opened


def test_errors_are_reported_not_raised(store: Path, tmp_path: Path) -> None:
    missing = cli("runs", "list", "--store", str(tmp_path / "none.sqlite3"))
    assert missing.exit_code == 1 and "no run store" in missing.stderr
    assert not (tmp_path / "none.sqlite3").exists()  # nothing was created
    unknown = cli("runs", "show", "nope", "--store", str(store))
    assert unknown.exit_code == 1 and "no run 'nope'" in unknown.stderr
    usage = cli("runs", "list", "--store", str(store), "--status", "bogus")
    assert usage.exit_code == 64
    assert "Traceback" not in missing.output + unknown.output + usage.output


def test_runs_on_a_store_after_kill9(tmp_path: Path) -> None:
    """A real SIGKILL mid-call: ``runs show`` / ``timeline`` show the takeover, the lost
    call (effect_unknown) in its lane beside the other call, and the answer."""
    import signal
    import subprocess
    import sys

    app = Path(__file__).with_name("kill9_app.py")
    store = tmp_path / "k9.sqlite3"
    first = subprocess.Popen([sys.executable, str(app), "first", str(store)],
                             stdout=subprocess.PIPE, text=True)
    assert first.stdout is not None
    line = first.stdout.readline()  # blocks until the slow call runs (or the child dies)
    assert line == "tool started\n"
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    second = subprocess.run([sys.executable, str(app), "second", str(store)],
                            capture_output=True, text=True, timeout=120)
    # the fast call ran beside the slow one: the kill may or may not have caught it too
    fast_result = second.stdout.removeprefix("results: ").split(", ")[0]
    assert second.stdout in ("results: 42, effect_unknown\n",
                             "results: effect_unknown, effect_unknown\n"), second.stderr
    show = cli_json("runs", "show", "k9-run", "--store", str(store))
    assert show["status"] == "completed" and show["epoch"] == 2
    tl = json.loads(cli("runs", "timeline", "k9-run", "--store", str(store), "--format",
                        "json").stdout)
    tools = {(s["lane"], s["label"], s["outcome"]) for s in tl["spans"] if s["kind"] == "tool"}
    fast_outcome = "completed" if fast_result == "42" else "unknown"
    assert tools == {("tool #1", "t.fast", fast_outcome), ("tool #2", "t.slow", "unknown")}
    assert ("takeover", "run") in {(m["kind"], m["lane"]) for m in tl["marks"]}


def test_a_run_id_in_two_scopes_needs_scope(store: Path) -> None:
    import trio

    from runx_actors.app import open_sqlite_runtime
    from runx_actors.executors import ScriptedModel

    async def other_scope() -> None:
        async with open_sqlite_runtime(store, scope="other", model="m",
                                       models={"m": ScriptedModel([reply_done()])}) as rt:
            await rt.create_run("done", ["again"])

    trio.run(other_scope)
    ambiguous = cli("runs", "show", "done", "--store", str(store))
    assert ambiguous.exit_code == 64 and "'app', 'other'" in ambiguous.stderr
    scoped = cli_json("runs", "show", "done", "--store", str(store), "--scope", "other")
    assert scoped["scope"] == "other" and scoped["status"] == "active"
    assert scoped["current"] == "open (between steps)"


def reply_done() -> Any:
    from runx_actors.executors import reply

    return reply("done")


def test_a_damaged_store_exits_3_and_is_left_alone(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite3"
    empty.write_bytes(b"")
    out = cli("runs", "list", "--store", str(empty))
    assert out.exit_code == 3 and "store check" in out.stderr
    assert empty.read_bytes() == b""  # nothing was written


def _bytes_of(store: Path) -> dict[str, bytes]:
    """Every file of the store (the database and its ``-wal``/``-shm`` companions)."""
    files = sorted(store.rglob("*")) if store.is_dir() else sorted(
        store.parent.glob(store.name + "*"))
    return {f.name: f.read_bytes() for f in files if f.is_file() and not f.name.endswith("-shm")}
