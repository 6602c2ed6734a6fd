"""Step 0 of a commit: freeze the bodies a command names (spec §4.2; RUN-CMT-3, INV-38)."""

from __future__ import annotations

from ..protocol import commands as C
from ..protocol.digests import encode_frozen
from ..protocol.errors import StaleRuntimeError, ValidationError
from ..protocol.values import Digest

__all__ = ["bodies_of"]


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
