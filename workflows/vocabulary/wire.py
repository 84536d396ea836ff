"""Every name Temporal persists, written once.

Activity and workflow type names, error types that cross an activity or
workflow boundary, queries, signals and patch ids end up in the histories
of runs that are still in flight (and in the recorded histories CI replays).
Renaming one breaks those runs, so they are defined here and nowhere else;
both the workflow code and the activities, the worker and the client import
them from here.
"""

from __future__ import annotations

# -- workflows ---------------------------------------------------------------
AGENT_WORKFLOW = "AgentWorkflow"
COMPENSATION_WORKFLOW = "CompensationWorkflow"
EXPERIMENT_WORKFLOW = "ExperimentWorkflow"   # one checkpoint forked N ways x K repetitions
SCORE_WORKFLOW = "ScoreWorkflow"             # a scorer over an experiment's branches
DESCRIBE_TOOLS_WORKFLOW = "DescribeToolsWorkflow"  # what a named tool or agent is, for a client
PIPELINE_WORKFLOW = "PipelineWorkflow"     # a @pipeline: the user's own code, each ctx call a step

# -- activities --------------------------------------------------------------
CALL_LLM = "call_llm"
DESCRIBE_TOOLS = "describe_tools"
RUN_TOOL = "run_tool"
COMPENSATE_TOOL = "compensate_tool"
MIRROR_STEP = "mirror_step"      # one step record (runs from before MIRROR_BATCH_PATCH)
MIRROR_STEPS = "mirror_steps"    # step records no model call carried (a run's last ones), in order
CHECK_TOOL_CALL = "check_tool_call"  # validate arguments / ask a tool's approval rule, without running it
START_EXPERIMENT_BRANCH = "start_experiment_branch"  # fork one branch of an experiment (idempotent)
WATCH_EXPERIMENT_BRANCH = "watch_experiment_branch"  # until the branch ends or pauses for its budget
SCORE_BRANCH = "score_branch"                        # a user's scorer on a branch's final checkpoint
DESCRIBE_PIPELINE = "describe_pipeline"  # a pipeline's code location and checked arguments, the tools it may call
RUN_GRAPH_NODE = "run_graph_node"  # one node (or @task) of a graph run as an activity: node-level durability

# -- queries and signals of AgentWorkflow -------------------------------------
STATUS_QUERY = "status"
RAISE_LIMITS_SIGNAL = "raise_limits"
SUBAGENT_STATE_SIGNAL = "subagent_state"  # a sub-agent tells its caller it waits (approval, budget) or goes on
DECIDE_UPDATE = "decide_tool_call"  # approve or reject a tool call waiting for approval
EXPERIMENT_STATUS_QUERY = "experiment_status"
RAISE_EXPERIMENT_BUDGET_SIGNAL = "raise_experiment_budget"

# -- error types (ApplicationError.type) ---------------------------------------
LLM_REJECTED = "LlmRequestRejected"          # a 4xx retrying cannot fix: the run fails
TOOL_NOT_REGISTERED = "ToolNotRegistered"    # the worker lacks the tool (runs from before tool queues)
CHECKPOINT_CONFLICT = "CheckpointConflict"   # a checkpoint that can never be stored
AGENT_RUN_FAILED = "AgentRunFailed"          # the run's own failure, with its reason
DECISION_REFUSED = "DecisionRefused"         # an approval decision the run cannot take (it is unchanged)
SCORER_UNUSABLE = "ScorerUnusable"           # a scorer that cannot be loaded or returns no score: not retried
GRAPH_NODE_FAILED = "GraphNodeFailed"        # a node-level node raised: LangGraph's own retry policy, not Temporal's

# -- search attributes (Keyword, registered by the client before a run starts) --
# `temporal workflow list --query "RewindRunId='r1'"` finds every branch of a run.
SA_RUN_ID = "RewindRunId"
SA_BRANCH = "RewindBranch"
SA_MODEL = "RewindModel"
SA_STATE = "RewindState"    # running, waiting_for_approval, budget_exceeded, completed, failed, cancelled
SEARCH_ATTRIBUTES = (SA_RUN_ID, SA_BRANCH, SA_MODEL, SA_STATE)

# -- memo keys a branch's workflow starts with (besides run_id, branch_id, model, task) --
MEMO_RESUMED = "resumed_from"  # `rewind resume`: the revision this workflow resumes (main.r0)

# -- HTTP ---------------------------------------------------------------------
# A pipeline's model call names its label in this request header (servers ignore it;
# the scripted model answers by it).
LABEL_HEADER = "X-Rewind-Label"
# The scripted offline model's answers from its demo agent's canned turns (a model it has no
# script for) carry this system_fingerprint: a run whose answer did not fit says why.
DEMO_TURNS_FINGERPRINT = "rewind-demo-turns"

# -- external payload storage (driver names inside history's payload references) --
LOCAL_PAYLOAD_DRIVER = "rewind.local"   # rewind/temporal/payloads.py LocalStorageDriver (a payload folder)
S3_PAYLOAD_DRIVER = "aws.s3driver"      # the SDK's S3StorageDriver

