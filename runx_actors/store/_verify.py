"""Check a Run before anything is written on its behalf (RUN-STO-4).

:func:`verify_run` reads a Run the way a command that resumes it will — its facts (chain,
commit-id index and head checked by ``run_facts``), its fold, and every frozen body its facts
name (present, a BLOB, hashing to its digest, a strict typed envelope) — so that a
command validates the Run *before* it opens a writer (which bumps the scope's epoch) or
commits anything. Store-agnostic: it uses a ``SessionReader`` and a ``FrozenStore``.
"""

from __future__ import annotations

from typing import Protocol

from ..protocol import facts as F
from ..protocol.canonical import read_envelope
from ..protocol.commit import fold_run
from ..protocol.errors import CorruptRecordError, FrozenValueMissingError, ValidationError
from ..protocol.facts import Fact
from ..protocol.values import Digest, RunID

__all__ = ["fact_digests", "verify_run", "RunReads", "BodyReads"]


class RunReads(Protocol):
    """The reads :func:`verify_run` needs of a ``SessionReader``."""

    async def run_facts(self, run_id: RunID) -> tuple[Fact, ...]: ...


class BodyReads(Protocol):
    """The reads :func:`verify_run` needs of a ``FrozenStore``."""

    async def get(self, digest: Digest) -> bytes: ...


def fact_digests(fact: Fact) -> tuple[tuple[str, Digest], ...]:
    """The frozen bodies *fact* names, as ``(path, digest)`` (path like
    ``input_accepted.input.digest``): the bodies a commit freezes with its facts (§4.2:
    model requests and results, tool outputs and response payloads) and the agent inputs
    the runtime freezes before it submits them. Digests of bodies the store never holds
    (tool definitions, approval decisions) are not listed."""
    match fact:
        case F.InputAccepted(input=i):
            return (("input_accepted.input.digest", i.digest),)
        case F.ModelStepPrepared(request_digest=d):
            return (("model_step_prepared.request_digest", d),)
        case F.ModelStepCompleted(result_digest=d):
            return (("model_step_completed.result_digest", d),)
        case F.ToolCallCompleted(output_digest=d):
            return (("tool_call_completed.output_digest", d),)
        case F.ToolCallAnswered(response_digest=d):
            return (("tool_call_answered.response_digest", d),)
    return ()


async def verify_run(reader: RunReads, frozen: BodyReads, run_id: RunID) -> tuple[Fact, ...]:
    """Read and check *run_id* and every body it names; return its facts. Checkpoints.

    Raises:
        RunNotFoundError: no such Run.
        CorruptRecordError: a fact row is damaged (from ``run_facts``), or a frozen body a
            fact names is missing, not a BLOB, does not hash to its digest or is not a
            typed envelope (``table="frozen"``, ``row`` = the digest, ``run_id``,
            ``position`` = the fact's).
        CorruptStoreError: the database itself is damaged.
        CorruptLogError: the facts do not fold.
    """
    facts = await reader.run_facts(run_id)
    fold_run(facts, run_id=run_id)
    seen: set[Digest] = set()
    for position, fact in enumerate(facts):
        for path, digest in fact_digests(fact):
            if digest in seen:
                continue
            seen.add(digest)
            try:
                data = await frozen.get(digest)
                read_envelope(data, record=path)
            except FrozenValueMissingError as exc:
                raise CorruptRecordError(
                    f"run {run_id!r}, fact {position} ({path}): the frozen body {digest} is "
                    "missing", table="frozen", row=digest, digest=digest, run_id=run_id,
                    position=position, reason="missing") from exc
            except CorruptRecordError as exc:
                raise CorruptRecordError(
                    f"run {run_id!r}, fact {position} ({path}): {exc}", table="frozen",
                    row=digest, digest=digest, run_id=run_id, position=position,
                    reason=getattr(exc, "reason", "")) from exc
            except ValidationError as exc:
                raise CorruptRecordError(
                    f"run {run_id!r}, fact {position} ({path}): the frozen body {digest} "
                    f"is not a typed envelope: {exc}", table="frozen", row=digest,
                    digest=digest, run_id=run_id, position=position,
                    reason="envelope") from exc
    return facts
