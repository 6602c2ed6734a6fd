"""The loop host (outer layer, loop-host.md): loop record, turn policy, receipts, context
skills and harness.

Subpackages are imported explicitly (``runx_actors.host.receipts``); importing this package
imports nothing else, so the pure receipt code never pulls in trio.
"""
