"""The seeded soak (`bench/soak`): many runs under random crashes, restarts and outages,
each checked against an undisturbed run of the same shape (docs/soak.md)."""
