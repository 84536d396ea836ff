"""Fixtures of the CLI tests: the world a user's commands run in."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from as_user import user_env


@pytest.fixture
def world(temporal_server, tmp_path, model):
    """Shared stores of one test (absolute folders), its own task queue, the scripted model."""
    queue = f"user-{uuid.uuid4().hex[:8]}"

    def env(home: Path, **extra: str | None) -> dict[str, str]:
        return user_env(home, **{
            "TEMPORAL_ADDRESS": temporal_server.address,
            "REWIND_TASK_QUEUE": queue,
            "REWIND_STORE": f"file://{tmp_path / 'store'}",
            "REWIND_PAYLOADS": f"file://{tmp_path / 'payloads'}",
            "OPENAI_API_KEY": "test-key",
            "OPENAI_BASE_URL": model.base_url,
            "REWIND_DEMO_FAILURE_RATE": "0",
            **extra,
        })

    def folder(name: str) -> Path:
        path = tmp_path / name
        path.mkdir(exist_ok=True)
        return path

    class World:
        pass

    w = World()
    w.env, w.folder, w.queue, w.model = env, folder, queue, model  # type: ignore[attr-defined]
    return w
