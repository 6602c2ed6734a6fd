"""The runx-actors pytest plugin: conformance suites against *your* store or executor.

Installed with the package (entry point ``pytest11``: ``runx_actors``). It only adds
options; without them it collects nothing and changes nothing::

    pytest --runx-store=mypkg.stores:make_store          # store conformance + state machine
    pytest --runx-executor=mypkg.executors:make_executor  # ExecutionPort conformance

``--runx-store=MODULE:NAME`` names a zero-argument callable returning an async context
manager that yields a fresh, empty ``SessionStore`` (each call a new one):
:data:`runx_actors.testing.conformance.StoreFactory`. The store suite runs every scenario
of :mod:`runx_actors.testing.conformance` and the differential state machine of
:mod:`runx_actors.testing.machines` (``--runx-machine-examples`` bounds it; default: the
hypothesis profile in force).

``--runx-executor=MODULE:NAME`` names a callable taking the tools a scenario needs and
returning an async context manager that yields an ``ExecutionPort`` running them:
:data:`runx_actors.testing.executor_conformance.ExecutorFactory`.

The suites are async and run under pytest-trio (``pip install 'runx-actors[testing]'``);
they are marked for trio themselves, so your project needs no ``trio_mode``. ``MODULE`` is
imported with the directory pytest was invoked in and the rootdir in front of ``sys.path``
for that import only (so a bare ``pytest`` finds a ``factories.py`` beside it, as
``python -m pytest`` does). A name that
does not resolve, or a module that raises while it is imported (a SyntaxError included),
is a usage error (exit 4) naming the module and the exception, reported before anything
runs.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

__all__ = ["load_factory", "factory_search_path", "STORE_SUITE", "EXECUTOR_SUITE"]

# Plain ``assert`` in the scenarios reports both sides (also from an editable install,
# whose modules pytest does not mark for rewriting by itself). Before they are imported.
pytest.register_assert_rewrite(
    "runx_actors.testing.conformance", "runx_actors.testing.executor_conformance",
    "runx_actors.testing.machines", "runx_actors.testing.suite_store",
    "runx_actors.testing.suite_executor")

_HERE = Path(__file__).parent
#: The modules collected for each option (test files by explicit path).
STORE_SUITE = _HERE / "suite_store.py"
EXECUTOR_SUITE = _HERE / "suite_executor.py"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("runx", "runx-actors conformance suites")
    group.addoption("--runx-store", metavar="MODULE:NAME", default=None,
                    help="run the store conformance suite and state machine against the "
                         "store factory MODULE:NAME")
    group.addoption("--runx-executor", metavar="MODULE:NAME", default=None,
                    help="run the ExecutionPort conformance suite against the executor "
                         "factory MODULE:NAME")
    group.addoption("--runx-machine-examples", type=int, default=None, metavar="N",
                    help="examples of the store state machine (default: the hypothesis "
                         "profile's max_examples)")


def factory_search_path(config: pytest.Config) -> tuple[Path, ...]:
    """Where a factory's module is looked for besides ``sys.path``: the directory pytest
    was invoked in, then the rootdir (a bare ``pytest`` does not put either on
    ``sys.path``, unlike ``python -m pytest``)."""
    dirs = (Path(config.invocation_params.dir), Path(config.rootpath))
    return tuple(dict.fromkeys(d.resolve() for d in dirs))


@contextlib.contextmanager
def _importable_from(dirs: Sequence[Path]) -> Iterator[None]:
    """*dirs* at the front of ``sys.path`` for one import, then ``sys.path`` as it was."""
    saved = list(sys.path)
    sys.path[:0] = [str(d) for d in dirs if str(d) not in sys.path]
    try:
        yield
    finally:
        sys.path[:] = saved


def load_factory(spec: str, option: str, *, search: Sequence[Path] = ()) -> Any:
    """``MODULE:NAME`` → the object; ``pytest.UsageError`` naming *option* otherwise.

    *MODULE* is imported with the directories *search* (:func:`factory_search_path`)
    in front of ``sys.path`` for that import only. Whatever goes wrong while importing
    the module or resolving *NAME* — an ImportError, or any exception the module raises
    on import (a SyntaxError, a RuntimeError, even SystemExit) — is a usage error (pytest
    exit 4) that names the module and the exception, never an INTERNALERROR traceback.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise pytest.UsageError(f"{option} expects MODULE:NAME, got {spec!r}")
    try:
        with _importable_from(search):
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise pytest.UsageError(f"{option}: cannot import {module_name!r}: {exc}") from None
    except (Exception, SystemExit) as exc:  # the user's module raised while importing
        raise pytest.UsageError(f"{option}: importing {module_name!r} raised "
                                f"{_describe(exc)}") from None
    obj = module
    try:
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise pytest.UsageError(f"{option}: {module_name!r} has no {attr!r}")
            obj = getattr(obj, part)
    except pytest.UsageError:
        raise
    except Exception as exc:  # a module __getattr__ or a property that raises
        raise pytest.UsageError(f"{option}: resolving {attr!r} in {module_name!r} raised "
                                f"{_describe(exc)}") from None
    if not callable(obj):
        raise pytest.UsageError(f"{option}: {spec} is not callable")
    return obj


def _describe(exc: BaseException) -> str:
    """``Type: message`` of *exc* (a SyntaxError's message names the file and line)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def pytest_configure(config: pytest.Config) -> None:
    suites = []
    for option, suite in (("--runx-store", STORE_SUITE), ("--runx-executor", EXECUTOR_SUITE)):
        spec = config.getoption(option)
        if spec is None:
            continue
        load_factory(spec, option, search=factory_search_path(config))  # fail early
        suites.append(str(suite))
    if not suites:
        return
    if not config.pluginmanager.hasplugin("trio"):
        raise pytest.UsageError("the runx-actors suites need pytest-trio: "
                                "pip install 'runx-actors[testing]'")
    config.args.extend(s for s in suites if s not in config.args)
