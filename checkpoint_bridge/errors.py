"""Errors of the checkpoint store and of checkpoint documents.

    RewindError                         (rewind.errors)
    └── CheckpointError                 anything wrong with a checkpoint or its store
        ├── CheckpointNotFoundError     no object / checkpoint under that key or id
        ├── CorruptCheckpointError      bad JSON, hash mismatch, wrong shape, failed validation
        ├── FutureSchemaError           written by a newer Rewind than the one reading it
        ├── CheckpointExistsError       an immutable checkpoint would be replaced by other bytes
        ├── StoreUnavailableError       the backend is down, unreachable or refusing requests
        └── UnsafeStoreError            the backend does not keep written objects immutable

Library exceptions (botocore, aiohttp, OSError, pydantic) never cross the store
boundary: they are mapped to these types, kept as ``__cause__`` (``raise ... from
exc``), and every message names the object and says what to do.

``retryable`` tells callers such as a Temporal activity whether trying the same
call again can help; only an unavailable store can heal by itself.
"""

from __future__ import annotations

from rewind.errors import RewindError


class CheckpointError(RewindError):
    """Base class of checkpoint document and checkpoint store errors."""

    retryable: bool = False


class CheckpointNotFoundError(CheckpointError, LookupError):
    """No object or checkpoint exists under the requested key or id."""


class CorruptCheckpointError(CheckpointError):
    """A stored document cannot be trusted: bad JSON, hash mismatch, or invalid."""


class FutureSchemaError(CheckpointError):
    """A document was written by a newer Rewind; this code cannot read it safely."""


class CheckpointExistsError(CheckpointError):
    """A different object already exists where an immutable one would be written."""


class StoreUnavailableError(CheckpointError):
    """The store cannot be reached or refused the request; retrying may help."""

    retryable = True


class UnsafeStoreError(CheckpointError):
    """The backend accepted a second conditional write of one key: it ignores
    ``If-None-Match``, so stored checkpoints could be silently replaced."""
