"""The host's prompt builder and tool catalog (loop-host §3.5, §6, §7.1).

The builder freezes into each model request only what the turn may see: the runner
declaration, the Run's own canonical inputs (its single accepted input) and the Run's own
transcript (earlier model answers and tool results). For a graph step it also freezes the
agent envelope, with its context entries prepared under the read-twice check of §6.3.
Nothing of the loop record ever enters a request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from .._strictread import loads_json
from ..executors import Tool, Workspace, fs_read_tool, fs_write_tool
from ..protocol.canonical import canonical_json_text
from ..protocol.digests import digest_tool_definition
from ..protocol.plan import Prompt, PromptInput
from ..protocol.values import ModelRequest, ResponsePolicy, ToolDefinition, ToolSpec
from ..runtime import TranscriptBuilder
from .context import agent_envelope, prepare_context
from .errors import PackageError
from .package import GraphRunner, GraphStep, Package, Runner, ScriptedRunner
from .turn import GRAPH_DRIVER, REQUEST_SCHEMA

__all__ = [
    "AGENT_TASK_PREFIX",
    "AgentTaskOffer",
    "agent_tool_name",
    "catalog_tools",
    "declaration",
    "HostPromptBuilder",
    "resolve_step_inputs",
    "step_closed",
]

#: Agent-task tools are named ``agent_task.<task>`` (§7.1).
AGENT_TASK_PREFIX = "agent_task."


def agent_tool_name(step: GraphStep) -> str:
    """``agent_task.<task>``: the tool a graph step's agent task is offered as."""
    return AGENT_TASK_PREFIX + step.run.task


@attrs.frozen
class AgentTaskOffer:
    """An agent task offered to the graph driver: policy ``EXTERNAL_RESPONSE``, so a call
    waits for the host's answer and never reaches an executor."""

    definition: ToolDefinition

    @classmethod
    def of(cls, step: GraphStep) -> AgentTaskOffer:
        """The tool offer through which the agent answers graph step *step* (loop-host §3)."""
        return cls(ToolDefinition(
            name=agent_tool_name(step),
            description=f"Agent task {step.run.task} of step {step.id} "
                        f"(agent {step.run.agent}); answered by the host.",
            parameters=canonical_json_text({"type": "object"})))

    def spec(self) -> ToolSpec:
        """The ToolSpec the Run records for this offer (ref, name, definition digest)."""
        return ToolSpec(ref=self.definition.name, name=self.definition.name,
                        definition_digest=digest_tool_definition(self.definition),
                        policy=ResponsePolicy.EXTERNAL_RESPONSE)


def catalog_tools(workspace: Path | Workspace, runner: Runner,
                  overrides: Sequence[Tool] = ()) -> list[Tool]:
    """The executor tools of *runner*: its ``tools`` catalog bound to *workspace*
    (``fs.read``, ``fs.write``), with ``APPROVAL_REQUIRED`` for the tools listed in
    ``approval_required``. *overrides* replace catalog tools by ref (tests).

    Raises:
        PackageError: a catalog name this host does not provide.
    """
    if not isinstance(runner, ScriptedRunner):
        return []
    by_ref = {t.ref: t for t in overrides}
    ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
    out: list[Tool] = []
    for name in runner.tools:
        if name in by_ref:
            out.append(by_ref[name])
            continue
        policy = (ResponsePolicy.APPROVAL_REQUIRED if name in runner.approval_required
                  else ResponsePolicy.DIRECT_EXECUTION)
        if name == "fs.read":
            out.append(fs_read_tool(ws, policy=policy))
        elif name == "fs.write":
            out.append(fs_write_tool(ws, policy=policy))
        else:
            raise PackageError(f"tool {name!r} is not provided by this host",
                               reason="unknown_tool")
    return out


def declaration(runner_name: str, runner: Runner) -> dict[str, Any]:
    """The runner declaration frozen into requests (no paths, no clock)."""
    if isinstance(runner, ScriptedRunner):
        return {"type": runner.type, "name": runner_name, "script": runner.script,
                "tools": list(runner.tools), "allowed_tools": list(runner.allowed_tools),
                "approval_required": list(runner.approval_required)}
    return {"type": runner.type, "name": runner_name, "graph": runner.graph,
            "steps": [{"id": s.id, "tool": agent_tool_name(s), "outputs": list(s.outputs)}
                      for s in runner.steps]}


