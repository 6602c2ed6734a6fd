"""Shared settings of the simulation tests (imported by the test modules).

``FIXED``: the shell's issue-9 fixes are present (``RuntimeClosedError`` exists). The
regression seeds of the pre-fix findings, and the all-seeds-pass checks, are expected to
fail before them (``xfail``) and must pass after.
``DEEP``: the ``dev`` hypothesis profile is active: more seeds, deeper exploration.
"""

from __future__ import annotations

import os

import pytest

from runx_actors.protocol import errors

FIXED = hasattr(errors, "RuntimeClosedError")
DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "dev"

#: mark for checks that need the shell's fixes
needs_fixes = pytest.mark.xfail(not FIXED, reason="the issue-9 shell fixes are not in this tree",
                                strict=False)
