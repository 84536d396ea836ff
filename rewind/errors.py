"""The exception tree of Rewind.

    RewindError                      base of everything Rewind raises on purpose
    ├── ConfigError                  a setting is missing or malformed
    ├── InvalidIdError               a run / branch / checkpoint id is unsafe or malformed
    ├── ToolRegistryError            a tool module or tool definition is wrong
    ├── RunNotFoundError             no workflow (and no checkpoints) for a run id
    ├── RunExistsError               a run id (or branch) is already taken
    ├── UsageError                   a command-line value or API argument no run could work with
    └── checkpoint_bridge.errors.*   store and checkpoint document errors

Every message names the object involved and says what to do about it.
"""


class RewindError(Exception):
    """Base class of every error Rewind raises on purpose."""


class ConfigError(RewindError):
    """A configuration value is missing or malformed."""


class InvalidIdError(RewindError, ValueError):
    """An id would be unsafe as part of a storage key or is malformed."""


class ToolRegistryError(RewindError):
    """A tool cannot be registered or loaded."""


class RunNotFoundError(RewindError):
    """No run with this id exists."""


class RunExistsError(RewindError):
    """A run or branch with this id already exists."""


class UsageError(RewindError, ValueError):
    """An argument is out of range or empty (a budget below 1 step, an empty task, an unknown tool)."""