# -- patches (workflow.patched ids) --------------------------------------------
# Named tools are described on a task queue of their own per tool, and a tool
# call a worker refuses (it lacks the tool) goes again to that queue, so a run
# never fails on a worker that lacks a tool another worker has.
TOOL_QUEUES_PATCH = "tool-task-queues"
# One mirror activity at a time per run, carrying every step record that came
# since the last one: checkpoints are written in order without racing each
# other (a step's parent is always there), whatever the pace of the steps.
MIRROR_BATCH_PATCH = "mirror-batches"
# A fork or rollback seeded with its source's tool specs (LoopState.tool_specs) sends its
# first model call with them while it describes its tools, instead of after: one round
# trip through the server less before the branch's first step.
SEEDED_TOOLS_PATCH = "seeded-tool-specs"
# A run stopped from outside (a rollback) first writes the checkpoints it has
# recorded and not yet mirrored, instead of ending with them only in history.
STOPPED_DRAIN_PATCH = "stopped-run-drains-mirror"
# A step's record rides on the next model call, which writes its checkpoint (LlmRequest.
# checkpoints): two activities a step instead of three. The mirror activity writes only
# what nothing else will soon (the run ends, pauses, continues as new) or a carried write
# could not store.
CARRIED_CHECKPOINTS_PATCH = "checkpoints-ride-model-calls"
# A pipeline's step records ride on its next model call too (CARRIED_CHECKPOINTS_PATCH); they
# go to the mirror activity before the code waits for anything else (a tool, a child run, a timer).
PIPELINE_CARRIED_CHECKPOINTS_PATCH = "pipeline-checkpoints-ride-model-calls"
# A graph run whose answer is its messages channel's last message does not add it again in its
# result step (its checkpoint, and a RewindSaver reading it, showed that message twice).
GRAPH_ANSWER_ONCE_PATCH = "graph-answer-once"
# A pipeline's call that completes while others of its group still run (an asyncio.gather's) has its
# step written at once by the mirror activity, instead of waiting for the next call to carry it: the
# finished call shows in `rewind show` / `tree` while the group goes on.
GATHER_MIRROR_PATCH = "finished-calls-mirrored-while-group-runs"
# A graph run continues as new between super-steps, as a pipeline does between calls: the next run
# runs the graph again with every call answered from the record.
GRAPH_CONTINUE_AS_NEW_PATCH = "graph-continue-as-new"
# A graph's super-step records ride on its next model call, plain tool call or node-level node's
# activity (which writes them as it starts) instead of a mirror activity each.
GRAPH_CARRIED_CHECKPOINTS_PATCH = "graph-checkpoints-ride-calls"
# A pipeline or graph answering a long record again (a fork late in a run, a continued run) waits on a
# 1 ms timer every few hundred answers, so one workflow task never outlasts the deadlock detector.
RECORD_BREATHES_PATCH = "record-answers-breathe"
# A graph node run as one activity is named by its input state without its messages' ids: add_messages
# gives a message without one a random uuid4, so a worker replaying the run named it otherwise.
GRAPH_NODE_ID_PATCH = "graph-node-id-without-message-ids"


def tool_task_queue(task_queue: str, tool_name: str) -> str:
    """The task queue on which the workers that have `tool_name` run its calls.

    Every worker polls its main queue (workflows, model calls, the mirror,
    tool calls) and one queue per tool it has. A tool call goes to the main
    queue first (eager dispatch to the workflow's worker); a worker without
    the tool refuses it, and the call goes again to its tool's queue, which
    only workers holding the tool poll.
    """
    return f"{task_queue}.tool.{tool_name}"


__all__ = [
    "AGENT_WORKFLOW", "COMPENSATION_WORKFLOW", "EXPERIMENT_WORKFLOW", "SCORE_WORKFLOW", "DESCRIBE_TOOLS_WORKFLOW",
    "CALL_LLM", "DESCRIBE_TOOLS", "RUN_TOOL", "COMPENSATE_TOOL", "MIRROR_STEP", "MIRROR_STEPS", "CHECK_TOOL_CALL",
    "START_EXPERIMENT_BRANCH", "WATCH_EXPERIMENT_BRANCH", "SCORE_BRANCH", "RUN_GRAPH_NODE",
    "STATUS_QUERY", "RAISE_LIMITS_SIGNAL", "SUBAGENT_STATE_SIGNAL", "DECIDE_UPDATE", "EXPERIMENT_STATUS_QUERY", "RAISE_EXPERIMENT_BUDGET_SIGNAL",
    "LLM_REJECTED", "TOOL_NOT_REGISTERED", "CHECKPOINT_CONFLICT", "AGENT_RUN_FAILED", "DECISION_REFUSED", "SCORER_UNUSABLE", "GRAPH_NODE_FAILED",
    "SA_RUN_ID", "SA_BRANCH", "SA_MODEL", "SA_STATE", "SEARCH_ATTRIBUTES",
    "LOCAL_PAYLOAD_DRIVER", "S3_PAYLOAD_DRIVER", "LABEL_HEADER", "DEMO_TURNS_FINGERPRINT",
    "TOOL_QUEUES_PATCH", "MIRROR_BATCH_PATCH", "SEEDED_TOOLS_PATCH", "STOPPED_DRAIN_PATCH",
    "CARRIED_CHECKPOINTS_PATCH", "PIPELINE_CARRIED_CHECKPOINTS_PATCH", "GRAPH_ANSWER_ONCE_PATCH", "GATHER_MIRROR_PATCH",
    "GRAPH_CONTINUE_AS_NEW_PATCH", "GRAPH_CARRIED_CHECKPOINTS_PATCH", "RECORD_BREATHES_PATCH", "GRAPH_NODE_ID_PATCH",
    "tool_task_queue",
]
