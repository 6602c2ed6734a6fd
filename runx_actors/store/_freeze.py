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
) -> tuple[tuple[tuple[Digest, bytes], ...], int, Exception | None]:
    """Step 0 of a batch commit (RUN-CMT-7): the bodies of the requests, in order.

    Returns ``(bodies, count, error)``: the bodies of the first *count* requests, and the
    refusal of request *count* when its bodies cannot be frozen (the batch stops there,
    as committing the requests one by one would), else ``count == len(requests)`` and
    ``error`` None.
    """
    bodies: list[tuple[Digest, bytes]] = []
    for count, request in enumerate(requests):
        try:
            bodies += bodies_of(request.envelope.command)
        except Exception as exc:
            if not batch_refusal(exc):
                raise
            return tuple(bodies), count, exc
    return tuple(bodies), len(requests), None
