"""Settings: the one place that reads the environment.

Every other module takes its settings as arguments (from a `Settings`), so a
test or a library user can configure Rewind in code and the CLI and the
worker configure it the same way, from the variables below. CLI flags
override them.

An empty variable means unset, everywhere: `OPENAI_BASE_URL=` (as
docker-compose passes a variable the shell does not set) is the same as no
`OPENAI_BASE_URL`. Libraries that read the environment themselves (the
openai client, botocore) are handed explicit values, and the entry points
call `drop_empty_library_variables()` so that they never see an empty one
either (botocore reads `AWS_PROFILE=` as a profile named "" and
`AWS_DEFAULT_REGION=` as a region named "").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, cast

from checkpoint_bridge.stores import parse_store_url
from rewind.settings.temporal import TemporalConnection, load_temporal_config
from workflows.vocabulary.defaults import DEFAULT_MODEL
from workflows.vocabulary.errors import ConfigError

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_SECRET_ENV = ("OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "ANTHROPIC_API_KEY")

# Variables that libraries read on their own; an empty one must look unset to them too.
_LIBRARY_VARIABLES_PREFIXES = ("AWS_", "OPENAI_", "OTEL_")
# How step objects are written (checkpoint_bridge/document/envelope.py); both are always read.
StoreCompression = Literal["gzip", "none"]
STORE_COMPRESSIONS: tuple[StoreCompression, ...] = ("gzip", "none")
# The OTLP protocols Rewind can export traces with (rewind/temporal/tracing.py).
OTLP_PROTOCOLS = ("http/protobuf", "grpc")


def drop_empty_library_variables(environ: Any = None) -> list[str]:
    """Remove empty AWS_* / OPENAI_* variables from the process environment (entry points only)."""
    environ = os.environ if environ is None else environ
    dropped = [k for k, v in environ.items() if k.startswith(_LIBRARY_VARIABLES_PREFIXES) and not v.strip()]
    for name in dropped:
        del environ[name]
    return dropped


def skip_pydantic_plugins(environ: Any = None) -> None:
    """For a CLI command that runs no user code (entry points only): pydantic's plugin
    loader reads every installed distribution's entry points when the first model is
    built (tens of ms, more with every package installed), and a command's own models
    need no plugin. A PYDANTIC_DISABLE_PLUGINS the user set is kept."""
    environ = os.environ if environ is None else environ
    environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _port(name: str, read: "_Env") -> int:
    port = read.int(name, 0, minimum=1)
    if port > 65535:
        raise ConfigError(f"{name}={port} is not a TCP port; use 1-65535 (e.g. 9464)")
    return port


class _Env:
    """Typed reads of one environment mapping; an empty or blank value is unset."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env

    def str(self, name: str, default: str | None = None) -> str | None:
        value = self._env.get(name)
        return value.strip() if value is not None and value.strip() else default

    def raw(self, name: str) -> str | None:
        """The value as given (secrets, patterns: no stripping), None when empty."""
        value = self._env.get(name)
        return value if value else None

    def _number(self, name: str, default: Any, kind: Callable[[str], Any], what: str, minimum: float) -> Any:
        text = self.str(name)
        if text is None:
            return default
        try:
            value = kind(text)
        except ValueError:
            raise ConfigError(f"{name}={text!r} is not {what}") from None
        if value < minimum:
            raise ConfigError(f"{name}={text!r} must be at least {minimum:g}")
        return value

    def int(self, name: str, default: int, minimum: int = 0) -> int:
        return self._number(name, default, int, "a whole number", minimum)

    def float(self, name: str, default: float, minimum: float = 0.0) -> float:
        return self._number(name, default, float, "a number", minimum)

    def flag(self, name: str) -> bool:
        text = (self.str(name) or "").lower()
        if text in {"", "0", "false", "no", "off"}:
            return False
        if text in {"1", "true", "yes", "on"}:
            return True
        raise ConfigError(f"{name}={text!r} is not a yes/no value; use 1 or 0")


