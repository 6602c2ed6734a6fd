"""Shared pytest configuration: hypothesis profiles (``ci`` and ``dev``)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# ci: derandomized and bounded, so CI is reproducible and fast.
settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=60,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# dev: deeper, random exploration for local runs (HYPOTHESIS_PROFILE=dev pytest).
settings.register_profile(
    "dev",
    max_examples=1000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
