"""The run's vocabulary (floor 0 of workflows/): what every other room and every layer above
shares. The contracts that cross the workflow/activity boundary (contracts.py, code_runs.py for
pipelines and graphs, experiments.py), every name Temporal persists (wire.py), the one error tree
(errors.py), ids, canonical JSON, a run's status, the wire form of a step record (said_once.py),
tool-call messages and keys (tool_calls.py), summaries, metrics and defaults. Pure and
deterministic: workflow code imports all of it; it imports nothing of the project but itself."""