def resolve_step_inputs(step: GraphStep, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A step's inputs: ``$input.<name>`` takes the Run's input, anything else is a
    literal."""
    out: dict[str, Any] = {}
    for key, value in step.inputs.items():
        if value.startswith("$input."):
            out[key] = inputs.get(value[len("$input."):])
        else:
            out[key] = value
    return out


def step_closed(message: Mapping[str, Any]) -> bool:
    """True when an agent step's tool message is an answer whose closure (if any) is
    ``closed`` — the graph then goes on to its next step."""
    content = message.get("content")
    if "error" in message or not isinstance(content, dict):
        return False
    closure = content.get("closure")
    if isinstance(closure, dict):
        return bool(closure.get("disposition", "closed") == "closed")
    return True


class HostPromptBuilder:
    """The PromptBuilder of one runner (see module docstring).

    *created_at* gives the context entries' ``meta.created_at`` for a Run (its
    ``created_at_pin``, or the preparation time).

    It reads ``hint.pending`` (``reads_pending``, RUN-LOP-11): its transcript is the log
    followed by the facts the runtime decided but has not committed yet.
    """

    #: Opt-in to fused commits: :meth:`build` honours ``hint.pending`` (RUN-LOP-11).
    reads_pending = True

    def __init__(self, writer: Any, frozen: Any, package: Package, runner_name: str,
                 tools: Sequence[Tool], created_at: Callable[[str], str]) -> None:
        self._transcript = TranscriptBuilder(writer, frozen, "", require_inputs=True)
        self.package = package
        self.runner_name = runner_name
        self.runner = package.runner(runner_name)
        self._tools = tuple(tools)
        self._created_at = created_at

    async def build(self, hint: PromptInput) -> Prompt:
        """Build the next request of *hint*'s Run (consumes every pending input).

        Raises:
            ContextRefError, ContextChangedDuringPreparation: a graph step's context
                cannot be prepared (nothing is frozen).
        """
        messages = await self._transcript.messages(hint.run_id, hint)
        inputs: Any = {}
        for message in messages:
            if message.get("role") == "user":
                inputs = loads_json(str(message.get("content")), source="inputs")
                break
        body: dict[str, Any] = {
            "schema": REQUEST_SCHEMA,
            "package": self.package.name,
            "runner": self.runner_name,
            "declaration": declaration(self.runner_name, self.runner),
            "inputs": inputs,
            "messages": messages,
        }
        runner = self.runner
        offers: Sequence[Any]
        if isinstance(runner, ScriptedRunner):
            model = runner.script
            offers = self._tools
        else:
            model = GRAPH_DRIVER
            offers = [AgentTaskOffer.of(s) for s in runner.steps]
            await self._graph_step(body, runner, hint.run_id, inputs, messages)
        request = ModelRequest(model, tuple(o.definition for o in offers),
                               canonical_json_text(body))
        return Prompt(request=request, input_ids=tuple(i.id for i in hint.inputs),
                      tools=tuple(o.spec() for o in offers))

    async def _graph_step(self, body: dict[str, Any], runner: GraphRunner, run_id: str,
                          inputs: Mapping[str, Any], messages: list[dict[str, Any]]) -> None:
        settled = [m for m in messages if m.get("role") == "tool"]
        if len(settled) >= len(runner.steps) or (settled and not step_closed(settled[-1])):
            return
        step = runner.steps[len(settled)]
        created_at = self._created_at(run_id)
        entries = await trio.to_thread.run_sync(
            lambda: prepare_context(self.package.root, step.context_skills, run_id=run_id,
                                    step_id=step.id, created_at=created_at))
        body["envelope"] = agent_envelope(
            run_id=run_id, skill=self.package.name, step_id=step.id,
            instructions=step.instructions, inputs=resolve_step_inputs(step, inputs),
            allowed_tools=step.allowed_tools, output=step.outputs, current_context=entries,
            provenance={"package": self.package.name,
                        "package_digest": self.package.digest,
                        "runner": self.runner_name, "graph": runner.graph,
                        "step_id": step.id, "agent": step.run.agent,
                        "task": step.run.task})
        body["step"] = {"id": step.id, "tool": agent_tool_name(step)}
