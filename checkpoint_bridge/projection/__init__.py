"""Projection (checkpoint_bridge/ floor 2): Temporal history -> AgentCheckpoints.

    projector.py  a step record folded over the previous checkpoint
    mirror.py     `rewind mirror RUN`: a branch's checkpoints rebuilt from its history

Imports the checkpoint store (floor 1) and document/; beside temporal/ on
its floor, neither imports the other.
"""
