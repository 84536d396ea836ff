"""docker-compose.yml as data: what the deployment tests run, read from the file itself.

No Docker engine runs here, so the tests take the compose file's services and
run local stand-ins for them. Everything a stand-in is given comes from the
file (and from the deployment guide, docs/deployment.md, for the host's CLI): the
worker's command, environment and health check, the bucket the init step
creates, the namespace step's script, the published ports. Change one of
those in the file and the tests follow it, or fail.

Interpolation follows the Compose specification for the forms the file uses
(`${VAR}`, `${VAR:-default}`, `${VAR-default}`, `$$`), from a controlled
environment (never the test process's own); any other `$` form is an error,
so a new form in the file cannot be silently misread here.
"""

from __future__ import annotations

import copy
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DEPLOYMENT_GUIDE = REPO / "docs" / "deployment.md"
# The venv's bin folder: `rewind` and `temporal` are installed there.
VENV_BIN = Path(sys.executable).parent
# What the workers get besides the compose environment: PATH (venv first) and HOME.
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"

# The shell that runs `docker compose up`, as these tests set it: nothing set.
# OPENAI_API_KEY / OPENAI_BASE_URL / REWIND_MODEL become "" (the product must
# read empty as unset: the scripted offline model), MINIO_ROOT_* their defaults.
CONTROLLED_ENVIRON: dict[str, str] = {}

_BRACED = re.compile(r"\$\{([^}]*)\}")
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


class ComposeError(AssertionError):
    """Something in docker-compose.yml these tests cannot take as it is."""


def interpolate(text: str, environ: Mapping[str, str], where: str = "") -> str:
    """Compose's variable interpolation of one string value."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$":
            out.append(char)
            i += 1
            continue
        if text.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        match = _BRACED.match(text, i)
        if not match:
            raise ComposeError(f"{where}: unsupported interpolation at {text[i:i + 30]!r} (only ${{VAR}}, "
                               f"${{VAR:-default}}, ${{VAR-default}} and $$ are handled by these tests)")
        body = match.group(1)
        form = re.fullmatch(rf"({_NAME})(?:(:-|-)(.*))?", body, re.S)
        if not form or (form.group(3) and "$" in form.group(3)):
            raise ComposeError(f"{where}: unsupported interpolation ${{{body}}} (only ${{VAR}}, "
                               f"${{VAR:-default}} and ${{VAR-default}} without nesting are handled by these tests)")
        name, op, default = form.group(1), form.group(2), form.group(3) or ""
        value = environ.get(name)
        if op == ":-" and not value:
            value = default
        elif op == "-" and value is None:
            value = default
        out.append(value or "")
        i = match.end()
    return "".join(out)


def _resolve(node: Any, environ: Mapping[str, str], where: str) -> Any:
    if isinstance(node, str):
        return interpolate(node, environ, where)
    if isinstance(node, list):
        return [_resolve(v, environ, f"{where}[{i}]") for i, v in enumerate(node)]
    if isinstance(node, dict):
        return {k: _resolve(v, environ, f"{where}.{k}") for k, v in node.items()}
    return node


def load_compose(text: str | None = None, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The compose document with anchors and merge keys resolved (YAML) and variables
    interpolated from `environ` (default: the controlled, empty environment)."""
    raw = yaml.safe_load(COMPOSE_FILE.read_text() if text is None else text)
    return _resolve(raw, CONTROLLED_ENVIRON if environ is None else environ, "docker-compose.yml")


