"""Standalone governed runs (``runx-actors skill``) and the ``runx.skill_run.v1`` result
(loop-host §2.2, §7.1, §9.2).

:func:`run_skill` checks the input contract, creates one governed Run with its
``run_opened`` fact, drives it, and either seals it (``run_sealing``, receipts,
``run_sealed``) or reports it parked with its requests. The returned dict is exactly what
``skill --json`` prints; :func:`exit_code_of` maps it to the §9.1 exit code.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from ._governed import (
    GovernedSession,
    HostConfig,
    Phase,
    RequestInfo,
    check_input_body,
    check_runner,
    open_session,
)
from ._hashing import digest_json
from ._records import run_open_commit
from ._sealing import SealedRun
from .errors import LoopConfigMismatch
from .loop import DEFAULT_SCOPE
from .package import Package, apply_input_contract

__all__ = [
    "SKILL_RUN_SCHEMA",
    "RUN_ID_ENV",
    "derive_run_key",
    "derive_run_trigger",
    "new_run_id",
    "skill_run_result",
    "exit_code_of",
    "run_skill",
    "check_skill",
    "resume_command",
]

SKILL_RUN_SCHEMA = "runx.skill_run.v1"
#: Environment variable that pins a standalone run's id (§2.2).
RUN_ID_ENV = "RUNX_RUN_ID"

_STATUS = {"closed": "sealed", "blocked": "policy_denied", "deferred": "needs_agent"}


def derive_run_key(run_id: str, runner: str, inputs: Mapping[str, Any]) -> str:
    """``H({"schema": "runx_actors.run_key.v1", "run_id", "runner", "inputs"})``: a
    standalone run's ``intent_key`` (§2.2)."""
    return digest_json({"schema": "runx_actors.run_key.v1", "run_id": run_id,
                        "runner": runner, "inputs": dict(inputs)})


def derive_run_trigger(run_id: str, package_digest: str) -> str:
    """``H({"schema": "runx_actors.run_trigger.v1", "run_id", "package_digest"})``."""
    return digest_json({"schema": "runx_actors.run_trigger.v1", "run_id": run_id,
                        "package_digest": package_digest})


def new_run_id(runner: str, env: Mapping[str, str] | None = None) -> str:
    """``$RUNX_RUN_ID`` if set, else ``run_<runner, - as _>_<16 random hex>`` (§2.2)."""
    environ = os.environ if env is None else env
    pinned = environ.get(RUN_ID_ENV)
    if pinned:
        return pinned
    return f"run_{runner.replace('-', '_')}_{secrets.token_hex(8)}"


def resume_command(run_id: str) -> str:
    """The ``next`` of a parked run: ``runx-actors resume <run_id> - --json``."""
    return f"runx-actors resume {run_id} - --json"


def skill_run_result(*, package: Package, runner: str, run_id: str, outcome: str,
                     sealed: SealedRun | None = None,
                     requests: Sequence[RequestInfo] = ()) -> dict[str, Any]:
    """The ``runx.skill_run.v1`` object (§9.2; §7.1 for a parked Run).

    *outcome* is the inner Run state: ``completed``, ``failed``, ``stopped`` or
    ``waiting``. A sealed Run reports its top receipt's closure and (when ``closed``) its
    payload; a parked one its requests and the resume command.
    """
    result: dict[str, Any] = {
        "schema": SKILL_RUN_SCHEMA, "status": "", "outcome": outcome,
        "skill_name": package.name, "runner": runner, "run_id": run_id,
        "receipt_id": None, "closure": None, "payload": None, "next": None,
    }
    if sealed is not None:
        seal = sealed.top.body["seal"]
        disposition = str(seal["disposition"])
        result["status"] = _STATUS.get(disposition, "failure")
        result["receipt_id"] = sealed.top.id
        result["closure"] = {"disposition": disposition, "reason_code": seal["reason_code"],
                             "summary": seal["summary"]}
        result["payload"] = sealed.payload
        return result
    approvals = any(r.kind == "approval" for r in requests)
    result["status"] = "needs_approval" if approvals else "needs_agent"
    result["requests"] = [r.to_json() for r in requests]
    result["next"] = resume_command(run_id)
    return result


