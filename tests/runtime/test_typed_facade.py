"""A user's script using only documented names type-checks under ``mypy --strict`` and
runs (issue 10, APP-TYP-1): the public surface is typed with Protocols, not ``Any``."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import runx_actors

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "fixtures" / "user_app" / "app.py"


def _copy(tmp_path: pathlib.Path, source: pathlib.Path = SCRIPT) -> pathlib.Path:
    target = tmp_path / "user" / source.name  # outside the repository
    target.parent.mkdir(exist_ok=True)
    shutil.copy(source, target)
    return target


def _mypy(tmp_path: pathlib.Path, *scripts: pathlib.Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    # the editable install is a path hook mypy cannot follow; point it at the package
    # (an installed wheel has the py.typed marker in site-packages instead)
    env["MYPYPATH"] = str(pathlib.Path(runx_actors.__file__).parent.parent)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", *map(str, scripts)],
        cwd=scripts[0].parent, capture_output=True, text=True, env=env, timeout=600)


def test_user_script_passes_mypy_strict(tmp_path: pathlib.Path) -> None:
    scripts = [_copy(tmp_path), _copy(tmp_path, SCRIPT.parent / "stores.py")]
    out = _mypy(tmp_path, *scripts)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_store_parameter_is_a_protocol_not_any(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "user" / "bad.py"
    bad.parent.mkdir()
    bad.write_text(
        "from runx_actors.executors import open_local_executor\n"
        "from runx_actors.runtime import open_runtime\n\n\n"
        "async def main() -> None:\n"
        "    async with open_local_executor() as ex, open_runtime(object(), ex) as rt:\n"
        "        print(rt.scope)\n")
    out = _mypy(tmp_path, bad)
    assert out.returncode == 1 and "arg-type" in out.stdout, out.stdout + out.stderr


def test_host_config_receipts_and_signer_are_protocols_not_any(tmp_path: pathlib.Path
                                                               ) -> None:
    """``HostConfig.receipts`` / ``.signer`` were ``Any``: a path or a key string type-
    checked and failed at the first seal. They are the ``ReceiptRepository`` /
    ``ReceiptSigner`` Protocols: the library's classes and a user's own store pass, a
    wrong object is an ``arg-type`` error for each field."""
    user = tmp_path / "user"
    user.mkdir()
    good = user / "good.py"
    good.write_text(
        "from pathlib import Path\n\n"
        "from runx_actors.host import HostConfig\n"
        "from runx_actors.host.receipts import (PutOutcome, Receipt, ReceiptStore, Signer,\n"
        "                                       Verifier)\n\n\n"
        "class MyReceipts:\n"
        "    def __init__(self) -> None:\n"
        "        self.inner = ReceiptStore(Path('d'), verifier=Verifier())\n\n"
        "    def put(self, receipt: Receipt) -> PutOutcome:\n"
        "        return self.inner.put(receipt)\n\n"
        "    def get(self, receipt_id: str) -> Receipt:\n"
        "        return self.inner.get(receipt_id)\n\n"
        "    def find(self, intent_key: str, uri: str) -> tuple[Receipt, ...]:\n"
        "        return self.inner.find(intent_key, uri)\n\n\n"
        "signer = Signer.demo()\n"
        "HostConfig(receipts=ReceiptStore(Path('d'), verifier=Verifier()), signer=signer,\n"
        "           workspace=Path('.'))\n"
        "HostConfig(receipts=MyReceipts(), signer=signer, workspace=Path('.'))\n")
    bad = user / "bad.py"
    bad.write_text(
        "from pathlib import Path\n\n"
        "from runx_actors.host import HostConfig\n"
        "from runx_actors.host.receipts import Signer\n\n"
        "HostConfig(receipts=Path('receipts'), signer=Signer.demo(), workspace=Path('.'))\n"
        "HostConfig(receipts=None, signer='runx-demo-key', workspace=Path('.'))\n")
    assert _mypy(tmp_path, good).returncode == 0, _mypy(tmp_path, good).stdout
    out = _mypy(tmp_path, bad)
    errors = [line for line in out.stdout.splitlines() if "[arg-type]" in line]
    assert out.returncode == 1 and len(errors) == 3, out.stdout + out.stderr
    assert any('"receipts"' in e and '"Path"' in e for e in errors), errors
    assert any('"signer"' in e and '"str"' in e for e in errors), errors


def test_py_typed_marker_is_shipped() -> None:
    assert (pathlib.Path(runx_actors.__file__).parent / "py.typed").is_file()
    assert '"runx_actors" = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()


def test_user_script_runs(tmp_path: pathlib.Path) -> None:
    script = _copy(tmp_path)
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "app.sqlite3")],
                         cwd=script.parent, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert re.fullmatch(r'approving [0-9a-f]{64} text\.shout \{"text": "hello"\}', lines[0])
    assert lines[1] == "answer: shouted: HELLO"
    facts = lines[2].split()
    assert facts[0] == "facts:" and facts[1] == "run_created" and facts[-1] == "<finished>"
    assert "tool_call_approved" in facts and facts[-2] == "run_ended"