def environment(service: Mapping[str, Any], name: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A service's `environment` as compose hands it to the container."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = {}
        for entry in env:
            key, sep, value = str(entry).partition("=")
            pairs[key] = value if sep else None
        env = pairs
    if not isinstance(env, dict):
        raise ComposeError(f"services.{name}.environment: expected a mapping or a list, got {type(env).__name__}")
    out: dict[str, str] = {}
    for key, value in env.items():
        if value is None:  # `KEY:` / `- KEY`: passed through from the shell, if set there
            passed = (CONTROLLED_ENVIRON if environ is None else environ).get(key)
            if passed is not None:
                out[key] = passed
        elif isinstance(value, bool):
            raise ComposeError(f"services.{name}.environment.{key}: a YAML boolean; quote it")
        else:
            out[key] = str(value)
    return out


def published_ports(service: Mapping[str, Any]) -> dict[int, int]:
    """{container port: host port} of a service's `ports` entries (host IP:host:container)."""
    out = {}
    for entry in service.get("ports") or []:
        parts = str(entry).split(":")
        if len(parts) == 2:
            parts = ["0.0.0.0", *parts]
        if len(parts) != 3 or "/" in parts[2] or "-" in parts[2]:
            raise ComposeError(f"ports entry {entry!r}: only HOST_IP:HOST:CONTAINER or HOST:CONTAINER is handled here")
        out[int(parts[2])] = int(parts[1])
    return out


def rewrite_hosts(env: Mapping[str, str], mapping: Mapping[str, str]) -> dict[str, str]:
    """Replace every `host:port` of `mapping` (compose names or published ports) in the values."""
    out = {}
    for key, value in env.items():
        for old, new in mapping.items():
            value = re.sub(rf"(?<![\w.-]){re.escape(old)}(?!\d)", new, value)
        out[key] = value
    return out


def unmapped_hosts(env: Mapping[str, str], hostnames: list[str]) -> dict[str, str]:
    """Values that still name one of `hostnames` as a host (a stand-in is missing for it)."""
    pattern = re.compile(rf"(?<![\w.-])({'|'.join(map(re.escape, hostnames))})(:\d+|/|$)")
    return {k: v for k, v in env.items() if pattern.search(v) and ("://" in v or re.search(r":\d+", v))}


def command_script(service: Mapping[str, Any]) -> list[str]:
    """A one-shot service's argv: entrypoint + command (exec form)."""
    argv: list[str] = []
    for key in ("entrypoint", "command"):
        value = service.get(key) or []
        if isinstance(value, str):
            raise ComposeError(f"{key} {value[:40]!r}: only the exec (list) form is handled here")
        argv.extend(str(v) for v in value)
    return argv


def healthcheck_argv(service: Mapping[str, Any], name: str) -> list[str]:
    test = (service.get("healthcheck") or {}).get("test")
    if not isinstance(test, list) or not test or test[0] != "CMD":
        raise ComposeError(f"services.{name}.healthcheck.test: only the [\"CMD\", ...] form is handled here, got {test!r}")
    return [str(t) for t in test[1:]]


def duration_s(text: str) -> float:
    """A compose duration (`1m30s`, `60s`, `500ms`) in seconds."""
    total, pos = 0.0, 0
    for match in re.finditer(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ComposeError(f"{text!r} is not a compose duration")
    return total


def resolve_executable(argv: list[str], env: Mapping[str, str]) -> list[str]:
    """argv with its program looked up on the child's PATH (as the container would), which
    must find the venv's copy."""
    found = shutil.which(argv[0], path=env["PATH"])
    if found is None:
        raise ComposeError(f"{argv[0]!r} is not on PATH={env['PATH']}")
    return [found, *argv[1:]]


def deployment_guide() -> str:
    """docs/deployment.md below its title (what the host is told to run)."""
    text = DEPLOYMENT_GUIDE.read_text()
    if not text.startswith("# Deployment\n"):
        raise ComposeError(f"{DEPLOYMENT_GUIDE} does not start with '# Deployment'")
    return text.split("\n", 1)[1]


def readme_host_environment() -> dict[str, str]:
    """The variables the deployment guide tells the host to `export` for the CLI
    (before its subsections, which show other Temporals: Temporal Cloud, mTLS clusters)."""
    env: dict[str, str] = {}
    compose_part = deployment_guide().split("\n### ", 1)[0]
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", compose_part, re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if not words or words[0] != "export":
                continue
            for word in words[1:]:
                key, sep, value = word.partition("=")
                if not sep or not re.fullmatch(_NAME, key) or "$" in value:
                    raise ComposeError(f"docs/deployment.md: cannot read `export {word}`")
                env[key] = value
    if not env:
        raise ComposeError("docs/deployment.md has no `export` lines for the host's CLI")
    return env


@dataclass(frozen=True)
class Bucket:
    alias_url: str
    name: str


def minio_init_buckets(service: Mapping[str, Any]) -> list[Bucket]:
    """The buckets the minio-init step creates: `mc alias set A URL ...` + `mc mb [...] A/bucket`."""
    script = "\n".join(command_script(service))
    aliases = dict(re.findall(r"^\s*mc alias set (\S+) (\S+)", script, re.M))
    buckets = []
    for alias, bucket in re.findall(r"^\s*mc mb(?: --?[\w-]+)* (\w[\w.-]*)/([a-z0-9][a-z0-9.-]+)\s*$", script, re.M):
        if alias not in aliases:
            raise ComposeError(f"minio-init: `mc mb {alias}/{bucket}` with no `mc alias set {alias} ...`")
        buckets.append(Bucket(aliases[alias], bucket))
    if not buckets:
        raise ComposeError("minio-init creates no bucket (no `mc mb ... ALIAS/BUCKET` line)")
    return buckets


def mutated(compose: dict[str, Any], service: str, **env: str | None) -> dict[str, Any]:
    """A copy of the compose document with `service`'s environment changed (None removes)."""
    doc = copy.deepcopy(compose)
    target = doc["services"][service].setdefault("environment", {})
    for key, value in env.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    return doc
