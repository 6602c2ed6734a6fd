"""The loop host: loops over governed turns, crash safety and restart verification
(loop-host §2, §3.6; §10 scenarios 14, 15, 18, 22-30; failure-scenarios 9 and 10).

Every scenario uses the demo signing identity, a fresh run store and a fresh receipt
directory ``D``. Crash tests inject the abort with a probe (or a cancel scope), then call
``LoopHost.run(spec)`` again, over SQLite re-opened from its file like a restarted process.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from loop_support import (
    REFUSAL_RUN,
    SCOPE,
    SUCCESS,
    SUCCESS_RUNS,
    Crash,
    copy_example,
    crash_at,
    make_env,
    of_type,
    run_ids_in,
)

from runx_actors.executors import ModelError, call_tools, fs_read_tool, tool_call
from runx_actors.host._hashing import digest_json
from runx_actors.host._records import (
    RUN_SEALING,
    TURN_RECORDED,
    TURN_SUBMITTED,
    fold_loop,
    governed_stream,
    loop_stream,
)
from runx_actors.host.errors import InputContractError, LoopConfigMismatch, LoopIntegrityError
from runx_actors.host.loop import InputRefusedError
from runx_actors.host.package import load_package
from runx_actors.host.receipts import (
    IssuerType,
    Keyring,
    ReceiptStore,
    Signer,
    Verifier,
    receipt_uri,
)
from runx_actors.host.turn import final_reply
from runx_actors.protocol import facts as F
from runx_actors.protocol.canonical import content_digest, read_envelope, typed_envelope
from runx_actors.protocol.errors import OwnershipLostError
from runx_actors.protocol.values import ModelRequest, ModelResult
from runx_actors.store.base import StoredEvent
from runx_actors.store.sqlite import open_sqlite_store

LOCATORS = ("sha256:6e95a6fb5f36b3a20b3ca95a0f6d9b2e112c1f17920f900e77cddab0ac44602a",
            "sha256:61b4e80a290aa873699d606437e6a19f106e3dba4ae3d03c2f802f7744165b33")
CONTENT = ("sha256:2cf53929a51ecb3bbce2180ba233d36361e121ad7867773a46820915832d815d",
           "sha256:9c682f3974756d98a49ea4152f36d54ba479f524f5dfeebeca6451366f9200b4")


def receipts_by_uri(env: Any) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for body in env.receipt_bodies():
        out.setdefault(body["subject"]["ref"]["uri"], []).append(body)
    return out


def assert_success_outcome(outcome: Any) -> None:
    assert (outcome.status, outcome.stop_reason, outcome.exit_code) == \
        ("stopped", "next_turn_not_allowed", 0)
    assert [t.run_id for t in outcome.turns] == list(SUCCESS_RUNS)
    assert [t.payload["decision"] for t in outcome.turns] == ["continue", "done"]
    assert [t.disposition for t in outcome.turns] == ["closed", "closed"]


def stub_package(tmp_path: Path, script: str) -> Any:
    """A copy of the example whose ``turn`` runner is driven by *script*."""
    root = copy_example(tmp_path, f"pkg-{script}")
    xyaml = root / "X.yaml"
    xyaml.write_text(xyaml.read_text().replace("script: loop-turn", f"script: {script}"))
    return load_package(root)


def _body(request: ModelRequest) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(request.body)
    return body


def continue_payload(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A valid ``continue`` payload for any turn index (the host caps the loop)."""
    n = inputs["turn_index"]
    reason = "always continue"
    return {"schema": "runx.loop_turn.v1", "loop_id": inputs["loop_id"], "turn_index": n,
            "decision": "continue", "reason_code": "stub_continue", "next_turn_allowed": True,
            "next_turn_reason": reason,
            "projection_update": {"latest_summary": f"Turn {n} asked for more.",
                                  "consumed_authority": {"tools": ["fs.read"],
                                                         "mutations": 0, "spend_minor": 0}},
            "handoff": {"target": "loop-host", "next_turn_index": n + 1, "reason": reason}}


