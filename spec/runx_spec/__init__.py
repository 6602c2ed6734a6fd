"""The reference state machine of runx-actors (spec/, importable as runx_spec)."""
