"""A run's event stream beside its record (floor 3 of checkpoint_bridge/; docs/streaming.md).

    bus.py      where live events travel: a bus is chosen by REWIND_EVENTS (local.py: the
                workers' hubs on this machine; redis.py: Redis streams across machines)
    replay.py   the durable events of a branch, derived from its stored steps
    cursor.py   where a reader is in a stream (what SSE's Last-Event-ID carries)
    reader.py   one reader of one branch: the store, the live bus and the run's status merged,
                each durable event once, in order, and live events as they come
"""
