"""The user's own code as a run (floor 3 of workflows/): PipelineWorkflow and the `ctx` a
pipeline reaches the world through (workflow.py), a call's ids and what a code change looks
like (ids.py), the values that cross between the code and its run (values.py). It drives a
graph's run too (workflows/graph/). Imports every room below it."""
