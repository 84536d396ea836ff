"""Checkpoint bridge: the AgentCheckpoint document, its stores, projection from
history, lineage, and fork / rollback / diff / compensation.

Its rooms, in floors (imports point down only, never sideways; tests/test_layers.py):

    4  views/        read-side views for people: tree, show, diff, stats, viewer, tool policies
       langgraph/    RewindSaver and LangGraph import / export (optional extra)
    3  branches/     fork, rollback, redo, resume, compensation, decisions on waiting calls
       events/       a run's event stream: the buses live events travel on, replay from the store, readers
    2  projection/   history -> checkpoints: the projector and `rewind mirror`
       temporal/     the Temporal side of runs: a branch's workflows, pollers, visibility
    1  checkpoints/  the checkpoint store: chains, packs, lineage, tool outputs, erasure
    0  document/     the document model, its migrations, the stored forms of a step, their keys
       stores/       the object-store contract and one module per backend

Its public operations are re-exported by the `rewind` facade; import the
modules here directly for the rest (`checkpoint_bridge.checkpoints.store`, ...).
"""
