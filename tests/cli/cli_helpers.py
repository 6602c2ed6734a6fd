"""What the CLI tests of this directory share: the test signing identity, the example
package, and the reading of the one JSON error object a failed ``--json`` command prints
(RUN-CLI-2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import Result

SIGNING_ENV = {
    "RUNX_RECEIPT_SIGN_KID": "runx-demo-key",
    "RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64": "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=",
    "RUNX_RECEIPT_SIGN_ISSUER_TYPE": "hosted",
}
EXAMPLE = Path(__file__).parents[2] / "examples" / "loop-orchestration"


def json_error(result: Result) -> dict[str, Any]:
    """The one JSON error object on stdout of a failed ``--json`` command."""
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, result.stdout
    doc: dict[str, Any] = json.loads(lines[0])
    assert doc["ok"] is False and doc["exit_code"] == result.exit_code, doc
    return doc
