"""LangGraph interop: ``RewindSaver`` / ``AsyncRewindSaver`` (saver.py, on the
storage engine of store.py, layout.py and objects.py) and `rewind import
langgraph` / `rewind export --format langgraph` (interop.py). Needs the
`langgraph` extra; the rest of Rewind never imports this package."""
