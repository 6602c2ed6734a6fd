"""Step 0 of a commit: freeze the bodies a command names (spec §4.2; RUN-CMT-3, INV-38)."""

from __future__ import annotations

from collections.abc import Sequence

from ..protocol import commands as C
from ..protocol.commit import CommitRequest, batch_refusal
from ..protocol.digests import encode_frozen
from ..protocol.errors import StaleRuntimeError, ValidationError
from ..protocol.values import Digest

__all__ = ["bodies_of", "batch_bodies"]


def bodies_of(command: C.Command) -> tuple[tuple[Digest, bytes], ...]:
    """The ``(digest, envelope bytes)`` of every body *command* names.

    Raises:
        StaleRuntimeError: a body cannot be encoded (nothing is written).
    """
    try:
        match command:
            case C.PrepareModelRequest(request=request):
                return (encode_frozen("model_request", request),)
            case C.SubmitModelResult(result=result):
                return (encode_frozen("model_result", result),)
            case C.SubmitToolResult(result=result):
                return (encode_frozen("tool_output", result.output),)
            case C.SubmitToolResponse(payload=payload):
                return (encode_frozen("tool_response_payload", payload),)
    except ValidationError as exc:
        raise StaleRuntimeError(f"body cannot be frozen: {exc.message}", command=command) from exc
    return ()


def batch_bodies(
    requests: Sequence[CommitRequest],
) -> tuple[tuple[tuple[tuple[Digest, bytes], ...], ...], Exception | None]:
    """Step 0 of a batch commit (RUN-CMT-9): the bodies of each request, in order.

    Returns ``(bodies, error)``: ``bodies[i]`` are request *i*'s; when a request's bodies
    cannot be frozen, ``bodies`` stops before it and ``error`` is its refusal (the batch
    stops there, as committing the requests one by one would), else ``error`` is None.
    """
    bodies: list[tuple[tuple[Digest, bytes], ...]] = []
    for request in requests:
        try:
            bodies.append(bodies_of(request.envelope.command))
        except Exception as exc:
            if not batch_refusal(exc):
                raise
            return tuple(bodies), exc
    return tuple(bodies), None
