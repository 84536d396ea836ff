"""docker-compose.yml, the Dockerfile and .dockerignore (no Docker engine runs here: check what can be checked)."""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
COMPOSE_TEXT = (REPO / "docker-compose.yml").read_text()
COMPOSE = yaml.safe_load(COMPOSE_TEXT)
SERVICES = COMPOSE["services"]
DOCKERFILE = (REPO / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

INIT_SERVICES = {"temporal-schema-setup", "temporal-namespace-init", "minio-init"}
LONG_RUNNING = {"postgresql", "temporal", "temporal-ui", "minio", "worker"}
PUBLISHED_PORTS = {7233, 8080, 9000, 9001}
INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def _script(service: dict) -> str:
    """The shell text a one-shot service runs (entrypoint + command), `$$` unescaped."""
    parts = []
    for key in ("entrypoint", "command"):
        value = service.get(key) or []
        parts.extend([value] if isinstance(value, str) else value)
    return "\n".join(parts).replace("$$", "$")


def _depends(service: dict) -> dict[str, str]:
    depends = service.get("depends_on", {})
    assert isinstance(depends, dict), "depends_on must name a condition for every dependency"
    return {name: spec["condition"] for name, spec in depends.items()}


def _host_ports(service: dict) -> set[int]:
    ports = set()
    for entry in service.get("ports", []):
        parts = str(entry).split(":")
        assert len(parts) == 3 and parts[0] == "127.0.0.1", f"{entry}: publish on 127.0.0.1 only"
        assert parts[1] == parts[2], entry
        ports.add(int(parts[1]))
    return ports


def _deployment_guide() -> str:
    """docs/deployment.md below its title."""
    text = (REPO / "docs" / "deployment.md").read_text()
    assert text.startswith("# Deployment\n"), "docs/deployment.md does not start with '# Deployment'"
    return text.split("\n", 1)[1]


def _worker_env() -> dict[str, str]:
    env = SERVICES["worker"]["environment"]
    assert isinstance(env, dict), "the worker's environment must be a mapping"
    return env


# --- compose: structure ------------------------------------------------------


def test_compose_names_the_services_of_a_real_deployment():
    assert set(SERVICES) == LONG_RUNNING | INIT_SERVICES
    assert "version" not in COMPOSE  # obsolete in the Compose specification


def test_every_image_is_pinned_to_a_release():
    for name, service in SERVICES.items():
        if "image" not in service:
            assert name == "worker" and service["build"] == ".", name
            continue
        image = service["image"]
        assert "$" not in image and "@" not in image, image
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"{name}: {image} has no tag"
        assert tag != "latest", f"{name}: {image}"
        assert tag[0].isdigit() or tag.startswith("RELEASE."), f"{name}: {image} is not a release tag"
    images = {name: s["image"].rpartition(":")[0] for name, s in SERVICES.items() if "image" in s}
    assert images["temporal"] == "temporalio/server"
    assert images["temporal-schema-setup"] == images["temporal-namespace-init"] == "temporalio/admin-tools"
    assert images["minio"].endswith("minio/minio") and images["minio-init"].endswith("minio/mc")
    assert not any("auto-setup" in image for image in images.values())  # deprecated upstream
    # Server and admin tools (schema, CLI) from the same Temporal release.
    assert SERVICES["temporal"]["image"].rpartition(":")[2] == SERVICES["temporal-schema-setup"]["image"].rpartition(":")[2]
    assert SERVICES["temporal-schema-setup"]["image"] == SERVICES["temporal-namespace-init"]["image"]


def test_long_running_services_have_health_checks_and_restart():
    for name in LONG_RUNNING:
        service = SERVICES[name]
        test = service.get("healthcheck", {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL"), f"{name} has no health check"
        assert service.get("restart") == "unless-stopped", name
    for name in INIT_SERVICES:
        assert "healthcheck" not in SERVICES[name] and "restart" not in SERVICES[name], name


def test_dependencies_wait_for_health_and_for_completed_init_steps():
    for name, service in SERVICES.items():
        for dependency, condition in _depends(service).items():
            if dependency in INIT_SERVICES:
                assert condition == "service_completed_successfully", (name, dependency)
            else:
                assert condition == "service_healthy", (name, dependency)
                assert "healthcheck" in SERVICES[dependency], (name, dependency)
    # Every init step is waited for by the service that needs it.
    assert _depends(SERVICES["temporal"])["temporal-schema-setup"] == "service_completed_successfully"
    assert _depends(SERVICES["temporal-schema-setup"])["postgresql"] == "service_healthy"
    assert _depends(SERVICES["temporal-namespace-init"])["temporal"] == "service_healthy"
    assert _depends(SERVICES["minio-init"])["minio"] == "service_healthy"
    assert _depends(SERVICES["temporal-ui"]) == {"temporal": "service_healthy"}
    assert _depends(SERVICES["worker"]) == {
        "temporal": "service_healthy",
        "temporal-namespace-init": "service_completed_successfully",
        "minio": "service_healthy",
        "minio-init": "service_completed_successfully",
    }


def test_temporal_runs_on_postgresql_with_its_schema_set_up_first():
    env = SERVICES["temporal"]["environment"]
    assert env["DB"] == "postgres12" and env["POSTGRES_SEEDS"] == "postgresql"
    assert env["POSTGRES_USER"] == SERVICES["postgresql"]["environment"]["POSTGRES_USER"]
    assert env["POSTGRES_PWD"] == SERVICES["postgresql"]["environment"]["POSTGRES_PASSWORD"]
    assert env["BIND_ON_IP"] == "0.0.0.0"
    mounted = {c["target"] for c in SERVICES["temporal"]["configs"]}
    assert env["DYNAMIC_CONFIG_FILE_PATH"] in mounted
    dynamic = yaml.safe_load(COMPOSE["configs"]["temporal-dynamic-config"]["content"])
    assert dynamic["limit.maxIDLength"][0]["value"] == 255
    # The transfer-queue reader's cap, raised as on the embedded dev server (rewind/temporal/dev_server.py).
    from rewind.temporal.dev_server import DISPATCH_TUNING

    rps = dynamic["history.transferProcessorMaxPollRPS"][0]["value"]
    assert rps == int(DISPATCH_TUNING["history.transferProcessorMaxPollRPS"])
    script = _script(SERVICES["temporal-schema-setup"])
    for database, schema in (("temporal", "temporal"), ("temporal_visibility", "visibility")):
        for step in ("create", "setup-schema -v 0.0", f"update-schema -d $schema/{schema}/versioned"):
            assert f"--db {database} {step}" in script, (database, step)
    assert "temporal-sql-tool --plugin postgres12 --ep postgresql" in script
    assert "schema=/etc/temporal/schema/postgresql/v12" in script


def test_init_scripts_are_valid_shell_with_compose_escaping():
    for name in INIT_SERVICES:
        service = SERVICES[name]
        assert service["entrypoint"] == ["/bin/sh", "-ec"], name
        raw = service["command"][0]
        # Compose would interpolate a single `$` from the host's environment.
        assert not re.search(r"(?<!\$)\$(?!\$)", raw.replace("$$", "")), name
        result = subprocess.run(["sh", "-n", "-c", _script({"command": [raw]})], capture_output=True, text=True)
        assert result.returncode == 0, (name, result.stderr)


def test_namespace_retention_is_set_explicitly():
    script = _script(SERVICES["temporal-namespace-init"])
    namespace = _worker_env()["TEMPORAL_NAMESPACE"]
    for verb in ("create", "update"):
        assert f"temporal operator namespace {verb} --namespace {namespace} --retention 30d" in script, verb
    assert "temporal operator cluster health --address temporal:7233" in script
    # Documented where it is set and in the README.
    assert "for 30 days" in COMPOSE_TEXT.split("services:")[0]
    assert "rewind mirror" in COMPOSE_TEXT.split("services:")[0]


def test_minio_init_creates_the_bucket_the_worker_uses():
    script = _script(SERVICES["minio-init"])
    buckets = re.findall(r"mc mb --ignore-existing local/([a-z0-9.-]+)", script)
    assert buckets == ["rewind"]
    env = _worker_env()
    for variable in ("REWIND_STORE", "REWIND_PAYLOADS"):
        assert env[variable].startswith(f"s3://{buckets[0]}/"), variable
    assert "mc alias set local http://minio:9000" in script
    assert SERVICES["minio-init"]["environment"] == SERVICES["minio"]["environment"]


def test_published_ports():
    published = {name: _host_ports(service) for name, service in SERVICES.items()}
    assert published["temporal"] == {7233}
    assert published["temporal-ui"] == {8080}
    assert published["minio"] == {9000, 9001}
    assert set().union(*published.values()) == PUBLISHED_PORTS
    assert SERVICES["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"


# --- compose: the worker -----------------------------------------------------


def test_worker_service():
    worker = SERVICES["worker"]
    assert worker["build"] == "."
    assert worker["command"] == ["rewind", "worker", "--tool-modules", "examples.research_agent"]
    assert worker["healthcheck"]["test"] == ["CMD", "rewind", "health"]
    for key in ("interval", "timeout", "retries", "start_period"):
        assert key in worker["healthcheck"], key
    assert worker["restart"] == "unless-stopped"
    # Scalable: `docker compose up --scale worker=N` needs no fixed name and no host port,
    # and nothing may depend on a local folder shared between workers.
    for key in ("container_name", "ports", "volumes", "network_mode"):
        assert key not in worker, key


def test_worker_environment():
    env = _worker_env()
    assert all(isinstance(v, str) for v in env.values()), "quote values so they stay strings"
    minio_root = SERVICES["minio"]["environment"]
    assert env == {
        "TEMPORAL_ADDRESS": "temporal:7233",
        "TEMPORAL_NAMESPACE": "default",
        "REWIND_TASK_QUEUE": "rewind",
        "REWIND_STORE": "s3://rewind/checkpoints",
        "REWIND_PAYLOADS": "s3://rewind/payloads",
        "AWS_ENDPOINT_URL": "http://minio:9000",
        "AWS_ACCESS_KEY_ID": minio_root["MINIO_ROOT_USER"],
        "AWS_SECRET_ACCESS_KEY": minio_root["MINIO_ROOT_PASSWORD"],
        "AWS_DEFAULT_REGION": "us-east-1",
        "OPENAI_API_KEY": "${OPENAI_API_KEY:-}",
        "OPENAI_BASE_URL": "${OPENAI_BASE_URL:-}",
        "REWIND_MODEL": "${REWIND_MODEL:-}",
    }


def test_secrets_are_only_references_to_the_callers_environment():
    secret = re.compile(r"PASSWORD|PWD|SECRET|API_KEY|TOKEN")
    for name, service in SERVICES.items():
        for variable, value in (service.get("environment") or {}).items():
            if secret.search(variable):
                assert INTERPOLATION.fullmatch(value), f"{name}: {variable} must be a ${{...}} reference"
    # Defaults of the MinIO credentials are what the README tells the host to use.
    defaults = {m.group(1): m.group(2) for m in INTERPOLATION.finditer(COMPOSE_TEXT) if m.group(2)}
    assert defaults["MINIO_ROOT_USER"] == "rewind" and defaults["MINIO_ROOT_PASSWORD"] == "rewind-secret"
    assert len(defaults["MINIO_ROOT_PASSWORD"]) >= 8  # MinIO refuses shorter root passwords


# --- Dockerfile and .dockerignore --------------------------------------------


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def _copied_sources() -> set[str]:
    sources = set()
    for keyword, rest in _instructions():
        if keyword == "COPY":
            words = [w for w in shlex.split(rest) if not w.startswith("--")]
            sources.update(w.rstrip("/") for w in words[:-1])
    return sources


def _packaged_paths() -> set[str]:
    """What `pip install .` reads: pyproject's readme, py-modules and packages."""
    setuptools_cfg = PYPROJECT["tool"]["setuptools"]
    paths = {"pyproject.toml", PYPROJECT["project"]["readme"]}
    paths.update(f"{module}.py" for module in setuptools_cfg.get("py-modules", []))
    for pattern in setuptools_cfg["packages"]["find"]["include"]:
        top = pattern.rstrip("*").rstrip(".")
        assert (REPO / top / "__init__.py").exists(), top
        paths.add(top)
    return paths


def _dockerignore_patterns() -> list[tuple[bool, str]]:
    patterns = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            patterns.append((line.startswith("!"), line.lstrip("!").strip("/")))
    return patterns


def _pattern_matches(pattern: str, path: str) -> bool:
    if pattern.startswith("**/"):
        segments = path.split("/")
        return any(_pattern_matches(pattern[3:], "/".join(segments[i:])) for i in range(len(segments)))
    pattern_parts, path_parts = pattern.split("/"), path.split("/")
    return len(pattern_parts) == len(path_parts) and all(
        fnmatch.fnmatchcase(part, p) for part, p in zip(path_parts, pattern_parts)
    )


def _dockerignored(path: str) -> bool:
    parts, ignored = path.split("/"), False
    for negated, pattern in _dockerignore_patterns():
        if any(_pattern_matches(pattern, "/".join(parts[:i])) for i in range(1, len(parts) + 1)):
            ignored = not negated
    return ignored


def test_dockerfile_copies_everything_pip_install_needs():
    copied = _copied_sources()
    packaged = _packaged_paths()
    assert packaged <= copied, f"not copied: {sorted(packaged - copied)}"
    for source in copied:
        assert (REPO / source).exists(), source
        assert not _dockerignored(source), f".dockerignore drops {source}"
    # Every tracked file of the packaged paths (package data included) reaches the build.
    tracked = subprocess.run(["git", "ls-files", *sorted(packaged)], cwd=REPO, capture_output=True, text=True, check=True)
    files = tracked.stdout.split()
    assert any(f.startswith("activities/model/encodings/") and f.endswith(".tiktoken.gz") for f in files)
    for package, globs in PYPROJECT["tool"]["setuptools"].get("package-data", {}).items():
        for glob in globs:
            assert list((REPO / package).glob(glob)), (package, glob)
    for path in files:
        assert not _dockerignored(path), f".dockerignore drops {path}"


def test_dockerignore_keeps_local_state_and_tooling_out():
    for path in (".venv", ".git", ".rewind", "tests", "bench", ".ci", ".env",
                 "activities/__pycache__", "rewind/__pycache__/cli.cpython-311.pyc",
                 "rewind_agents.egg-info", "build", ".pytest_cache"):
        assert _dockerignored(path), path
    for path in ("pyproject.toml", "README.md", "worker.py", "rewind/cli/main.py",
                 "activities/encodings/o200k_base.tiktoken.gz", "examples/research_agent.py"):
        assert not _dockerignored(path), path


def test_dockerfile_installs_the_project_only_and_runs_unprivileged():
    instructions = _instructions()
    froms = [rest for keyword, rest in instructions if keyword == "FROM"]
    assert len(froms) == 1 and re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+", froms[0]), froms
    installs = [rest for keyword, rest in instructions if keyword == "RUN" and "pip install" in rest]
    assert len(installs) == 1
    # The project and the runtime drivers of the compose file's PostgreSQL-store and Redis-tier variants, nothing else.
    assert re.search(r"pip install --no-cache-dir '\.\[postgres,redis\]'(\s|$)", installs[0]), installs[0]
    assert "test" not in installs[0] and "bench" not in installs[0]
    assert "-e " not in installs[0] and "--editable" not in installs[0]
    users = [rest for keyword, rest in instructions if keyword == "USER"]
    assert users, "no USER: the worker would run as root"
    assert users[-1].split(":")[0] not in ("root", "0"), users[-1]
    # The user exists, with the uid USER names, and owns the working directory and REWIND_HOME.
    uid = users[-1].split(":")[0]
    assert re.search(rf"useradd .*--uid {uid}\b", DOCKERFILE)
    workdir = [rest for keyword, rest in instructions if keyword == "WORKDIR"][-1]
    assert re.search(rf"chown -R rewind:rewind {re.escape(workdir)}\b", DOCKERFILE)
    assert f"REWIND_HOME={workdir}/" in DOCKERFILE
    # USER comes after every RUN that needs root.
    last_run = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "RUN")
    assert max(i for i, (keyword, _) in enumerate(instructions) if keyword == "USER") > last_run
    healthchecks = [rest for keyword, rest in instructions if keyword == "HEALTHCHECK"]
    assert len(healthchecks) == 1 and healthchecks[0].endswith('CMD ["rewind", "health"]'), healthchecks
    assert ("CMD", '["rewind", "worker"]') in instructions


# --- documentation -----------------------------------------------------------

HOST_ENV = (
    "TEMPORAL_ADDRESS=localhost:7233",
    "REWIND_STORE=s3://rewind/checkpoints",
    "REWIND_PAYLOADS=s3://rewind/payloads",
    "AWS_ENDPOINT_URL=http://localhost:9000",
    "AWS_ACCESS_KEY_ID=rewind",
    "AWS_SECRET_ACCESS_KEY=rewind-secret",
    "AWS_DEFAULT_REGION=us-east-1",
)
COMMANDS = (
    "docker compose up -d --build",
    "docker compose up -d --scale worker=2",
    'rewind start --task "',
    "rewind status RUN",
)


@pytest.mark.parametrize("where", ["docs/deployment.md", "docker-compose.yml header"])
def test_docs_show_the_commands_ports_and_host_environment(where):
    text = _deployment_guide() if where.startswith("docs") else COMPOSE_TEXT.split("services:")[0]
    for snippet in HOST_ENV + COMMANDS:
        assert snippet in text, snippet
    for port in PUBLISHED_PORTS:
        assert f"localhost:{port}" in text, port


def test_the_deployment_guide_explains_services_retention_and_the_image():
    section = _deployment_guide()
    for name in SERVICES:
        assert f"`{name}`" in section, name
    for port in PUBLISHED_PORTS:
        assert str(port) in section
    assert "30 days" in section and "--retention 30d" in section
    for command in ("rewind status", "rewind tree", "rewind show", "rewind diff", "rewind mirror RUN"):
        assert command in section, command
    assert "unprivileged user" in section and "rewind health" in section
    assert "temporalio/auto-setup" in section  # named as what this is not
