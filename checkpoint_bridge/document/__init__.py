"""The AgentCheckpoint document: its model (schema.py), its migrations
(migrations.py), the stored forms of a step (envelope.py: a hashed snapshot
or delta; packs.py: a finished block of steps in one object), and the keys
they are stored under (layout.py)."""
