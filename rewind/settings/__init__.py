"""Settings: the one room that reads the environment (rewind/ floor 0).

    config.py     Settings.from_env(): every REWIND_*, TEMPORAL_*, OPENAI_*, AWS_* variable
    temporal.py   the Temporal connection's part: address, namespace, TLS, API key, profiles
    mcp.py        an MCP servers file (`--mcp-config`), read and checked

Imports nothing else of rewind/: every other room takes a `Settings` and is
handed down what it needs.
"""
