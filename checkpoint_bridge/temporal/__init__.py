"""The Temporal side of runs (checkpoint_bridge/ floor 2): what Temporal holds of a run.

    runs.py        a branch's workflows, their results, open runs, pollers, tool descriptions
    visibility.py  the memo, summary and search attributes every branch's workflow carries

Takes what it needs as arguments (task queue, redaction), never settings.
Imports the checkpoint store's lineage (floor 1); beside projection/ on its floor.
"""
