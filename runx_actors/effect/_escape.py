"""Which BaseExceptions may leave a caller's code and cross into the runtime (RUN-ACT-1)."""

from __future__ import annotations

import trio

__all__ = ["stops_the_process", "describe_error"]


def stops_the_process(error: BaseException) -> bool:
    """True for what code called on a Run's behalf (a tool, its argument check, a model
    client, a prompt builder, an event sink) must let through: ``trio.Cancelled`` (the
    caller's or the executor's cancellation), ``KeyboardInterrupt`` (trio delivers the
    user's Ctrl-C into whatever task runs, a tool's code included) and
    ``GeneratorExit``, alone or inside an exception group. Any other BaseException —
    ``SystemExit`` from a tool that calls ``sys.exit`` — is that call's or that
    request's own failure, never another Run's (RUN-ACT-1)."""
    if isinstance(error, BaseExceptionGroup):
        return any(stops_the_process(e) for e in error.exceptions)
    return isinstance(error, trio.Cancelled | KeyboardInterrupt | GeneratorExit)


def describe_error(error: BaseException) -> str:
    """``"<type name>: <str(error)>"`` for a message about *error* raised by code called
    on a Run's behalf, whatever that code did to its exception: a ``__str__`` that raises
    (or returns something other than text) gives ``<unprintable TypeName>`` in its place,
    so rendering the failure can never fail the call a second time (RUN-ACT-1)."""
    name = type(error).__name__
    try:
        text = str(error)
    except Exception:
        return f"{name}: <unprintable {name}>"
    return f"{name}: {text}" if isinstance(text, str) else f"{name}: <unprintable {name}>"
