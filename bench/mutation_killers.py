"""The six defects of issue 13 item 8, applied by hand one at a time to the real protocol
code: each must make ``tests/protocol/test_mutation_killers.py`` fail (every file is
restored afterwards). ``python bench/mutation_killers.py`` prints, per defect, the tests
that failed; it exits 1 if some defect went unnoticed.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROTOCOL = ROOT / "runx_actors" / "protocol"
NOT_EXECUTING = '        raise _refuse(fact, f"call is {call.status.value}, not executing")'

#: defect → (file, [(original text, defective text), …])
DEFECTS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "prepare ToolSpec check skipped": ("_decide.py", [
        ("    if len(c.tools) != len(c.request.tools):", "    if False:"),
        ("        if spec.name != definition.name:", "        if False:"),
        ("        if spec.definition_digest != digest_tool_definition(definition):",
         "        if False:"),
    ]),
    "envelope type check or -> and": ("commit.py", [
        ("if type(command) not in C.COMMAND_TYPES or env.type != type(command).WIRE_NAME:",
         "if type(command) not in C.COMMAND_TYPES and env.type != type(command).WIRE_NAME:"),
    ]),
    "empty command id accepted": ("commit.py", [
        ("if not run_id or not env.id or (snap.state.run_id != run_id):",
         "if not run_id or (snap.state.run_id != run_id):"),
    ]),
    "AcceptInput digest unchecked": ("_decide.py", [
        ("if any(not i.id or not i.digest for i in c.inputs):",
         "if any(not i.id for i in c.inputs):"),
    ]),
    "Prepare base ahead accepted": ("commit.py", [
        ("if request.base != snap.position:", "if request.base < snap.position:"),
    ]),
    "ToolCallCompleted onto a non-EXECUTING call": ("_evolve.py", [
        ("    if call.status is not ToolCallStatus.EXECUTING:\n" + NOT_EXECUTING,
         "    if False:\n" + NOT_EXECUTING),
    ]),
}


def main() -> int:
    unnoticed = 0
    for name, (filename, edits) in DEFECTS.items():
        path = PROTOCOL / filename
        original = path.read_text()
        text = original
        for old, new in edits:
            assert text.count(old) == 1, (name, old)
            text = text.replace(old, new)
        path.write_text(text)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "tests/protocol/test_mutation_killers.py"],
                cwd=ROOT, capture_output=True, text=True, check=False)
        finally:
            path.write_text(original)
        failed = [line.split("::")[1].split(" ")[0] for line in done.stdout.splitlines()
                  if line.startswith("FAILED")]
        print(f"{name}: pytest exit {done.returncode}; failing: {failed}")
        unnoticed += done.returncode == 0
    return 1 if unnoticed else 0


if __name__ == "__main__":
    sys.exit(main())
