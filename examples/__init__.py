"""Runnable examples of Rewind agents."""
