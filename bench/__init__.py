"""Rewind's benchmark suite (issue 6): `bench/run [--quick]` writes BENCHMARKS.md."""