def exit_code_of(result: Mapping[str, Any]) -> int:
    """§9.1: ``sealed`` → 0; ``needs_agent`` / ``needs_approval`` → 2; anything else
    (``failure``, ``policy_denied``) → 1."""
    status = result.get("status")
    if status == "sealed":
        return 0
    if status in ("needs_agent", "needs_approval"):
        return 2
    return 1


async def finish(session: GovernedSession, run_id: str) -> dict[str, Any]:
    """Drive *run_id* once more and report it: sealed and recorded when it ends, its
    (re-verified) requests when it parks."""
    phase = await session.drive(run_id)
    if phase == Phase.PARKED:
        requests = await session.waiting_requests(run_id)
        return skill_run_result(package=session.package, runner=session.runner_name,
                                run_id=run_id, outcome="waiting", requests=requests)
    return await report_ended(session, run_id)


async def report_ended(session: GovernedSession, run_id: str) -> dict[str, Any]:
    """Make sure the terminal *run_id* is sealed and recorded, and report it."""
    sealed = await session.seal_and_record(run_id)
    state = await session.state(run_id)
    return skill_run_result(package=session.package, runner=session.runner_name,
                            run_id=run_id, outcome=state.status.value, sealed=sealed)


def check_skill(package: Package, *, inputs: Mapping[str, Any], config: HostConfig,
                runner: str | None = None) -> tuple[str, dict[str, Any]]:
    """What :func:`run_skill` checks before it touches a store: the runner (default: the
    package's default runner) exists and this host serves it (:func:`check_runner`), and
    *inputs* satisfy its input contract. Returns ``(runner name, canonical inputs)``.
    The CLI calls it before it creates or opens the store, so a refused run writes
    nothing at all.

    Raises:
        PackageError: unknown runner, catalog tool or script.
        InputContractError: the inputs violate the contract.
    """
    name = runner or package.default_runner
    spec = package.runner(name)
    check_runner(package, name, config)
    return name, apply_input_contract(spec, inputs)


async def run_skill(store: Any, package: Package, *, inputs: Mapping[str, Any],
                    config: HostConfig, runner: str | None = None,
                    scope: str = DEFAULT_SCOPE, run_id: str | None = None,
                    created_at_pin: str | None = None,
                    env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run *package*'s *runner* once as a governed Run and return ``runx.skill_run.v1``.

    *run_id* defaults to :func:`new_run_id` (``$RUNX_RUN_ID`` from *env*, default
    ``os.environ``). *created_at_pin* pins ``created_at`` (receipts and context entries),
    as the harness does. Repeating a run id with the same inputs replays it (the stored
    result is reported); with other inputs it is refused.

    Checkpoint: always.
    Raises:
        InputContractError: the inputs violate the contract (no Run, no receipt).
        PackageError: unknown runner, or a catalog tool or script this host does not
            serve (:func:`check_skill`; no Run, no receipt).
        LoopConfigMismatch: *run_id* exists with other inputs or runner.
        ContextSkillChanged: a parked request's context changed (it is withheld).
        OwnershipLostError: another writer took over the scope.
        CorruptRecordError: the store holds a damaged body this Run needs (nothing is
            written: checked before the scope is opened).
    """
    name, canonical = check_skill(package, inputs=inputs, config=config, runner=runner)
    rid = run_id or new_run_id(name, env)
    # validated before the scope opens (an epoch bump is a write): RUN-STO-4
    await check_input_body(store.frozen, canonical)
    async with open_session(store, scope, package, name, config) as session:
        opened = session.run_opened_body(
            run_id=rid, inputs=canonical, intent_key=derive_run_key(rid, name, canonical),
            trigger_fingerprint=derive_run_trigger(rid, package.digest),
            created_at_pin=created_at_pin)
        await session.open_run(opened, commit_id=run_open_commit(rid))
        stored = (await session.governed(rid)).opened
        if stored is None or digest_json(dict(stored)) != digest_json(opened):
            raise LoopConfigMismatch(f"run {rid} exists with other inputs", loop_id=None,
                                     field="run_opened")
        return await finish(session, rid)
