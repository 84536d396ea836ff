"""Rewind's own agent loop (floor 1 of workflows/): AgentWorkflow (agent.py) and the pieces of a
step, answering a reply's tool calls (tool_step.py), sub-agents as child workflows, approvals,
effects of the lineage, compensation, the run's visibility state and its trace spans, and
DescribeToolsWorkflow. Imports only the vocabulary."""
