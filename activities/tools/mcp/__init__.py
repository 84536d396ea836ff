"""MCP tools: the tools of Model Context Protocol servers, run as Rewind tool calls.

    config.py     what a server entry of the `mcpServers` file says (plain data)
    policy.py     durability from the tools' annotations, overrides first
    sessions.py   one client session per server, started and restarted by the worker
    results.py    a tools/call result as a tool output (images and resources by reference)
    tools.py      each MCP tool as a RegisteredTool, so every call takes the @tool path
"""
