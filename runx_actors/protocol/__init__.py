"""Agent Run Protocol v1 core (tier T1): pure, synchronous, deterministic."""
