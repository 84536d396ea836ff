"""Deterministic workflow code only: the agent loop."""
