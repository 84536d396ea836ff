"""Deterministic workflow code only: the bottom floor, importing nothing else of the project.

Its rooms, in floors (imports point down only, never sideways; tests/test_layers.py):

    3  pipeline/     PipelineWorkflow: the user's own code (and a graph's) as a run
    2  graph/        a LangGraph graph's run as workflow code
       experiment/   ExperimentWorkflow and ScoreWorkflow
    1  loop/         AgentWorkflow and a step's pieces: tool calls, sub-agents, approvals,
                     effects, compensation, visibility, trace spans, describing tools
    0  vocabulary/   contracts, every name Temporal persists (wire.py), errors, ids,
                     canonical JSON, status, the wire form of a step record
"""
