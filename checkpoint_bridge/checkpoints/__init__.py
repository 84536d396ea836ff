"""The checkpoint store (checkpoint_bridge/ floor 1): AgentCheckpoints on an object store.

    store.py     CheckpointStore: save a step as a delta, load any checkpoint in full
    chain.py     rebuilding a document from its snapshot, deltas and packs
    lineage.py   branches as users name them, over their stored revisions
    outputs.py   large tool outputs stored once, named by digest
    erasure.py   deleting a run's objects (the one exception to immutability)
    lru.py       the small cache of documents a step reads again

Imports document/ and stores/ (floor 0) only.
"""
