"""Shared setup of the loop-host tests (loop-host §10, scenarios 14-40).

``make_env(tmp_path)`` gives a workspace holding the example's ``NOTES.md``, a receipt
directory ``D`` with a demo-key store, a fresh run store (memory by default), and builders
for the host configuration, the loop specs of §3.6 and the store inspections the
scenarios assert on.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from runx_actors.host._governed import HostConfig
from runx_actors.host.loop import LoopHost, LoopSpec
from runx_actors.host.package import Package, load_package
from runx_actors.host.receipts import Keyring, ReceiptStore, Signer, Verifier
from runx_actors.protocol import facts as F
from runx_actors.store.memory import MemoryStore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "loop-orchestration"
PROBE = ROOT / "tests" / "fixtures" / "approval-probe"
PIN = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
PIN_TEXT = "2026-01-01T00:00:00.000Z"
SCOPE = "demo"
NOTES = b"# Loop notes\n\nTurns may read this file. It grants no authority.\n"

SUCCESS = {"objective": "Draft, review, and ratify one tiny safe change.",
           "scenario": "success", "requested_tool": "fs.read"}
REFUSAL = {"objective": "Try to mutate files without explicit authority.",
           "scenario": "refusal", "requested_tool": "fs.write"}
GATE_OBJECTIVE = "Review whether the next turn may continue."
GATE_ANSWER = {"decision": "continue", "requested_tool": "fs.read",
               "summary": "The plan is bounded, uses only fs.read, and may continue.",
               "stop_condition": "max_turns_not_exhausted"}
GATE_REQUEST = "agent_task.review-loop-plan.output"

#: Run ids of §3.6/§4.7 (derived from the turn keys).
SUCCESS_RUNS = ("run_turn_5ef080227d47d7f1", "run_turn_357c317b91ab43e9")
REFUSAL_RUN = "run_turn_d79a1aecc8e1eb30"


class Crash(Exception):
    """Raised by a probe to kill the host at a crash point (§2.6)."""


def crash_at(point: str, **match: Any) -> Callable[[str, Mapping[str, Any]], None]:
    """A probe that raises :class:`Crash` the first time *point* is reached with *match*."""
    fired = [False]

    def probe(name: str, info: Mapping[str, Any]) -> None:
        if fired[0] or name != point:
            return
        if all(info.get(k) == v for k, v in match.items()):
            fired[0] = True
            raise Crash(f"crash at {point} {dict(info)}")

    return probe


@attrs.define
class Env:
    tmp: Path
    workspace: Path
    receipt_dir: Path
    signer: Signer
    receipts: ReceiptStore
    package: Package
    store: Any

    def config(self, **changes: Any) -> HostConfig:
        base: dict[str, Any] = {"receipts": self.receipts, "signer": self.signer,
                                "workspace": self.workspace, "now": lambda: PIN}
        base.update(changes)
        return HostConfig(**base)

    def host(self, store: Any = None, **changes: Any) -> LoopHost:
        return LoopHost(self.store if store is None else store, self.config(**changes))

    def spec(self, kind: str = "success", *, package: Package | None = None,
             **changes: Any) -> LoopSpec:
        fixed = {"success": SUCCESS, "refusal": REFUSAL}.get(kind, {})
        base: dict[str, Any] = {"loop_id": f"loop-demo-{kind}",
                                "package": package or self.package, "max_turns": 3,
                                "fixed_inputs": dict(fixed), "scope": SCOPE}
        base.update(changes)
        return LoopSpec(**base)

    def receipt_files(self) -> list[str]:
        if not self.receipt_dir.is_dir():
            return []
        return sorted(p.name for p in self.receipt_dir.glob("sha256-*.json"))

    def receipt_bodies(self) -> list[dict[str, Any]]:
        import json

        return [json.loads((self.receipt_dir / n).read_bytes()) for n in self.receipt_files()]

    async def facts(self, run_id: str, scope: str = SCOPE,
                    store: Any = None) -> tuple[Any, ...]:
        reader = await (store or self.store).reader(scope)
        return tuple(await reader.run_facts(run_id))

    async def stream(self, name: str, scope: str = SCOPE, store: Any = None) -> tuple[Any, ...]:
        reader = await (store or self.store).reader(scope)
        return tuple(await reader.read_stream(name))


def make_env(tmp_path: Path, *, store: Any = None, signer: Signer | None = None,
             keyring: Keyring | None = None) -> Env:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    shutil.copy(EXAMPLE / "workspace" / "NOTES.md", workspace / "NOTES.md")
    receipt_dir = tmp_path / "D"
    signer = signer or Signer.demo()
    verifier = Verifier(keyring=keyring or signer.keyring())
    return Env(tmp=tmp_path, workspace=workspace, receipt_dir=receipt_dir, signer=signer,
               receipts=ReceiptStore(receipt_dir, verifier=verifier),
               package=load_package(EXAMPLE), store=store or MemoryStore())


def copy_example(tmp_path: Path, name: str = "pkg") -> Path:
    """A private copy of the example package (tests edit it)."""
    target = tmp_path / name
    shutil.copytree(EXAMPLE, target)
    return target


def of_type(facts: Any, cls: type) -> list[Any]:
    return [f for f in facts if isinstance(f, cls)]


def run_ids_in(store: MemoryStore, scope: str = SCOPE) -> list[str]:
    """Every Run of *scope* in a memory store."""
    log = store.scope_log(scope)
    return sorted(s[4:] for s in log.streams if s.startswith("run/"))


def tool_facts(facts: Any) -> dict[str, list[Any]]:
    return {
        "opened": of_type(facts, F.ToolStepOpened),
        "started": of_type(facts, F.ToolCallStarted),
        "completed": of_type(facts, F.ToolCallCompleted),
        "failed": of_type(facts, F.ToolCallFailed),
    }
