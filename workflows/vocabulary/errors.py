"""Every exception Rewind raises, in one tree.

    RewindError                          base of everything Rewind raises on purpose
    ├── ConfigError                      a setting is missing or malformed
    │   ├── TemporalConnectionError      Temporal refuses this client (TLS, certificates, API key) or cannot be reached
    │   │   └── TemporalUnreachableError nothing answers at the address
    │   └── StoreUnreachableError        a configured store does not answer or fails (may heal by itself)
    ├── UsageError                       an argument no run could work with (empty task, budget < 1 step, unknown tool)
    ├── InvalidIdError                   a run / branch / checkpoint id is unsafe or malformed
    ├── RunNotFoundError                 no workflow (and no checkpoints) for a run id
    │   └── StepNotFoundError            the step is not on the branch
    ├── RunExistsError                   a run id (or branch) is already taken
    ├── ToolRegistryError                a tool module or tool definition is wrong
    ├── ToolError                        raised by a tool: a failure the model should see, not retried
    ├── PipelineError                    a pipeline's call cannot be made as written (raised into its code)
    │   ├── ModelCallFailed              a ctx.llm call failed after its retries, or was refused (a 4xx)
    │   ├── OutputInvalid                a structured answer stayed invalid after its repairs
    │   └── ToolCallFailed               a ctx.tool / ctx.agent call failed after its retries, or was rejected
    ├── TranscriptError                  a transcript segment is missing, corrupt or of the wrong length
    ├── ProjectionError                  a history cannot be turned into checkpoints
    ├── PayloadIntegrityError            an externally stored Temporal payload is missing or altered
    ├── PayloadEncryptionError           a payload cannot be decrypted (unknown key, plaintext where refused)
    ├── EncodingDataError                a bundled tokenizer encoding is missing or altered
    ├── ScriptError                      a script or fault given to the scripted model is malformed
    ├── DecisionRefusedError             an approval decision the run cannot take (it is unchanged)
    ├── RunActiveError                   a run still runs where only a finished one may go (`rewind delete` without --force)
    ├── NotResumableError                a run `rewind resume` cannot continue: nothing failed, still running, a pipeline
    │   └── AlreadyResumedError          the run's newest revision is already a resume (bulk resume skips it)
    ├── ErasureIncompleteError           part of a run could not be deleted; says what went and what is left
    ├── LangGraphThreadError             a LangGraph thread cannot be imported (not there, no `messages` state)
    └── CheckpointError                  anything wrong with a checkpoint or its store
        ├── CheckpointNotFoundError      no object / checkpoint under that key or id
        ├── CorruptCheckpointError       bad JSON, hash mismatch, wrong shape, failed validation
        ├── FutureSchemaError            written by a newer Rewind than the one reading it
        ├── CheckpointExistsError        an immutable checkpoint would be replaced by other bytes
        ├── CheckpointNotUsableError     a failed or invalidated checkpoint cannot seed a fork
        ├── LineageError                 a lineage is empty, broken, or holds an invalidated checkpoint
        ├── StoreUnavailableError        the backend is down, unreachable or refusing requests
        ├── UnstorableStateError         a LangGraph state value or write is not data its serializer can store
        └── UnsafeStoreError             the backend does not keep written objects immutable

Every message names the object involved and says what to do about it. Library
exceptions (botocore, aiohttp, OSError, pydantic, openai) never cross a module
boundary: they are mapped to these types at the boundary, kept as
``__cause__``. The CLI catches ``RewindError`` and prints one line.

``retryable`` tells callers such as a Temporal activity whether trying the same
call again can help; only an unavailable store can heal by itself.

This module is pure Python (workflow code imports it inside Temporal's sandbox).
"""

from __future__ import annotations


class RewindError(Exception):
    """Base class of every error Rewind raises on purpose."""

    retryable: bool = False


class ConfigError(RewindError):
    """A configuration value is missing or malformed."""


class TemporalConnectionError(ConfigError):
    """The Temporal connection the settings describe does not work; the message names the setting to fix."""


class TemporalUnreachableError(TemporalConnectionError):
    """Nothing answers at the Temporal address (refused, no such host, no answer)."""


class StoreUnreachableError(ConfigError):
    """A configured store does not answer, times out or fails (not: refuses this client);
    the message names the variable. A starting worker waits for it (rewind/worker/startup.py)."""


class UsageError(RewindError, ValueError):
    """An argument is out of range or empty (a budget below 1 step, an empty task, an unknown tool)."""


class InvalidIdError(RewindError, ValueError):
    """An id would be unsafe as part of a storage key or is malformed."""


class RunNotFoundError(RewindError):
    """No run with this id exists."""


class StepNotFoundError(RunNotFoundError):
    """The requested step is not on the branch."""


class RunExistsError(RewindError):
    """A run or branch with this id already exists."""


