"""``runx-actors loop run|status`` and ``keys`` (issue 10): a loop started from the shell,
killed (SIGKILL) and resumed continues from its record; an edited or missing receipt is
``LoopIntegrityError`` (exit 3); ``keys`` prints what ``verify`` needs."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "loop-orchestration"
IDENTITY = {"RUNX_RECEIPT_SIGN_KID": "runx-demo-key",
            "RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64":
                "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=",
            "RUNX_RECEIPT_SIGN_ISSUER_TYPE": "hosted"}
LOOP = ["loop", "run", str(EXAMPLE), "--loop-id", "L1", "-i", "objective=Draft one change.",
        "-i", "scenario=success", "-i", "requested_tool=fs.read", "--store", "st", "-R", "rc"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNX_")}
    return {**env, **IDENTITY, "RUNX_CWD": "ws", **extra}


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "runx_actors", *args]


def _run(cwd: Path, *args: str,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_cmd(*args), cwd=cwd, env=env or _env(), capture_output=True,
                          text=True, timeout=180)


def _workdir(tmp: Path) -> Path:
    shutil.copytree(EXAMPLE / "workspace", tmp / "ws")
    return tmp


def _turn_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("turn ")]


def test_loop_run_status_and_replay(tmp_path: Path) -> None:
    cwd = _workdir(tmp_path)
    first = _run(cwd, *LOOP)
    assert first.returncode == 0, first.stderr
    turns = _turn_lines(first.stdout)
    assert len(turns) == 2 and "loop L1: stopped (next_turn_not_allowed)" in first.stdout
    again = _run(cwd, *LOOP)  # a finished loop returns the same turns and receipts
    assert again.returncode == 0 and _turn_lines(again.stdout) == turns
    status = _run(cwd, "loop", "status", "L1", "--store", "st")
    assert status.returncode == 0, status.stderr
    assert "runner=turn max_turns=3" in status.stdout
    assert len(_turn_lines(status.stdout)) == 2
    other = _run(cwd, *LOOP[:-4], "--max-turns", "5", "--store", "st", "-R", "rc")
    assert other.returncode == 1 and "max_turns" in other.stderr  # LoopConfigMismatch
    assert "hint: use a new --loop-id" in other.stderr  # a loop's hint, not a run's
    missing = _run(cwd, "loop", "status", "nope", "--store", "st")
    assert missing.returncode == 1 and "no loop 'nope'" in missing.stderr


def test_a_max_turns_past_2_53_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """2^53 + 1 cannot be recorded exactly (D-11): it used to be written as a double and
    then refused by the loop's own record on every call."""
    cwd = _workdir(tmp_path)
    big = _run(cwd, *LOOP[:-4], "--max-turns", str(2**53 + 1), "--store", "st", "-R", "rc")
    assert big.returncode == 64, big.stderr
    assert "--max-turns" in big.stderr and "Traceback" not in big.stderr
    assert not (cwd / "st").exists() and not (cwd / "rc").exists()


def test_killed_loop_resumes_from_its_record(tmp_path: Path) -> None:
    clean = _run(_workdir(tmp_path / "clean"), *LOOP)
    assert clean.returncode == 0, clean.stderr
    cwd = _workdir(tmp_path / "killed")
    proc = subprocess.Popen(_cmd(*LOOP), cwd=cwd, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    receipts = cwd / "rc"
    while proc.poll() is None and time.monotonic() < deadline:
        if receipts.is_dir() and any(receipts.glob("sha256-*.json")):
            break  # the first turn sealed: kill the loop mid-way
        time.sleep(0.01)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    resumed = _run(cwd, *LOOP)
    assert resumed.returncode == 0, resumed.stderr
    # the same turns (ids derived from the loop and its inputs) as an uninterrupted loop;
    # receipt ids differ with the sealing time, so compare runs and dispositions
    def shape(out: str) -> list[tuple[str, str]]:
        return [(line.split(" | receipt=")[0], line.split(" | disposition=")[1])
                for line in _turn_lines(out)]
    assert shape(resumed.stdout) == shape(clean.stdout)
    print("killed mid-loop:", killed)


def test_edited_or_missing_receipt_is_an_integrity_error(tmp_path: Path) -> None:
    cwd = _workdir(tmp_path)
    assert _run(cwd, *LOOP).returncode == 0
    receipt = sorted((cwd / "rc").glob("sha256-*.json"))[0]
    text = receipt.read_text()
    receipt.write_text(text.replace('"closed"', '"CLOSED"', 1))
    edited = _run(cwd, *LOOP)
    assert edited.returncode == 3, edited.stdout + edited.stderr
    assert "loop run" in edited.stderr and "Traceback" not in edited.stderr
    receipt.unlink()
    gone = _run(cwd, *LOOP)
    assert gone.returncode == 3, gone.stdout + gone.stderr


def test_keys_prints_the_verify_variables(tmp_path: Path) -> None:
    cwd = _workdir(tmp_path)
    assert _run(cwd, *LOOP).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNX_")}
    out = _run(cwd, "keys", env=env)
    assert out.returncode == 0
    pairs = dict(line.split("=", 1) for line in out.stdout.splitlines())
    assert set(pairs) == {"RUNX_RECEIPT_VERIFY_KID",
                          "RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64"}
    # without them verify does not trust the demo key; with them it does
    assert _run(cwd, "verify", "-R", "rc", env=env).returncode == 3
    verified = _run(cwd, "verify", "-R", "rc", env={**env, **pairs})
    assert verified.returncode == 0, verified.stdout + verified.stderr
