"""Test support for runx_actors: command builders, hypothesis strategies, conformance
machines. Import the submodules directly (``runx_actors.testing.builders``)."""
