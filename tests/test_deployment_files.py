"""docker-compose.yml and the Dockerfile (no Docker engine runs here: check what can be checked)."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def test_compose_names_the_services_of_a_real_deployment():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgresql", "temporal", "temporal-ui", "minio", "worker"} <= set(services)
    assert services["temporal"]["environment"]["DB"].startswith("postgres")
    worker = services["worker"]
    assert worker["build"] == "."
    assert worker["environment"]["REWIND_STORE"].startswith("s3://")
    assert worker["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    # Secrets come from the caller's environment, never from the file.
    assert worker["environment"]["OPENAI_API_KEY"].startswith("${")


def test_dockerfile_copies_every_package_the_worker_imports():
    text = (REPO / "Dockerfile").read_text()
    for folder in ("workflows", "activities", "checkpoint_bridge", "rewind", "examples"):
        assert f"COPY {folder} " in text
        assert (REPO / folder / "__init__.py").exists()