class ToolRegistryError(RewindError):
    """A tool cannot be registered or loaded."""


class ToolError(RewindError):
    """Raise from a tool to report a failure the model should see, without retries."""


class PipelineError(RewindError):
    """A pipeline's `ctx` call cannot be made as written; raised into the pipeline's code,
    which may catch it (uncaught, the run fails with its message)."""


class ModelCallFailed(PipelineError):
    """A `ctx.llm` call failed after its retries, or the API refused it (a 4xx)."""


class OutputInvalid(PipelineError):
    """A `ctx.llm(output=...)` answer stayed invalid after its repairs; names the label and the error."""


class ToolCallFailed(PipelineError):
    """A `ctx.tool` / `ctx.agent` call failed after its retries, was rejected, or names no tool."""


class TranscriptError(RewindError):
    """A transcript segment is missing, corrupt, or not the length the workflow expects."""


class ProjectionError(RewindError, ValueError):
    """A workflow history does not fold into checkpoints (missing or out-of-order steps)."""


class PayloadIntegrityError(RewindError):
    """An externally stored payload is missing or does not match its hash."""


class PayloadEncryptionError(RewindError):
    """A payload cannot be decrypted: unknown key, wrong key, or plaintext where encryption is required."""


class EncodingDataError(RewindError):
    """A bundled encoding file is missing or does not match its pinned hash."""


class ScriptError(RewindError, ValueError):
    """A turn script or fault given to the scripted model is malformed."""


class DecisionRefusedError(RewindError):
    """An approve / reject the run refused: no such waiting call, already decided, bad edited arguments."""


class RunActiveError(RewindError):
    """A run has a branch that still runs (or waits), and the operation would stop it."""


class NotResumableError(RewindError):
    """`rewind resume` cannot continue this run; the message says why and what to do instead."""


class AlreadyResumedError(NotResumableError):
    """The run's newest revision was made by `rewind resume`: a bulk resume does not resume it again."""


class LangGraphThreadError(RewindError):
    """A LangGraph thread that cannot be imported (not there, or no `messages` in its state)."""


class ErasureIncompleteError(RewindError):
    """Deleting a run stopped part way: the message says what was removed and what
    is left; running the same deletion again finishes it."""

    retryable = True


class CheckpointError(RewindError):
    """Base class of checkpoint document and checkpoint store errors."""


class CheckpointNotFoundError(CheckpointError, LookupError):
    """No object or checkpoint exists under the requested key or id."""


class CorruptCheckpointError(CheckpointError):
    """A stored document cannot be trusted: bad JSON, hash mismatch, or invalid."""


class FutureSchemaError(CheckpointError):
    """A document was written by a newer Rewind; this code cannot read it safely."""


class CheckpointExistsError(CheckpointError):
    """A different object already exists where an immutable one would be written."""


class CheckpointNotUsableError(CheckpointError):
    """The chosen checkpoint cannot seed a new workflow (failed or invalidated step)."""


class LineageError(CheckpointError, ValueError):
    """A lineage is empty, not chained by parent links, or holds an invalidated checkpoint."""


class StoreUnavailableError(CheckpointError):
    """The store cannot be reached or refused the request; retrying may help."""

    retryable = True

    def __init__(self, message: str = "", *, refused: bool = False) -> None:
        super().__init__(message)
        # True: the store answered and said no in a way only a person fixes (a missing bucket,
        # refused credentials, a path that is not a folder). False: it did not answer, or
        # failed (down, timing out, 5xx, throttled), which heals by itself. Activities retry
        # both (a fixed credential lets a waiting run go on); a starting worker waits out
        # the second and reports the first at once (rewind/worker/startup.py).
        self.refused = refused


class UnstorableStateError(CheckpointError, TypeError):
    """A LangGraph channel value or pending write that LangGraph's serializer cannot
    store as data (``RewindSaver`` keeps pickle off)."""


class UnsafeStoreError(CheckpointError):
    """The backend accepted a second conditional write of one key: it ignores
    ``If-None-Match``, so stored checkpoints could be silently replaced."""


__all__ = [
    "RewindError", "ConfigError", "StoreUnreachableError", "UsageError", "InvalidIdError", "RunNotFoundError", "StepNotFoundError",
    "RunExistsError", "ToolRegistryError", "ToolError", "TranscriptError", "ProjectionError",
    "PayloadIntegrityError", "PayloadEncryptionError", "EncodingDataError", "ScriptError", "DecisionRefusedError",
    "RunActiveError", "ErasureIncompleteError", "LangGraphThreadError",
    "CheckpointError", "CheckpointNotFoundError", "CorruptCheckpointError", "FutureSchemaError",
    "CheckpointExistsError", "CheckpointNotUsableError", "LineageError", "StoreUnavailableError",
    "UnstorableStateError", "UnsafeStoreError",
]
