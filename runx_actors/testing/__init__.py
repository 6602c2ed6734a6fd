"""Test support for runx_actors. Import the submodules directly:

* ``builders`` — protocol command builders and ``SimpleLog``; ``strategies`` — hypothesis;
* ``conformance`` — the store conformance suite; ``executor_conformance`` — the
  ExecutionPort conformance suite; ``machines`` — a hypothesis state machine comparing a
  store with the in-memory reference;
* ``faults`` — fault-injecting wrappers for stores and executors;
* ``pytest_plugin`` — the ``pytest11`` plugin running the suites against your factories
  (``pytest --runx-store=MODULE:NAME --runx-executor=MODULE:NAME``);
* ``postgres`` — a throwaway PostgreSQL cluster for tests.
"""
