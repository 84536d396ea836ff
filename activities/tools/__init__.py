"""Tools (floor 2 of activities/): `@tool` and the worker's registry (registry.py), the tool
activities (runner.py), argument types, idempotency records, and MCP servers' tools (mcp/)."""
