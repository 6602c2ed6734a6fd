"""Pause and resume (loop-host §7): the answers file, host-attested approvals and the
resume algorithm.

A parked Run's requests are never stored: their ids are derived from the Waiting calls
(``agent_task.<task>.output``, ``approval.<tool>[.k]``). :func:`resume_run` validates a
whole answers file before anything is committed, re-verifies the context entries and the
package, commits each answer or approval under its derived command id, and drives the Run
again: it seals (and records the loop turn, if any) when the Run ends, or reports the new
requests when it parks again.

Approvals are host-attested (§7.4): only the ``approvals`` section (or the harness's
``caller.approvals``) commits them, as the local operator. An ``"actor": "agent"`` entry, an
agent answer aimed at an approval gate, or an approval aimed at an agent request is
refused and nothing is committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import attrs
import cattrs
import trio

from ..protocol import facts as F
from ..protocol.canonical import canonical_json_text
from ..protocol.digests import digest_tool_response_payload
from ..protocol.errors import RunNotFoundError
from ..protocol.values import RunStatus
from ..runtime import answer, approve, reject
from ..store._check import ScopeNotFoundError
from ..store._verify import verify_run
from ._governed import (
    GovernedSession,
    HostConfig,
    RequestInfo,
    open_session,
    requests_of,
    verify_request_context,
)
from ._records import fold_governed, governed_stream
from ._strict import strict_converter
from .errors import (
    AnswersError,
    ApprovalNotAttestedError,
    PackageChangedError,
    UnknownRunError,
)
from .loop import DEFAULT_SCOPE
from .package import GraphRunner, load_package
from .receipts import Disposition
from .skill import finish, report_ended

__all__ = [
    "ANSWERS_IGNORED",
    "ALREADY_ANSWERED",
    "Closure",
    "Approval",
    "AnswersFile",
    "parse_answers",
    "ResumeOutcome",
    "resume_run",
]

#: Warning when answers arrive for a Run that has already ended (§7.3 step 2).
ANSWERS_IGNORED = "answers ignored: the run has already ended"
#: Warning for a different answer to an already answered request (§7.3 step 3).
ALREADY_ANSWERED = "request already answered"
_NOT_ATTESTED = "approval must be host-attested"
_DISPOSITIONS = frozenset(d.value for d in Disposition)


@attrs.frozen(kw_only=True)
class Closure:
    """An answer's ``closure``: the step's disposition (default ``closed``)."""

    disposition: str


@attrs.frozen(kw_only=True)
class Approval:
    """One host-attested approval decision."""

    approved: bool
    reason: str | None = None
    actor: str | None = None


@attrs.frozen(kw_only=True)
class AnswersFile:
    """The answers file (§7.2): ``answers`` (agent requests → answer objects) and
    ``approvals`` (approval requests → decisions)."""

    answers: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    approvals: dict[str, Approval] = attrs.field(factory=dict)


def _make_converter() -> cattrs.Converter:
    conv = strict_converter()

    def approval(value: Any, _: Any) -> Approval:
        if isinstance(value, bool):
            return Approval(approved=value)
        if not isinstance(value, Mapping):
            raise TypeError(f"an approval is true, false or an object, got {value!r}")
        return conv.structure_attrs_fromdict(dict(value), Approval)

    def answer_object(value: Any, _: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise TypeError(f"an answer is an object, got {value!r}")
        return dict(value)

    conv.register_structure_hook(Approval, approval)
    conv.register_structure_hook_func(lambda t: t == dict[str, Any], answer_object)
    return conv


_converter = _make_converter()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, cattrs.errors.ForbiddenExtraKeysError):
        return f"unknown keys {sorted(exc.extra_fields)}"
    if isinstance(exc, cattrs.errors.BaseValidationError):
        return "; ".join(_describe(e) for e in exc.exceptions) or str(exc)
    return str(exc)


def parse_answers(document: Any) -> AnswersFile:
    """Structure a parsed answers file (§7.2): only ``answers`` and ``approvals`` at the
    top level; every approval ``true``, ``false`` or ``{approved, reason?, actor?}``.

    Raises:
        AnswersError: anything else (nothing is committed).
    """
    if not isinstance(document, Mapping):
        raise AnswersError("the answers file must be a JSON object", key="")
    try:
        return _converter.structure(dict(document), AnswersFile)
    except (cattrs.errors.BaseValidationError, TypeError, ValueError) as exc:
        raise AnswersError(f"invalid answers file: {_describe(exc)}", key="") from None


@attrs.frozen(kw_only=True)
class ResumeOutcome:
    """What :func:`resume_run` returns: the ``runx.skill_run.v1`` result and the warnings
    to print on stderr."""

    result: dict[str, Any]
    warnings: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        """The CLI exit code of the resumed result (as ``skill``'s, loop-host §9.1)."""
        from .skill import exit_code_of

        return exit_code_of(self.result)


@attrs.frozen
class _Commit:
    info: RequestInfo
    kind: str  # "answer" | "approve" | "reject"
    payload: Any = None
    reason: str = ""


def _attestation_error(message: str, key: str) -> ApprovalNotAttestedError:
    return ApprovalNotAttestedError(f"{_NOT_ATTESTED}: {message}", key=key)


def _check_answer(runner: Any, info: RequestInfo, key: str, value: dict[str, Any]) -> None:
    payload = info.payload()
    step_id = payload.get("step_id") if isinstance(payload, dict) else None
    step = next((s for s in getattr(runner, "steps", ()) if s.id == step_id), None)
    if step is None:
        raise AnswersError(f"{key}: the request names no step of the runner", key=key)
    declared = set(step.outputs)
    extra = sorted(set(value) - declared - {"closure"})
    if extra:
        raise AnswersError(f"{key}: unknown keys {extra}", key=key)
    missing = sorted(declared - set(value))
    if missing:
        raise AnswersError(f"{key}: missing outputs {missing}", key=key)
    bad = sorted(k for k in declared if not isinstance(value[k], str))
    if bad:
        raise AnswersError(f"{key}: outputs must be strings: {bad}", key=key)
    if "closure" in value:
        if not isinstance(value["closure"], Mapping):  # cattrs would raise AttributeError
            raise AnswersError(f"{key}: closure must be an object", key=key)
        try:
            closure = _converter.structure(value["closure"], Closure)
        except (cattrs.errors.BaseValidationError, TypeError, ValueError) as exc:
            raise AnswersError(f"{key}: invalid closure: {_describe(exc)}", key=key) from None
        if closure.disposition not in _DISPOSITIONS:
            raise AnswersError(f"{key}: {closure.disposition!r} is not a disposition", key=key)


def _same_answer(settled: F.Fact, payload: Any) -> bool:
    if isinstance(settled, F.ToolCallAnswered):
        return settled.response_digest == digest_tool_response_payload(
            canonical_json_text(payload))
    return False


def _same_approval(settled: F.Fact, decision: Approval) -> bool:
    if isinstance(settled, F.ToolCallApproved):
        return decision.approved
    if isinstance(settled, F.ToolCallFailed) and not decision.approved:
        return (settled.failure.class_ == "permission_denied"
                and settled.failure.message == (decision.reason or ""))
    return False


def plan_commits(runner: Any, requests: Mapping[str, tuple[RequestInfo, F.Fact | None]],
                 answers: AnswersFile, run_id: str) -> tuple[list[_Commit], list[str]]:
    """Validate the whole answers file against the Run's requests (§7.3 step 3, §7.4).

    Returns the commits to make and the warnings. Pure.

    Raises:
        AnswersError, ApprovalNotAttestedError: the file is invalid; nothing is committed.
    """
    commits: list[_Commit] = []
    warnings: list[str] = []
    for key, value in answers.answers.items():
        found = requests.get(key)
        if found is None:
            raise AnswersError(f"{key} names no request of run {run_id}", key=key)
        info, settled = found
        if info.kind == "approval":
            raise _attestation_error("an agent answer cannot satisfy an approval gate", key)
        _check_answer(runner, info, key, value)
        if settled is not None:
            if not _same_answer(settled, value):
                warnings.append(f"{ALREADY_ANSWERED}: {key}")
            continue
        commits.append(_Commit(info, "answer", payload=value))
    for key, decision in answers.approvals.items():
        found = requests.get(key)
        if found is None:
            raise AnswersError(f"{key} names no request of run {run_id}", key=key)
        info, settled = found
        if info.kind != "approval":
            raise _attestation_error("an approval cannot answer an agent request", key)
        if decision.actor not in (None, "human"):
            raise _attestation_error(f"actor {decision.actor!r} cannot approve", key)
        if settled is not None:
            if not _same_approval(settled, decision):
                warnings.append(f"{ALREADY_ANSWERED}: {key}")
            continue
        if decision.approved:
            commits.append(_Commit(info, "approve"))
        else:
            commits.append(_Commit(info, "reject", reason=decision.reason or ""))
    return commits, warnings


async def _commit(session: GovernedSession, item: _Commit) -> None:
    store = session.rt.run_store
    request = item.info.request
    if item.kind == "answer":
        await answer(store, request, item.payload)
    elif item.kind == "approve":
        await approve(store, request)
    else:
        await reject(store, request, item.reason)


_NOT_GOVERNED_HINT = ("`resume` answers runs made by `runx-actors skill` (or a loop turn); "
                      "answer another Run's waiting call with `runx-actors runs approve|"
                      "reject|respond`")


async def _refuse_unknown(store: Any, reader: Any, scope: str, run_id: str) -> NoReturn:
    """Raise the right error for a *run_id* that has no ``run_opened`` in *scope*: the
    scope does not exist (ScopeNotFoundError), the Run exists but was not made by the
    host (UnknownRunError, reason ``not_governed``), or there is no such Run."""
    scope_epoch = getattr(store, "scope_epoch", None)
    if scope_epoch is not None and await scope_epoch(scope) == 0:
        raise ScopeNotFoundError(f"the store has no scope {scope!r}", scope=scope)
    try:
        await reader.record(run_id)
    except RunNotFoundError:
        raise UnknownRunError(f"unknown run {run_id!r} in scope {scope!r}",
                              run_id=run_id) from None
    raise UnknownRunError(f"run {run_id!r} in scope {scope!r} was not made by `runx-actors "
                          "skill` (it has no run_opened record), so it has no answers "
                          "file to resume", run_id=run_id, reason="not_governed",
                          hint=_NOT_GOVERNED_HINT)


async def resume_run(store: Any, run_id: str, answers: Any, *, config: HostConfig,
                     scope: str = DEFAULT_SCOPE) -> ResumeOutcome:
    """Resume the parked Run *run_id* with *answers* (a parsed answers file or an
    :class:`AnswersFile`) (§7.3).

    1. An unknown run id raises :class:`UnknownRunError` (``reason`` ``not_governed``
       for a Run of the scope that the host did not make); a scope the store does not
       have raises ScopeNotFoundError.
    2. A terminal Run is sealed (and recorded) if needed and reported; the answers are
       ignored with the warning :data:`ANSWERS_IGNORED`.
    3. The whole file is validated; an identical answer to an already answered request is
       accepted, a different one is skipped with :data:`ALREADY_ANSWERED`.
    4. The requests' context entries, the package digest and the runner are re-verified.
    5. Each answer/approval is committed under its derived command id.
    6. The Run is driven: sealed and recorded if it ends, its new requests if it parks.

    Raises:
        UnknownRunError, ScopeNotFoundError, AnswersError, ApprovalNotAttestedError,
        ContextSkillChanged, PackageChangedError, PackageError: nothing was committed.
        CorruptStoreError, CorruptRecordError: the store or the Run is damaged (a fact, the
            commit-id index, an epoch or a frozen body); checked before anything is
            written, so nothing was.
        OwnershipLostError: another writer took over the scope.
    """
    reader = await store.reader(scope)
    gov = fold_governed(run_id, await reader.read_stream(governed_stream(run_id)))
    if gov.opened is None:
        await _refuse_unknown(store, reader, scope, run_id)
    opened = gov.opened
    package = await trio.to_thread.run_sync(load_package, str(opened["package_path"]))
    runner_name = str(opened["runner"])
    parsed = answers if isinstance(answers, AnswersFile) else parse_answers(answers)
    state = (await reader.record(run_id)).state
    # RUN-STO-4: the Run's facts and bodies are checked before a writer is opened (which
    # bumps the scope's epoch) or anything is committed.
    await verify_run(reader, store.frozen, run_id)
    if state.status is not RunStatus.ACTIVE:
        async with open_session(store, scope, package, runner_name, config) as session:
            result = await report_ended(session, run_id)
        ignored = (ANSWERS_IGNORED,) if parsed.answers or parsed.approvals else ()
        return ResumeOutcome(result=result, warnings=ignored)
    requests = requests_of(await reader.run_facts(run_id))
    runner = package.spec.runners.get(runner_name)
    commits, warnings = plan_commits(runner if isinstance(runner, GraphRunner) else None,
                                     requests, parsed, run_id)
    for item in commits:
        await verify_request_context(package.root, item.info)
    if package.digest != opened.get("package_digest"):
        raise PackageChangedError("package digest changed since the run was opened",
                                  run_id=run_id)
    if runner is None or runner.kind != opened.get("runner_kind"):
        raise PackageChangedError(f"runner {runner_name} changed since the run was opened",
                                  run_id=run_id)
    async with open_session(store, scope, package, runner_name, config) as session:
        for item in commits:
            await _commit(session, item)
        result = await finish(session, run_id)
    return ResumeOutcome(result=result, warnings=tuple(warnings))
