"""Checkpoint bridge: the AgentCheckpoint document, its stores, projection from
history, lineage, and fork / rollback / diff / compensation.

Its public operations are re-exported by the `rewind` facade; import the
modules here directly for the rest (`checkpoint_bridge.store`, ...).
"""
