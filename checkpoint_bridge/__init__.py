"""Checkpoint bridge: the AgentCheckpoint document, its stores, projection from
history, lineage, and fork / rollback / diff / compensation.

    document/    the document model, its migrations, the stored forms of a step, their keys
    stores/      the object-store contract and one module per backend
    (this level) the checkpoint store on top of an object store (store.py, chain.py),
                 projection from history (projector.py, mirror.py),
                 branches (lineage.py, branching.py, runs.py), approvals from
                 outside (decisions.py), compensation, erasure, tool outputs
    views/       read-side views for people: tree, show, diff, stats, viewer
    langgraph/   RewindSaver and LangGraph import / export (optional extra)

Imports point down: views/ and langgraph/ use this level, which uses document/
and stores/. Its public operations are re-exported by the `rewind` facade;
import the modules here directly for the rest (`checkpoint_bridge.store`, ...).
"""
