"""Branch operations (checkpoint_bridge/ floor 3): new workflows from checkpoints.

    branching.py     fork, rollback and redo: a new workflow seeded from a checkpoint
    compensation.py  the compensations of rolled-back side effects
    decisions.py     approving or rejecting a waiting tool call from outside the run

Imports projection/ and temporal/ (floor 2), the checkpoint store (floor 1)
and document/; views/ and langgraph/ (floor 4) sit above.
"""