def _tokens_per_s(read: _Env) -> float | None:
    """REWIND_SCRIPTED_TOKENS_PER_S: a finite number >= 0, or None when unset."""
    text = read.str("REWIND_SCRIPTED_TOKENS_PER_S")
    if text is None:
        return None
    value = read.float("REWIND_SCRIPTED_TOKENS_PER_S", 0.0)
    if value != value or value == float("inf"):
        raise ConfigError(f"REWIND_SCRIPTED_TOKENS_PER_S={text!r} must be a finite number of tokens a second "
                          "(0: as fast as the offline model writes)")
    return value


def _events_url(value: str | None, hot_store: str | None) -> str:
    """REWIND_EVENTS: `local`, `off`, or a redis:// URL; unset, the hot store's Redis or `local`."""
    if value is None:
        return hot_store or "local"
    if value.lower() in ("local", "off"):
        return value.lower()
    if value.startswith(("redis://", "rediss://")):
        return value
    raise ConfigError(f"REWIND_EVENTS={value!r}: use local (the default: this machine's workers), "
                      "redis://HOST:PORT[/DB] (readers on any machine), or off")


def _off(read: "_Env", name: str) -> bool:
    """A yes/no variable that is on unless set to a no."""
    return read.str(name) is not None and not read.flag(name)


def _store_url(variable: str, url: str | None) -> Any:
    """The parsed store URL; a malformed one is an error naming its variable."""
    try:
        return parse_store_url(url or "")
    except ConfigError as exc:
        raise ConfigError(f"{variable}: {exc}") from None


def _checked_url(variable: str, url: str | None) -> str:
    _store_url(variable, url)
    return url or ""


def _payload_url(url: str | None, allow_redis: bool) -> str:
    if _store_url("REWIND_PAYLOADS", url).kind == "redis" and not allow_redis:
        raise ConfigError(
            "REWIND_PAYLOADS is a redis:// URL: it holds the records that keep side effects once, which must "
            "survive a restart, and Redis alone does not promise that; use a durable store (or set "
            "REWIND_ALLOW_REDIS_STORE=1 if this server's persistence is what you want)"
        )
    return url or ""


def _store_compression(read: "_Env") -> StoreCompression:
    given = read.str("REWIND_STORE_COMPRESSION", STORE_COMPRESSIONS[0])
    text = str(given).lower()
    if text not in STORE_COMPRESSIONS:
        raise ConfigError(f"REWIND_STORE_COMPRESSION={given!r} is not a compression Rewind writes step objects with; "
                          f"use {' or '.join(STORE_COMPRESSIONS)} (none: plain JSON, for tools that read the store)")
    return cast(StoreCompression, text)


def _otlp_protocol(read: "_Env") -> str:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        text = read.str(name)
        if text is not None:
            if text not in OTLP_PROTOCOLS:
                raise ConfigError(f"{name}={text!r} is not a protocol Rewind exports traces with; "
                                  f"use {' or '.join(OTLP_PROTOCOLS)}")
            return text
    return OTLP_PROTOCOLS[0]


def _log_level(text: str) -> str:
    level = text.upper()
    if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
        raise ConfigError(f"REWIND_LOG_LEVEL={text!r} is not a log level; use DEBUG, INFO, WARNING or ERROR")
    return level


