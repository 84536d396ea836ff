"""Activities: the model call, tool execution, the tool registry and idempotency."""