class AlwaysContinue:
    """Stub model: reads NOTES.md once per turn, then always answers ``continue``."""

    async def complete(self, request: ModelRequest) -> ModelResult:
        await trio.lowlevel.checkpoint()
        body = _body(request)
        if not any(m.get("role") == "tool" for m in body["messages"]):
            return call_tools(tool_call("fs.read", {"path": "NOTES.md"}))
        return final_reply(continue_payload(body["inputs"]))


class Runaway:
    """Stub model that asks for the same tool forever and never answers."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResult:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        return call_tools(tool_call("fs.read", {"path": "NOTES.md"}))


def slow_read(workspace: Path, seconds: float, *, gate: trio.Event | None = None,
              started: trio.Event | None = None) -> Any:
    """``fs.read`` with the real declaration, taking *seconds* of trio's clock (or
    waiting for *gate*)."""
    real = fs_read_tool(workspace)

    async def read(path: str) -> Any:
        if started is not None:
            started.set()
        if gate is not None:
            await gate.wait()
        else:
            await trio.sleep(seconds)
        return real.fn(path=path)

    return attrs.evolve(real, fn=read)


# -- 14, 15: the two demonstration loops ------------------------------------------------


async def test_success_loop_two_turns(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    outcome = await env.host().run(env.spec("success"))
    assert_success_outcome(outcome)
    assert run_ids_in(env.store) == sorted(SUCCESS_RUNS)
    first, second = (t.payload for t in outcome.turns)
    assert second["previous_summary"] == first["projection_update"]["latest_summary"]
    assert second["handoff"] is None and first["handoff"]["next_turn_index"] == 2
    files = env.receipt_files()
    assert len(files) == 2
    by_uri = receipts_by_uri(env)
    r1 = by_uri[f"hrn_{SUCCESS_RUNS[0]}_turn"][0]
    r2 = by_uri[f"hrn_{SUCCESS_RUNS[1]}_turn"][0]
    assert [r1["subject"]["ref"]["locator"], r2["subject"]["ref"]["locator"]] == list(LOCATORS)
    assert [r1["idempotency"]["content_hash"], r2["idempotency"]["content_hash"]] == \
        list(CONTENT)
    assert "previous" not in r1["lineage"]
    assert r2["lineage"]["previous"] == {"type": "receipt", "uri": receipt_uri(r1["id"]),
                                         "locator": r1["digest"]}
    assert [t.receipt_id for t in outcome.turns] == [r1["id"], r2["id"]]
    record = fold_loop("loop-demo-success", await env.stream(loop_stream("loop-demo-success")))
    assert record is not None
    doc = record.to_json()
    assert doc["schema"] == "runx_actors.loop_record.v1"
    assert [t["state"] for t in doc["turns"]] == ["recorded", "recorded"]
    assert [t["payload"] for t in doc["turns"]] == [first, second]
    assert outcome.projection == {
        "latest_summary": "Turn 2 ended with done: fixture_objective_complete.",
        "consumed_authority": {"tools": ["fs.read", "fs.read"], "mutations": 0,
                               "spend_minor": 0},
        "last_receipt_id": r2["id"]}


async def test_refusal_loop_single_turn(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    outcome = await env.host().run(env.spec("refusal"))
    assert (outcome.status, outcome.stop_reason, outcome.exit_code) == \
        ("stopped", "next_turn_not_allowed", 0)
    (turn,) = outcome.turns
    assert turn.run_id == REFUSAL_RUN
    assert (turn.payload["decision"], turn.payload["reason_code"]) == \
        ("refused", "tool_not_allowed")
    assert turn.payload["next_turn_allowed"] is False and turn.payload["handoff"] is None
    assert turn.payload["next_turn_reason"] == "fs.write is not in allowed_tools"
    assert turn.disposition == "closed" and turn.reason_code == "step_closed"
    assert run_ids_in(env.store) == [REFUSAL_RUN]  # turn 2 never gets a Run
    submitted = [e for e in await env.stream(loop_stream("loop-demo-refusal"))
                 if e.type == TURN_SUBMITTED]
    assert len(submitted) == 1
    assert len(env.receipt_files()) == 1


# -- 18 and failure-scenario 9: budgets ---------------------------------------------------


async def test_host_counter_caps_turns(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    package = stub_package(tmp_path, "always-continue")
    host = env.host(models={"always-continue": AlwaysContinue()})
    outcome = await host.run(env.spec("success", package=package))
    assert (outcome.status, outcome.stop_reason, outcome.exit_code) == \
        ("stopped", "max_turns_reached", 0)
    assert [t.turn_index for t in outcome.turns] == [1, 2, 3]
    assert all(t.payload["next_turn_allowed"] for t in outcome.turns)
    assert len(run_ids_in(env.store)) == 3
    assert len(env.receipt_files()) == 3


async def test_a_budget_that_is_no_turn_count_starts_no_model(tmp_path: Path) -> None:
    # F15 (break7): with a model that does not check the budget itself, max_turns 0 ran
    # one full turn (model + fs.read) and 2.5 ran three; the host refuses them first
    env = make_env(tmp_path)
    package = stub_package(tmp_path, "always-continue")
    model = AlwaysContinue()
    calls: list[ModelRequest] = []

    class Counting:
        async def complete(self, request: ModelRequest) -> ModelResult:
            calls.append(request)
            return await model.complete(request)

    host = env.host(models={"always-continue": Counting()})
    for bad in (0, -1, 2.5):
        with pytest.raises(InputContractError) as refused:
            await host.run(env.spec("success", package=package, loop_id=f"loop-{bad}",
                                    max_turns=bad))
        assert refused.value.field == "max_turns"
        assert not await env.stream(f"loop/loop-{bad}")
    assert calls == [] and run_ids_in(env.store) == [] and env.receipt_files() == []


async def test_field_9_runaway_loop_hits_budget(tmp_path: Path, autojump_clock: Any) -> None:
    # (a) a turn that always asks for more: the host's max-turn counter stops the loop.
    env = make_env(tmp_path)
    package = stub_package(tmp_path, "always-continue")
    # (tools run on trio's clock, not in worker threads: the mock clock must not jump
    # past the drive's timeout while a thread works)
    capped = await env.host(models={"always-continue": AlwaysContinue()}, seal_timeout=None,
                            tools=[slow_read(env.workspace, 0)]).run(
        env.spec("success", package=package, loop_id="runaway-turns", max_turns=2))
    assert (capped.status, capped.stop_reason) == ("stopped", "max_turns_reached")
    assert len(capped.turns) == 2 and all(t.receipt_id for t in capped.turns)

    # (b) a model that asks for the same tool forever inside one turn: the runner's
    # timeout_seconds (15 s of active driving) stops it; the Run is sealed timed_out.
    runaway = Runaway()
    package = stub_package(tmp_path, "runaway")
    host = env.host(models={"runaway": runaway}, tools=[slow_read(env.workspace, 1.0)],
                    seal_timeout=None)
    start = trio.current_time()
    outcome = await host.run(env.spec("success", package=package, loop_id="runaway-steps"))
    assert 15 <= trio.current_time() - start < 20
    assert (outcome.status, outcome.stop_reason, outcome.exit_code) == \
        ("failed", "turn_failed", 1)
    (turn,) = outcome.turns
    assert (turn.disposition, turn.reason_code) == ("timed_out", "step_timed_out")
    assert turn.payload is None
    assert runaway.calls >= 10
    body = next(b for b in env.receipt_bodies()
                if b["subject"]["ref"]["uri"] == f"hrn_{turn.run_id}_turn")
    assert body["seal"]["summary"].endswith(": cancelled")
    sealing = [e.payload for e in await env.stream(governed_stream(turn.run_id))
               if e.type == RUN_SEALING]
    assert sealing[0]["disposition_override"] == "timed_out"


# -- failure-scenario 10: inputs keep arriving across turns ------------------------------


async def test_field_10_inputs_across_turns(tmp_path: Path, autojump_clock: Any) -> None:
    env = make_env(tmp_path)
    host = env.host(tools=[slow_read(env.workspace, 1.0)], seal_timeout=None)
    spec = env.spec("success")
    sent: list[tuple[str, str | None]] = []
    done = trio.Event()

    async def sender() -> None:
        i = 0
        while not done.is_set():  # an endless stream of arrivals
            text = f"arrival-{i}"
            try:
                sent.append((text, await host.submit_input(spec.loop_id, text)))
            except InputRefusedError:
                sent.append((text, None))
            i += 1
            await trio.sleep(0.125)

    outcomes = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        outcomes.append(await host.run(spec))
        done.set()
    assert_success_outcome(outcomes[0])  # the host did not loop forever

    recorded: dict[str, list[str]] = {}
    for run_id in SUCCESS_RUNS:
        for fact in of_type(await env.facts(run_id), F.InputAccepted):
            recorded.setdefault(fact.input.digest, []).append(run_id)
    accepted = [(t, r) for t, r in sent if r is not None]
    refused = [t for t, r in sent if r is None]
    assert {r for _, r in accepted} == set(SUCCESS_RUNS)  # arrivals reached both turns
    assert refused  # and some found no turn accepting inputs
    for text, run_id in accepted:  # recorded exactly once, in the Run reported
        assert recorded[content_digest("agent_input", {"text": text})] == [run_id]
    for text in refused:  # refused with an error: recorded nowhere
        assert content_digest("agent_input", {"text": text}) not in recorded
    extra = sum(len(v) for v in recorded.values()) - len(SUCCESS_RUNS)  # minus the inputs
    assert extra == len(accepted)
    with pytest.raises(InputRefusedError):  # after the loop: refused, never dropped
        await host.submit_input(spec.loop_id, "late")


# -- 22-26: crash matrix ------------------------------------------------------------------


async def test_crash_before_creation_commit(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    async with open_sqlite_store(path) as store:
        env = make_env(tmp_path, store=store)
        probe = crash_at("before_creation_commit", turn_index=2)
        with pytest.raises(Crash):
            await env.host(probe=probe).run(env.spec("success"))
        reader = await store.reader(SCOPE)
        events = await reader.read_stream(loop_stream("loop-demo-success"))
        assert [e.type for e in events].count(TURN_RECORDED) == 1
        assert [e.type for e in events].count(TURN_SUBMITTED) == 1
    async with open_sqlite_store(path) as store:  # the restarted process
        env = attrs.evolve(env, store=store)
        outcome = await env.host().run(env.spec("success"))
        assert_success_outcome(outcome)
        assert outcome.turns[1].run_id == SUCCESS_RUNS[1]
    assert len(env.receipt_files()) == 2


class _AmbiguousWriter:
    """A writer whose creation commit for one commit id applies, then reports an error."""

    def __init__(self, inner: Any, commit_id: str, attempts: list[str]) -> None:
        self.inner, self.commit_id, self.attempts = inner, commit_id, attempts
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def create_run(self, *args: Any, commit_id: str, **kw: Any) -> Any:
        self.attempts.append(commit_id)
        result = await self.inner.create_run(*args, commit_id=commit_id, **kw)
        if commit_id == self.commit_id and not self.failed:
            self.failed = True
            raise ConnectionError("the commit applied, but its answer was lost")
        return result


class _AmbiguousStore:
    def __init__(self, inner: Any, commit_id: str) -> None:
        self.inner, self.commit_id = inner, commit_id
        self.attempts: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def open(self, scope: str) -> Any:
        return _AmbiguousWriter(await self.inner.open(scope), self.commit_id, self.attempts)


async def test_crash_unknown_commit_outcome(tmp_path: Path) -> None:
    from runx_actors.host._records import turn_submit_commit

    async with open_sqlite_store(tmp_path / "runs.sqlite") as inner:
        commit_id = turn_submit_commit("loop-demo-success", 2)
        store = _AmbiguousStore(inner, commit_id)
        env = make_env(tmp_path, store=store)
        outcome = await env.host().run(env.spec("success"))
        assert_success_outcome(outcome)
        assert store.attempts.count(commit_id) == 2  # replayed once: "already applied"
        reader = await inner.reader(SCOPE)
        for run_id in SUCCESS_RUNS:
            assert of_type(await reader.run_facts(run_id), F.RunCreated)
        events = await reader.read_stream(loop_stream("loop-demo-success"))
        assert [e.payload["run_id"] for e in events if e.type == TURN_SUBMITTED] == \
            list(SUCCESS_RUNS)
    assert len(env.receipt_files()) == 2


async def test_crash_mid_run(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    gate, started = trio.Event(), trio.Event()
    async with open_sqlite_store(path) as store:
        env = make_env(tmp_path, store=store)
        host = env.host(tools=[slow_read(env.workspace, 0, gate=gate, started=started)])
        with trio.CancelScope() as crash:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(host.run, env.spec("success"))
                await started.wait()  # fs.read executes: the host dies now
                crash.cancel()
        assert crash.cancelled_caught
        reader = await store.reader(SCOPE)
        facts = await reader.run_facts(SUCCESS_RUNS[0])
        assert len(of_type(facts, F.ToolCallStarted)) == 1
        assert not of_type(facts, F.ToolCallCompleted) and not of_type(facts, F.RunEnded)
    async with open_sqlite_store(path) as store:
        env = attrs.evolve(env, store=store)
        outcome = await env.host().run(env.spec("success"))
        assert_success_outcome(outcome)
        reader = await store.reader(SCOPE)
        facts = await reader.run_facts(SUCCESS_RUNS[0])
        # the same Run was re-driven: one start, settled once, by the re-dispatched read
        assert len(of_type(facts, F.ToolCallStarted)) == 1
        assert len(of_type(facts, F.ToolCallCompleted)) == 1
        assert len(of_type(facts, F.RunCreated)) == 1
        events = await reader.read_stream(loop_stream("loop-demo-success"))
        assert [e.type for e in events].count(TURN_RECORDED) == 2
        assert [e.payload["turn_index"] for e in events if e.type == TURN_RECORDED] == [1, 2]
    assert len(env.receipt_files()) == 2


async def test_crash_after_end_before_seal(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    async with open_sqlite_store(path) as store:
        env = make_env(tmp_path, store=store)
        probe = crash_at("before_run_sealing", run_id=SUCCESS_RUNS[0])
        with pytest.raises(Crash):
            await env.host(probe=probe).run(env.spec("success"))
        reader = await store.reader(SCOPE)
        assert of_type(await reader.run_facts(SUCCESS_RUNS[0]), F.RunEnded)
        assert not [e for e in await reader.read_stream(governed_stream(SUCCESS_RUNS[0]))
                    if e.type == RUN_SEALING]
        assert env.receipt_files() == []
    async with open_sqlite_store(path) as store:
        env = attrs.evolve(env, store=store)
        assert_success_outcome(await env.host().run(env.spec("success")))
    by_uri = receipts_by_uri(env)
    assert len(by_uri[f"hrn_{SUCCESS_RUNS[0]}_turn"]) == 1
    assert len(env.receipt_files()) == 2


async def test_crash_after_receipt_before_record(tmp_path: Path) -> None:
    for rotated in (False, True):
        base = tmp_path / ("rotated" if rotated else "same")
        base.mkdir()
        path = base / "runs.sqlite"
        async with open_sqlite_store(path) as store:
            env = make_env(base, store=store)
            probe = crash_at("after_receipt_put", run_id=SUCCESS_RUNS[0])
            with pytest.raises(Crash):
                await env.host(probe=probe).run(env.spec("success"))
            reader = await store.reader(SCOPE)
            events = await reader.read_stream(loop_stream("loop-demo-success"))
            assert TURN_RECORDED not in [e.type for e in events]
            (before,) = env.receipt_files()
            before_bytes = (env.receipt_dir / before).read_bytes()
        async with open_sqlite_store(path) as store:
            env = attrs.evolve(env, store=store)
            if rotated:
                new = Signer.from_seed("rotated-key", b"C" * 32, IssuerType.HOSTED)
                keyring = Keyring.of({env.signer.kid: env.signer.public_key,
                                      new.kid: new.public_key})
                receipts = ReceiptStore(env.receipt_dir, verifier=Verifier(keyring=keyring))
                env = attrs.evolve(env, signer=new, receipts=receipts)
            outcome = await env.host().run(env.spec("success"))
            assert_success_outcome(outcome)
        by_uri = receipts_by_uri(env)
        (turn1,) = by_uri[f"hrn_{SUCCESS_RUNS[0]}_turn"]  # exactly one receipt per turn
        assert (env.receipt_dir / before).read_bytes() == before_bytes
        assert outcome.turns[0].receipt_id == turn1["id"] == "sha256:" + before[7:-5]
        assert turn1["issuer"]["kid"] == "runx-demo-key"
        (turn2,) = by_uri[f"hrn_{SUCCESS_RUNS[1]}_turn"]
        assert turn2["issuer"]["kid"] == ("rotated-key" if rotated else "runx-demo-key")
        assert len(env.receipt_files()) == 2


# -- 27-30: restarts ----------------------------------------------------------------------


async def test_restart_finished_loop_is_noop(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    first = await env.host().run(env.spec("success"))
    log = env.store.scope_log(SCOPE)
    commits, epoch, files = len(log.commits), log.epoch, env.receipt_files()
    again = await env.host().run(env.spec("success"))
    assert again == first
    assert (len(log.commits), log.epoch, env.receipt_files()) == (commits, epoch, files)
    assert run_ids_in(env.store) == sorted(SUCCESS_RUNS)


async def test_restart_with_changed_config_refused(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    await env.host().run(env.spec("success"))
    log = env.store.scope_log(SCOPE)
    commits, epoch = len(log.commits), log.epoch
    for spec in (env.spec("success", max_turns=5),
                 env.spec("success", fixed_inputs={**SUCCESS, "objective": "Another."})):
        with pytest.raises(LoopConfigMismatch) as caught:
            await env.host().run(spec)
        assert caught.value.exit_code == 1
        assert (len(log.commits), log.epoch) == (commits, epoch)  # nothing written
    assert caught.value.field == "fixed_inputs"


@pytest.mark.parametrize("max_turns", [2**53, 2**53 + 1, 2**60, 10**20, -(2**53), 1e300])
async def test_a_max_turns_that_cannot_be_recorded_is_refused_first(
        tmp_path: Path, max_turns: Any) -> None:
    """§2.3: the budget is checked before any loop fact; one past 2^53−1 would be
    recorded as a double (D-11) and then mismatch the spec on every later call (a
    budget of 0 or 1.5 still fails its turn: test_turn_policy)."""
    env = make_env(tmp_path)
    with pytest.raises(InputContractError) as caught:
        await env.host().run(env.spec("success", max_turns=max_turns))
    assert caught.value.field == "max_turns"
    assert env.store.scope_log(SCOPE).commits == []  # nothing written
    outcome = await env.host().run(env.spec("success", max_turns=2**53 - 1))
    assert outcome.status == "stopped"  # the largest budget that records exactly works


async def test_concurrent_hosts_single_run_per_turn(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    results: list[Any] = []

    async def one() -> None:
        try:
            results.append(await env.host().run(env.spec("success")))
        except OwnershipLostError as exc:
            results.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one)
        nursery.start_soon(one)
    assert len(results) == 2
    finished = [r for r in results if not isinstance(r, OwnershipLostError)]
    assert finished, "one host drives the loop to its end"
    for outcome in finished:
        assert_success_outcome(outcome)
    assert run_ids_in(env.store) == sorted(SUCCESS_RUNS)  # one Run per turn index
    events = await env.stream(loop_stream("loop-demo-success"))
    assert [e.type for e in events].count(TURN_SUBMITTED) == 2
    assert [e.type for e in events].count(TURN_RECORDED) == 2
    assert len(env.receipt_files()) == 2
    final = await env.host().run(env.spec("success"))  # and a later host agrees
    assert_success_outcome(final)


async def test_recorded_receipt_missing_or_tampered(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    outcome = await env.host().run(env.spec("success"))
    log = env.store.scope_log(SCOPE)
    commits = len(log.commits)
    receipt = env.receipt_dir / ("sha256-" + outcome.turns[0].receipt_id[7:] + ".json")
    saved = receipt.read_bytes()

    receipt.unlink()
    env.receipts.rebuild_index()
    with pytest.raises(LoopIntegrityError) as caught:
        await env.host().run(env.spec("success"))
    assert caught.value.exit_code == 3 and caught.value.check == "receipt"
    assert len(log.commits) == commits  # nothing submitted

    receipt.write_bytes(saved)
    env.receipts.rebuild_index()
    await env.host().run(env.spec("success"))  # intact again
    stream = log.streams[loop_stream("loop-demo-success")]
    index = next(i for i, e in enumerate(stream) if e.type == TURN_RECORDED)
    _, payload = read_envelope(stream[index].data, record=TURN_RECORDED)
    payload["payload"]["objective"] = "Something else entirely."
    stream[index] = StoredEvent(stream[index].stream, stream[index].index, TURN_RECORDED,
                                typed_envelope(TURN_RECORDED, payload),
                                stream[index].commit_id, stream[index].epoch)
    with pytest.raises(LoopIntegrityError) as caught:
        await env.host().run(env.spec("success"))
    assert caught.value.exit_code == 3 and caught.value.check == "locator"
    assert len(log.commits) == commits
    assert digest_json(payload["payload"]) != outcome.turns[0].receipt_id


# -- a parked turn: paused again on restart, continued after resume -------------------------


async def test_paused_turn_reports_paused_again_then_resumes(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    root = copy_example(tmp_path)
    xyaml = root / "X.yaml"
    xyaml.write_text(xyaml.read_text().replace(
        "    allowed_tools: [fs.read]      # ALLOWED_TOOLS",
        "    approval_required: [fs.read]\n    allowed_tools: [fs.read]      # ALLOWED_TOOLS"))
    package = load_package(root)
    spec = env.spec("success", package=package)
    outcome = await env.host().run(spec)
    assert (outcome.status, outcome.stop_reason, outcome.exit_code, outcome.needs) == \
        ("paused", "turn_paused", 2, "needs_approval")
    assert [r["id"] for r in outcome.requests] == ["approval.fs.read"]
    assert [t.state for t in outcome.turns] == ["submitted"]
    log = env.store.scope_log(SCOPE)
    commits = len(log.commits)
    again = await env.host().run(spec)  # the host exits and restarts: paused again
    assert (again.status, again.exit_code, again.requests) == ("paused", 2, outcome.requests)
    assert len(log.commits) == commits  # no re-prompt, nothing new
    assert env.receipt_files() == []

    from runx_actors.host.resume import resume_run

    run_id = outcome.turns[0].run_id
    resumed = await resume_run(env.store, run_id, {"approvals": {"approval.fs.read": True}},
                               config=env.config(), scope=SCOPE)
    assert resumed.result["payload"]["decision"] == "continue"
    record = fold_loop(spec.loop_id, await env.stream(loop_stream(spec.loop_id)))
    assert record is not None and [t.state for t in record.turns] == ["recorded"]
    second = await env.host().run(spec)  # turn 2 is submitted and parks in its turn
    assert (second.status, [t.state for t in second.turns]) == \
        ("paused", ["recorded", "submitted"])
    await resume_run(env.store, second.turns[1].run_id,
                     {"approvals": {"approval.fs.read": True}}, config=env.config(),
                     scope=SCOPE)
    final = await env.host().run(spec)
    assert (final.status, final.stop_reason, final.exit_code) == \
        ("stopped", "next_turn_not_allowed", 0)
    assert [t.payload["decision"] for t in final.turns] == ["continue", "done"]
    assert len(env.receipt_files()) == 2


# -- model-level failures stay explicit ---------------------------------------------------


async def test_model_failure_is_sealed_and_stops_the_loop(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    class Broken:
        async def complete(self, request: ModelRequest) -> ModelResult:
            from runx_actors.effect import FailureCode

            await trio.lowlevel.checkpoint()
            raise ModelError(FailureCode.BAD_REQUEST, "provider refused")

    host = env.host(models={"loop-turn": Broken()})
    outcome = await host.run(env.spec("success"))
    assert (outcome.status, outcome.stop_reason, outcome.exit_code) == \
        ("failed", "turn_failed", 1)
    (turn,) = outcome.turns
    assert (turn.disposition, turn.reason_code, turn.payload) == ("failed", "step_failed", None)