@dataclass
class Settings:
    temporal_address: str = "localhost:7233"
    namespace: str = "default"
    # TLS, API key, gRPC metadata: the `temporal` CLI's own client configuration
    # (profile file + TEMPORAL_* variables, rewind/settings/temporal.py). Plaintext by default.
    temporal: TemporalConnection = field(default_factory=TemporalConnection)
    task_queue: str = "rewind"
    store_url: str = "file://.rewind/checkpoints"
    # Where the run's own live data is: the conversation's transcript segments,
    # the idempotency records of side-effecting tools and Temporal payloads too
    # large for history. Unlike the checkpoint store, a run cannot progress
    # while this store is down, so it is the one thing tools may rely on.
    payload_url: str = "file://.rewind/payloads"
    payload_threshold: int = 64 * 1024
    # Step objects gzip'd ("gzip") or plain JSON ("none", for teams that read the store with
    # plain tools); readers take both forms whatever this says.
    store_compression: StoreCompression = "gzip"
    # Redis in front of the checkpoint store (checkpoint_bridge/stores/hot.py): writes land
    # there at once and reach REWIND_STORE from the workers' flushers; hot entries live a day.
    hot_store_url: str | None = None
    hot_ttl_s: int = 24 * 3600
    # Where a run's live events travel (checkpoint_bridge/events/bus.py): `local` (this machine's
    # workers, announced under home/live), a redis:// URL (the hot store's Redis by default), `off`.
    events_url: str = "local"
    # Whether the model activity asks the provider to stream (its deltas are live events).
    model_stream: bool = True
    home: Path = field(default_factory=lambda: Path(".rewind"))
    tool_modules: list[str] = field(default_factory=list)
    # Which variable named the tool modules (for the deprecation note of REWIND_TOOLS).
    tool_modules_source: str | None = None
    model: str = DEFAULT_MODEL
    model_api_key: str = field(default="", repr=False)
    model_base_url: str | None = None
    # S3 (REWIND_STORE / REWIND_PAYLOADS on s3://): the endpoint of a
    # non-AWS server, and the region; credentials come from botocore's chain.
    s3_endpoint_url: str | None = None
    aws_region: str | None = None
    # How long Temporal waits for a crashed worker's sticky queue before
    # handing the run's next workflow task to another worker.
    # 2 s: no sticky misses at 100 concurrent runs on one worker (1 s had 38 of
    # 2,000 steps replayed), and the standby takes over ~3 s sooner than at 5 s.
    # Not waited for when the worker died in a call: the call's retry resets
    # the run's stickiness (activities/liveness/takeover.py).
    sticky_timeout_s: float = 2.0
    # Payload encryption (rewind/temporal/encryption.py): `kid:<base64 32 bytes>,...`,
    # the first encrypts; and whether plaintext payloads are refused.
    encryption_keys: str = field(default="", repr=False)
    require_encryption: bool = False
    # Price table over the built-in one: inline JSON or a path (activities/model/pricing.py).
    prices: str = ""
    # Secrets to redact: name -> value (values of the REWIND_SECRET_ENV variables).
    secret_values: dict[str, str] = field(default_factory=dict, repr=False)
    redact_patterns: str = ""
    max_tool_output_bytes: int = 16 * 1024 * 1024
    max_arg_chars: int = 100_000
    log_level: str = "INFO"
    # The offline model (no OPENAI_API_KEY): scripts file, which setting named it (REWIND_SCRIPTS
    # or --scripts) for its errors, and latency.
    scripts_file: str | None = None
    scripts_source: str = "REWIND_SCRIPTS"
    scripted_latency_ms: float = 0.0
    # How fast the offline model streams its answers, tokens a second (0: as fast as it writes;
    # None: not set, which `rewind demo` reads as its own, visible pace).
    scripted_tokens_per_s: float | None = None
    # Which server's request checks the offline model emulates (rewind/worker/scripted_model.py).
    scripted_dialect: str = "openai"
    # Where a worker reports that it is polling (`rewind health` reads it).
    health_file: Path | None = None
    # The worker serves Prometheus metrics on this port (all interfaces), or none.
    metrics_port: int | None = None
    # Processes `rewind worker` runs (rewind/worker/pool.py); None: the machine's cores.
    worker_processes: int | None = None
    # Run workflow code in Temporal's sandbox, or (the default) without it: the sandbox costs
    # a worker about a fifth of its CPU per step (docs/performance.md), and the workflow code
    # is Rewind's own, whose tests run it in the sandbox (tests/conftest.py, the replay tests).
    workflow_sandbox: bool = False
    # How long a starting worker waits for Temporal and its stores while they do not answer
    # (rewind/worker/startup.py); 0: stop at once. What a person must fix stops it at once anyway.
    startup_wait_s: float = 60.0
    # Print tracebacks of unexpected errors (the CLI prints one line otherwise).
    debug: bool = False
    # OpenTelemetry traces (rewind/temporal/tracing.py): on when an OTLP endpoint is set. The
    # exporter reads the rest of its OTEL_EXPORTER_OTLP_* variables itself.
    tracing: bool = False
    otel_service_name: str | None = None  # None: rewind-worker for a worker, rewind-cli for the CLI
    otel_protocol: str = "http/protobuf"
    # MCP servers whose tools the worker offers (rewind/settings/mcp.py): the file, and
    # which setting named it (REWIND_MCP_CONFIG or --mcp-config) for its errors.
    mcp_config: str | None = None
    mcp_config_source: str = "REWIND_MCP_CONFIG"
    # Tools whose annotations say destructive (or say nothing) wait for approval.
    approve_destructive: bool = False
    # `rewind serve` (rewind/serve/auth.py): every request must carry this key; without it the
    # server binds only to loopback. A secret: never logged, never shown (repr=False).
    api_key: str = field(default="", repr=False)
    # `rewind serve`'s auth hook, MODULE:FUNCTION (rewind/serve/agent/identity.py): called per
    # request, it names the caller (who then owns the threads and runs it creates) or refuses.
    serve_auth: str | None = None
    # The environment it was read from: what `${VAR}` references in the MCP file are filled
    # in from, and what `rewind dev` hands its worker.
    environ: dict[str, str] = field(default_factory=dict, repr=False)
    # False: read by a command that only reads the store (`rewind tree`, `show`), without the
    # Temporal connection (the profile file's loader imports the SDK's service client);
    # connect() refuses such settings.
    temporal_read: bool = field(default=True, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, temporal: bool = True) -> "Settings":
        """`temporal=False`: leave the Temporal connection unread (a command that never connects)."""
        env = os.environ if env is None else env
        read = _Env(env)
        if temporal:
            temporal_address, namespace, connection = load_temporal_config(env)
        else:
            temporal_address, namespace, connection = cls.temporal_address, cls.namespace, TemporalConnection()
        home = Path(read.str("REWIND_HOME", ".rewind"))  # type: ignore[arg-type]
        store_url = read.str("REWIND_STORE", f"file://{home / 'checkpoints'}")
        assert store_url is not None
        default_payloads = f"file://{home / 'payloads'}"
        where = _store_url("REWIND_STORE", store_url)
        allow_redis = read.flag("REWIND_ALLOW_REDIS_STORE")
        if where.kind == "redis" and not allow_redis:
            raise ConfigError(
                "REWIND_STORE is a redis:// URL: Redis alone keeps no durability promise (an acknowledged write "
                "is lost by a restart unless the server runs with appendonly yes and appendfsync always); put it "
                "in front of a durable store instead (REWIND_HOT_STORE=redis://... with REWIND_STORE=s3://..., "
                "postgresql://..., a folder), or set REWIND_ALLOW_REDIS_STORE=1 if this server's persistence is "
                "what you want"
            )
        hot_store = read.str("REWIND_HOT_STORE")
        if hot_store is not None:
            if _store_url("REWIND_HOT_STORE", hot_store).kind != "redis":
                raise ConfigError(f"REWIND_HOT_STORE={hot_store!r} is not a redis:// or rediss:// URL; the hot tier "
                                  "is Redis (redis://host:6379/0), in front of REWIND_STORE")
            if where.kind == "redis":
                raise ConfigError("REWIND_HOT_STORE is set and REWIND_STORE is Redis too: the hot tier belongs in "
                                  "front of a durable store (s3://, postgresql://, dynamodb://, sqlite://, a folder)")
        if where.kind == "s3":
            # Workers on several machines share nothing but Temporal and S3:
            # with an S3 checkpoint store, the live data goes to S3 too.
            default_payloads = f"s3://{where.bucket}/rewind-payloads"
        elif where.kind != "file":
            # A database holds the live data too, beside the checkpoints (their keys never
            # meet: runs/, langgraph/ against segments/, outputs/, idempotency/, temporal/).
            default_payloads = store_url
        modules_text, modules_source = read.str("REWIND_TOOL_MODULES"), "REWIND_TOOL_MODULES"
        if modules_text is None:
            modules_text, modules_source = read.str("REWIND_TOOLS"), "REWIND_TOOLS"
        secret_names = read.str("REWIND_SECRET_ENV")
        names = _split(secret_names) if secret_names is not None else list(DEFAULT_SECRET_ENV)
        return cls(
            temporal_address=temporal_address,
            namespace=namespace,
            temporal=connection,
            temporal_read=temporal,
            task_queue=read.str("REWIND_TASK_QUEUE", "rewind"),  # type: ignore[arg-type]
            store_url=store_url,
            payload_url=_payload_url(read.str("REWIND_PAYLOADS", default_payloads), allow_redis),
            store_compression=_store_compression(read),
            hot_store_url=hot_store,
            events_url=_events_url(read.str("REWIND_EVENTS"), hot_store),
            model_stream=not _off(read, "REWIND_MODEL_STREAM"),
            hot_ttl_s=read.int("REWIND_HOT_TTL_S", 24 * 3600, minimum=60),
            payload_threshold=read.int("REWIND_PAYLOAD_THRESHOLD", 64 * 1024, minimum=1024),
            home=home,
            tool_modules=_split(modules_text or ""),
            tool_modules_source=modules_source if modules_text else None,
            model=read.str("REWIND_MODEL", DEFAULT_MODEL),  # type: ignore[arg-type]
            model_api_key=read.raw("OPENAI_API_KEY") or "",
            model_base_url=read.str("OPENAI_BASE_URL"),
            s3_endpoint_url=read.str("AWS_ENDPOINT_URL_S3") or read.str("AWS_ENDPOINT_URL"),
            aws_region=read.str("AWS_REGION") or read.str("AWS_DEFAULT_REGION"),
            sticky_timeout_s=read.float("REWIND_STICKY_TIMEOUT_S", 2.0, minimum=0.1),
            encryption_keys=read.str("REWIND_ENCRYPTION_KEYS", ""),  # type: ignore[arg-type]
            require_encryption=read.flag("REWIND_REQUIRE_ENCRYPTION"),
            prices=read.str("REWIND_PRICES", ""),  # type: ignore[arg-type]
            secret_values={name: value for name in names if (value := read.raw(name))},
            redact_patterns=read.raw("REWIND_REDACT_PATTERNS") or "",
            max_tool_output_bytes=read.int("REWIND_MAX_TOOL_OUTPUT_BYTES", 16 * 1024 * 1024, minimum=1),
            max_arg_chars=read.int("REWIND_MAX_ARG_CHARS", 100_000, minimum=1),
            log_level=_log_level(read.str("REWIND_LOG_LEVEL", "INFO") or "INFO"),
            scripts_file=read.str("REWIND_SCRIPTS"),
            scripted_latency_ms=read.float("REWIND_SCRIPTED_LATENCY_MS", 0.0),
            scripted_tokens_per_s=_tokens_per_s(read),
            scripted_dialect=read.str("REWIND_SCRIPTED_DIALECT", "openai"),  # type: ignore[arg-type]
            health_file=Path(p) if (p := read.str("REWIND_HEALTH_FILE")) else None,
            metrics_port=_port("REWIND_METRICS_PORT", read) if read.str("REWIND_METRICS_PORT") else None,
            worker_processes=read.int("REWIND_WORKER_PROCESSES", 0, minimum=1) if read.str("REWIND_WORKER_PROCESSES") else None,
            workflow_sandbox=read.flag("REWIND_WORKFLOW_SANDBOX"),
            startup_wait_s=read.float("REWIND_STARTUP_WAIT_S", 60.0),
            debug=read.flag("REWIND_DEBUG"),
            tracing=bool(read.str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or read.str("OTEL_EXPORTER_OTLP_ENDPOINT"))
            and not read.flag("OTEL_SDK_DISABLED"),
            otel_service_name=read.str("OTEL_SERVICE_NAME"),
            otel_protocol=_otlp_protocol(read),
            mcp_config=read.str("REWIND_MCP_CONFIG"),
            approve_destructive=read.flag("REWIND_APPROVE_DESTRUCTIVE"),
            api_key=read.raw("REWIND_API_KEY") or "",
            serve_auth=read.str("REWIND_SERVE_AUTH"),
            environ=dict(env),
        )

    def mcp_servers(self) -> list[Any]:
        """The MCP servers of the configured file (activities.tools.mcp.config.McpServerConfig), or none."""
        if not self.mcp_config:
            return []
        from rewind.settings.mcp import parse_mcp_config

        environ = self.environ or dict(os.environ)
        return parse_mcp_config(Path(self.mcp_config), environ, setting=self.mcp_config_source)

    @property
    def offline_model(self) -> bool:
        """No OPENAI_API_KEY: the worker answers model calls from the scripted offline model."""
        return not self.model_api_key

    @property
    def model_endpoint_url(self) -> str:
        """The base URL model calls go to (given explicitly to the openai client)."""
        return self.model_base_url or OPENAI_DEFAULT_BASE_URL

    @property
    def live_dir(self) -> Path:
        """Where this machine's workers announce their event hubs (REWIND_EVENTS=local): beside a
        folder or SQLite store (`live/` next to it: every process of this machine that uses the
        store finds them, whatever its own folder), else under REWIND_HOME."""
        where = _store_url("REWIND_STORE", self.store_url)
        if where.kind in ("file", "sqlite") and where.path:
            return Path(where.path).parent / "live"
        return self.home / "live"

    @property
    def worker_health_file(self) -> Path:
        # One file per task queue: two workers of different queues in one folder
        # (the README's own try-your-tools setup) must not report for each other.
        queue = re.sub(r"[^A-Za-z0-9._-]", "_", self.task_queue)
        return self.health_file or self.home / f"worker-health.{queue}.json"

    def redactor(self, extra_secrets: Mapping[str, str] | None = None) -> Any:
        """The Redactor for these settings: the REWIND_SECRET_ENV values, `extra_secrets`
        (the worker adds the model key in use), the Temporal API key, built-in and configured patterns."""
        from activities.record.redaction import Redactor, parse_patterns

        found = dict(self.secret_values)
        extra_secrets = {**self.temporal.secrets(), **(extra_secrets or {})}
        found.update({k: v for k, v in extra_secrets.items() if v and v not in found.values()})
        return Redactor.build(found, parse_patterns(self.redact_patterns))


def lend_offline_model(base_url: str) -> None:
    """The user's own code in a worker (a graph module's `ChatOpenAI()`, a tool's OpenAI client)
    reaches the scripted offline model as it would reach OpenAI: OPENAI_BASE_URL is the model's
    address and OPENAI_API_KEY a placeholder (the worker is offline: it has no key). Written
    once, in the worker's process only, after its settings were read."""
    os.environ["OPENAI_BASE_URL"] = base_url
    os.environ.setdefault("OPENAI_API_KEY", "rewind-offline-model")


__all__ = ["Settings", "drop_empty_library_variables", "lend_offline_model", "skip_pydantic_plugins", "OPENAI_DEFAULT_BASE_URL", "DEFAULT_SECRET_ENV"]
