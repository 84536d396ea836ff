"""A LangGraph graph's run as workflow code (floor 2 of workflows/): the graph's Pregel loop with
its I/O routed through the run (runner.py), and the run's side of it (calls.py: a node's model
call, a super-step as a step, interrupt() as a wait). Imports the vocabulary and the loop."""
