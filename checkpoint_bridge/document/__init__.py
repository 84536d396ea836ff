"""The AgentCheckpoint document: its model (schema.py), its migrations
(migrations.py), the stored forms of a step (envelope.py: a hashed snapshot
or delta; blocks.py: a finished block of steps, merged; packs.py: finished
blocks in one object per level), and the keys they are stored under (layout.py)."""
