"""What runs in an activity (above workflows/ and checkpoint_bridge/).

Its rooms, in floors (imports point down only, never sideways; tests/test_layers.py):

    3  code/         the user's code: `@pipeline`, graphs and LangChain tools, experiments
    2  model/        the model call: call_llm, wire format, transcript, context fitting, prices
       tools/        `@tool`, the registry, the tool activities, idempotency, MCP servers (mcp/)
    1  record/       checkpoint writes and the mirror, redaction, trace spans
    0  liveness/     heartbeats, the hand-over of a dead worker's run
"""
