"""The public surface of ``runx_actors.check``."""

from __future__ import annotations

import subprocess
import sys
import types

import runx_actors.check
import runx_actors.check.models


def test_every_public_name_exists_and_has_its_public_module() -> None:
    for package in (runx_actors.check, runx_actors.check.models):
        for name in package.__all__:
            obj = getattr(package, name)
            if isinstance(obj, type | types.FunctionType):
                assert obj.__module__ == package.__name__, name
        public = {n for n, v in vars(package).items()
                  if not n.startswith("_") and not isinstance(v, types.ModuleType)}
        leaked = public - set(package.__all__) - {"annotations", "models"}
        assert not leaked, leaked


def test_importing_the_checker_does_not_import_trio_or_the_models() -> None:
    code = (
        "import sys, runx_actors.check, runx_actors.cli; "
        "bad = [m for m in ('trio', 'runx_spec.reference', 'sqlite3') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
