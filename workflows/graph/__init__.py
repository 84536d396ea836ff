"""A LangGraph graph's run as workflow code (floor 2 of workflows/): the graph's Pregel loop with
its I/O routed through the run (runner.py), and the run's side of it (calls.py: a node's model
call, a node run as one activity, a super-step as a step, interrupt() as a wait); which nodes run
as activities and the audit-hook guard that tells (guard.py), a node's values packed by
LangGraph's serializer (values.py) and the run's own Store (store.py). Imports the vocabulary and
the loop."""
