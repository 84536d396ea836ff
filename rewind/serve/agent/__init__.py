"""LangGraph's Agent Server API on `rewind serve` (docs/agent-server.md), under /langgraph.

    api.py        the group of routes: assistants, threads, runs (what langgraph-sdk asks)
    service.py    threads and runs on Rewind's runs: start, continue, resume, stream, wait, cancel
    parts.py      a run's events as LangGraph's stream parts (values, updates, messages, custom, ...)
    state.py      a thread's state and history, read from the run's checkpoints
    records.py    what the API keeps beside the runs (threads, API runs), in the checkpoint store
    identity.py   REWIND_SERVE_AUTH: who asks, and what each identity may see
"""
