"""Settings from the environment (see DESIGN.md's configuration table).

CLI flags override these; nothing here is read inside workflow code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


@dataclass
class Settings:
    temporal_address: str = "localhost:7233"
    namespace: str = "default"
    task_queue: str = "rewind"
    store_url: str = "file://.rewind/checkpoints"
    # Where the run's own data lives while it is live: the conversation's
    # transcript segments and Temporal payloads too large for history. Unlike
    # the checkpoint store, a run cannot progress while this store is down.
    payload_url: str = "file://.rewind/payloads"
    payload_threshold: int = 64 * 1024
    home: Path = field(default_factory=lambda: Path(".rewind"))
    tool_modules: list[str] = field(default_factory=list)
    model: str | None = None
    # How long Temporal waits for a crashed worker's sticky queue before
    # handing the run's next workflow task to another worker.
    sticky_timeout_s: float = 5.0
    # Payload encryption (rewind/encryption.py): `kid:<base64 32 bytes>,...`,
    # the first encrypts; and whether plaintext payloads are refused.
    encryption_keys: str = field(default="", repr=False)
    require_encryption: bool = False

    @classmethod
    def from_env(cls) -> "Settings":
        env = os.environ
        home = Path(env.get("REWIND_HOME", ".rewind"))
        store_url = env.get("REWIND_STORE", f"file://{home / 'checkpoints'}")
        default_payloads = f"file://{home / 'payloads'}"
        if store_url.startswith("s3://"):
            default_payloads = "s3://" + store_url[len("s3://"):].split("/", 1)[0] + "/rewind-payloads"
        return cls(
            temporal_address=env.get("TEMPORAL_ADDRESS", "localhost:7233"),
            namespace=env.get("TEMPORAL_NAMESPACE", "default"),
            task_queue=env.get("REWIND_TASK_QUEUE", "rewind"),
            store_url=store_url,
            payload_url=env.get("REWIND_PAYLOADS", default_payloads),
            payload_threshold=int(env.get("REWIND_PAYLOAD_THRESHOLD", str(64 * 1024))),
            home=home,
            tool_modules=_split(env.get("REWIND_TOOLS", "")),
            model=env.get("REWIND_MODEL") or None,
            sticky_timeout_s=float(env.get("REWIND_STICKY_TIMEOUT_S", "5")),
            encryption_keys=env.get("REWIND_ENCRYPTION_KEYS", ""),
            require_encryption=env.get("REWIND_REQUIRE_ENCRYPTION", "").strip().lower() in {"1", "true", "yes"},
        )
