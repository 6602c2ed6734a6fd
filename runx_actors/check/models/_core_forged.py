"""The adversary's forgeries that only the real core can express (``Semantics.forged``).

The shared adversary (``runx_spec._moves._forged_moves``) sends abstract commands with
wrong bases and ids; here are the ones that need real envelopes, bodies and facts:

* a Prepare whose ToolSpecs do not match the request's tools (a spec naming another
  definition; a wrong definition digest);
* hand-built envelopes: a ``type`` naming another command, an empty command id, an empty
  and a foreign Run id;
* an ``AcceptInput`` whose input has no digest, and a batch of two inputs under the id
  derived from the first input only;
* the foreign log: a fact no ``decide`` produced appended to a Run's stream and handed to
  the fold (``ToolCallCompleted`` of a call that is not EXECUTING, any fact after
  ``RunEnded``), which must raise ``CorruptLogError``.

Outcomes depend only on the implementation and the store, so they are computed once per
store (:func:`forged_outcomes`); a correct core refuses every one (a self-loop).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ...protocol import commands as C
from ...protocol import facts as F
from ...protocol._evolve import evolve
from ...protocol.commit import CommandEnvelope, fold_run
from ...protocol.digests import digest_model_request, digest_tool_output
from ...protocol.errors import CorruptLogError, EvolveError, RunxError
from ...protocol.state import Open, ToolCallState, ToolStep
from ...protocol.values import AgentInput, RunStatus, ToolCallStatus, ToolSpec
from . import _core_commands as cmds
from . import _core_spec as spec
from . import _core_world as core_world
from ._core_store import ACCEPTED, CoreStore, IdentityCache, evaluate_envelope, run_id

if TYPE_CHECKING:
    from ._core_impl import Impl

__all__ = ["forged_outcomes", "Outcome"]

#: (label, status, new store or None, ghost)
Outcome = tuple[str, str, CoreStore | None, str]

_OUTPUT = digest_tool_output('{"ok":true}')
_LOOKUP, _WRITE = cmds.TOOLS
#: ToolSpec lists that do not match ``REQUEST.tools``: names swapped; a wrong digest.
_BAD_TOOLS: tuple[tuple[str, tuple[ToolSpec, ...]], ...] = (
    ("a ToolSpec naming another definition",
     (ToolSpec(ref="lookup", name="write", definition_digest=_LOOKUP.definition_digest),
      _WRITE)),
    ("a ToolSpec with a wrong definition digest",
     (ToolSpec(ref="lookup", name="lookup", definition_digest=_WRITE.definition_digest),
      _WRITE)),
)


@functools.cache
def _bad_prepare(run: str, base: int, pending: tuple[str, ...], which: int) -> CommandEnvelope:
    cid, good = cmds.prepare(run, base, pending)
    assert isinstance(good, C.PrepareModelRequest)
    bad = C.PrepareModelRequest(
        step_id=good.step_id, model=good.model, request=good.request,
        request_digest=digest_model_request(good.request), input_ids=good.input_ids,
        tools=_BAD_TOOLS[which][1])
    return CommandEnvelope(C.PrepareModelRequest.WIRE_NAME, run, cid, bad)


@functools.cache
def _envelopes(run: str) -> tuple[tuple[str, CommandEnvelope], ...]:
    """Hand-built envelopes for an active Run *run* (each must be refused)."""
    accept = C.AcceptInput((cmds.agent_input("in-typed"),))
    cancel = C.CancelRun("cancelled")
    first_only: str = spec.ids.derive_input_command_id(run, "in-a")
    return (
        ("envelope type cancel_run on an AcceptInput",
         CommandEnvelope(C.CancelRun.WIRE_NAME, run,
                         spec.ids.derive_input_command_id(run, "in-typed"), accept)),
        ("CancelRun under an empty command id",
         CommandEnvelope(C.CancelRun.WIRE_NAME, run, "", cancel)),
        ("CancelRun to an empty Run id",
         CommandEnvelope(C.CancelRun.WIRE_NAME, "", "cancel:forged", cancel)),
        ("CancelRun to a foreign Run",
         CommandEnvelope(C.CancelRun.WIRE_NAME, "run-99", "cancel:forged", cancel)),
        ("AcceptInput of an input without a digest",
         CommandEnvelope(C.AcceptInput.WIRE_NAME, run,
                         spec.ids.derive_input_command_id(run, "in-nodigest"),
                         C.AcceptInput((AgentInput("in-nodigest", ""),)))),
        ("AcceptInput of [in-a, in-b] under the id of [in-a]",
         CommandEnvelope(C.AcceptInput.WIRE_NAME, run, first_only,
                         C.AcceptInput((cmds.agent_input("in-a"), cmds.agent_input("in-b"))))),
    )


def _calls(state: Any) -> tuple[tuple[str, ToolCallState], ...]:
    out: list[tuple[str, ToolCallState]] = []
    for step in (state.current, state.last_tool_step):
        if isinstance(step, ToolStep):
            out.extend((step.id, c) for c in step.calls)
    return tuple(out)


def _illegal_facts(state: Any) -> tuple[tuple[str, F.Fact], ...]:
    """Facts no ``decide`` produces on *state* (each must make the fold raise)."""
    if state.status is not RunStatus.ACTIVE:
        return (("InputAccepted after RunEnded", F.InputAccepted(cmds.agent_input("in-late"))),)
    facts = []
    for step_id, call in _calls(state):
        if call.status is not ToolCallStatus.EXECUTING:
            facts.append((f"ToolCallCompleted({spec.name(call.call_id)}, {call.status.value})",
                          F.ToolCallCompleted(step_id=step_id, call_id=call.call_id,
                                              effect=call.effect, output_digest=_OUTPUT)))
    return tuple(facts)


@functools.lru_cache(maxsize=1 << 15)
def forged_outcomes(impl: Impl, store: CoreStore) -> tuple[tuple[int, Outcome], ...]:
    """Every core-only forgery on *store* and what *impl* answers: ``(run, (label, status,
    store after it or None, ghost))``. ``status`` is a commit status, or for the foreign
    log ``"corrupt"`` (refused) / ``"folded"`` (accepted: ghost ``ADV-2``)."""
    out: list[tuple[int, Outcome]] = []
    epoch = store.epoch
    for r in range(len(store.proj)):
        run, snap = run_id(r), store.proj[r]
        state = snap.state
        if state.status is RunStatus.ACTIVE:
            forged: list[tuple[str, CommandEnvelope]] = list(_envelopes(run))
            if isinstance(state.current, Open):
                pending = tuple(i.id for i in state.pending_inputs)
                forged += [(f"Prepare with {_BAD_TOOLS[i][0]}",
                            _bad_prepare(run, snap.position, pending, i))
                           for i in range(len(_BAD_TOOLS))]
            for what, env in forged:
                after, status, ghost = evaluate_envelope(impl, store, r, env, epoch, "forged",
                                                         snap.position)
                if status == ACCEPTED:
                    ghost = ghost or f"ADV-1: forged {what} to {run} was appended"
                out.append((r, (f"adversary: {what} ({run}) -> {status}", status,
                                after if after is not store else None, ghost)))
        stream = store.streams[r]
        # the fold of the stream so far, when the fold is the production fold_run: each
        # foreign fact then costs one evolve, not a fold of the whole stream
        base = core_world._resumed_fold(store.log, r, stream) if impl.fold is fold_run else None
        # with a resumed fold the outcomes do not read the stream itself (a new object in
        # every store): keyed by the fold and the state, which stores share
        for label, status, ghost in _FOREIGN.call(_foreign_log, impl,
                                                  stream if base is None else None, state,
                                                  run, base):
            out.append((r, (label, status, None, ghost)))
    return tuple(out)


#: the foreign-log outcomes per (impl, stream, state, run) object: a takeover's store
#: keeps the streams and snapshots of the store before it, so most stores need no fold
_FOREIGN = IdentityCache()


def _foreign_log(impl: Impl, stream: tuple[F.Fact, ...] | None, state: Any, run: str,
                 base: Any) -> tuple[tuple[str, str, str], ...]:
    """The foreign-log forgeries on Run *run* (stream *stream*, projected *state*):
    ``(label, status, ghost)`` of each fact no decide produces, fed to *impl*'s fold.

    *base*, when not None, is ``fold_run(stream)`` and *impl*'s fold is ``fold_run`` (and
    *stream* is then not read: None):
    folding ``stream + (fact,)`` is then ``fold_run``'s last step, ``evolve(base, fact)``,
    an ``EvolveError`` out of it being the ``CorruptLogError`` fold_run raises (any other
    error passes through fold_run unchanged)."""
    out = []
    for what, fact in _illegal_facts(state):
        try:
            if base is not None:
                try:
                    evolve(base, fact)
                except EvolveError as exc:
                    raise CorruptLogError(exc.message) from exc
            else:
                assert stream is not None
                impl.fold((*stream, fact), run_id=run)
        except CorruptLogError:
            status, ghost = "corrupt", ""
        except RunxError as exc:  # the fold must say CorruptLogError, nothing else
            status, ghost = "error", f"ADV-2: fold of {what} raised {type(exc).__name__}"
        else:
            status, ghost = "folded", f"ADV-2: fold_run folded {what} onto {run}'s log"
        out.append((f"adversary: ForeignLog({run}, {what}) -> {status}", status, ghost))
    return tuple(out)
