"""Dependency direction (RUN-SCP-1): the pure core imports no I/O; arrows point down."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import runx_actors

PACKAGE = pathlib.Path(runx_actors.__file__).parent
FORBIDDEN_IN_CORE = ("trio", "sqlite3", "psycopg", "httpx", "asyncio")
# the core's own source must not reach for a clock or randomness either
FORBIDDEN_IN_CORE_SOURCE = (*FORBIDDEN_IN_CORE, "time", "random", "datetime", "uuid", "os")

# layer -> packages it may import (besides itself and the stdlib / third-party libraries)
ALLOWED = {
    "protocol": set(),
    "effect": {"protocol"},
    "store": {"protocol", "effect"},
    "runtime": {"protocol", "effect", "store"},
    "executors": {"protocol", "effect", "store", "runtime"},
    "host": {"protocol", "effect", "store", "runtime", "executors"},
}


def test_protocol_import_is_pure() -> None:
    code = (
        "import sys, pkgutil, importlib, runx_actors.protocol as p\n"
        "for m in pkgutil.iter_modules(p.__path__):\n"
        "    importlib.import_module('runx_actors.protocol.' + m.name)\n"
        f"bad = [m for m in {FORBIDDEN_IN_CORE!r} if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "", f"runx_actors.protocol imported {out.stdout.strip()}"


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                found.add(node.module)
            elif node.level >= 2 and node.module:
                found.add("runx_actors." + node.module)
    return found


def test_arrows_point_down() -> None:
    problems = []
    for layer, allowed in ALLOWED.items():
        folder = PACKAGE / layer
        if not folder.exists():
            continue
        for path in folder.rglob("*.py"):
            for name in _imports(path):
                if not name.startswith("runx_actors."):
                    if layer == "protocol" and name.split(".")[0] in FORBIDDEN_IN_CORE_SOURCE:
                        problems.append(f"{path.name} imports {name}")
                    continue
                target = name.split(".")[1]
                if target != layer and target in ALLOWED and target not in allowed:
                    problems.append(f"{layer}/{path.name} imports {name}")
    assert not problems, problems
