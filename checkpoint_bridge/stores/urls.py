"""Opening an object store from a ``REWIND_STORE`` / ``REWIND_PAYLOADS`` URL.

The backend modules are imported only when a URL names them, so a process
whose store is a folder never loads an S3 client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

from workflows.vocabulary.errors import ConfigError

from checkpoint_bridge.stores.contract import ObjectStore

__all__ = ["ACCEPTED_URLS", "StoreLocation", "parse_store_url", "open_object_store"]

ACCEPTED_URLS = ("file://relative/path, file:///absolute/path, a bare path, s3://bucket[/prefix], "
                 "sqlite:///absolute/file.db (sqlite://relative/file.db), "
                 "postgresql://user@host:port/database[?schema=name], dynamodb://table[/prefix], "
                 "or redis://host:port/db (only with REWIND_ALLOW_REDIS_STORE=1; REWIND_HOT_STORE puts Redis in front)")


@dataclass(frozen=True)
class StoreLocation:
    """A parsed store URL: an S3 bucket and prefix, or a local folder."""

    kind: str  # "s3" | "file" | "sqlite" | "postgresql" | "dynamodb" | "redis"  (bucket: the table for dynamodb)
    bucket: str = ""
    prefix: str = ""
    path: str = ""
    url: str = ""  # postgresql, redis: the whole URL (with its password, if any)


# The backends whose URL carries no options: a query is not theirs to read (a PostgreSQL URL's
# goes to the store and libpq, a Redis URL's to the store and redis-py). What it tried to say,
# a region, an endpoint, credentials, goes in the environment, where the AWS clients read it.
_NO_QUERY = {"s3": ("an S3", "s3://bucket[/prefix]"), "dynamodb": ("a DynamoDB", "dynamodb://table[/prefix]"),
             "sqlite": ("a SQLite", "sqlite:///path/file.db"), "file": ("a folder", "file://path")}
_AWS = ("s3", "dynamodb")
_AWS_VARIABLES = {
    "region": "AWS_REGION", "region_name": "AWS_REGION", "aws_region": "AWS_REGION",
    "endpoint": "AWS_ENDPOINT_URL", "endpoint_url": "AWS_ENDPOINT_URL", "aws_endpoint_url": "AWS_ENDPOINT_URL",
    "profile": "AWS_PROFILE", "aws_profile": "AWS_PROFILE",
    "access_key": "AWS_ACCESS_KEY_ID", "access_key_id": "AWS_ACCESS_KEY_ID", "aws_access_key_id": "AWS_ACCESS_KEY_ID",
    "secret_key": "AWS_SECRET_ACCESS_KEY", "secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
}
# Parameters whose value the message shows; any other's may be a secret, and is left out.
_SHOWN = {"AWS_REGION", "AWS_ENDPOINT_URL", "AWS_PROFILE"}


def _refuse_query(url: str, kind: str) -> None:
    """The one rule for every backend of ``_NO_QUERY``: a URL with a query is refused,
    naming the query and, for S3 and DynamoDB, the variable each parameter belongs in."""
    base, mark, query = url.partition("?")
    if not mark:
        return
    backend, usage = _NO_QUERY[kind]
    shown, moves = [], []
    for name, value in parse_qsl(query, keep_blank_values=True) or [(query, "")]:
        variable = _AWS_VARIABLES.get(name.lower()) if kind in _AWS else None
        visible = variable in _SHOWN
        shown.append(f"{name}={value}" if visible else f"{name}=..." if value else name)
        if variable is not None:
            moves.append(f"{variable}={value}" if visible else variable)
    if moves:
        fix = f"set {', '.join(dict.fromkeys(moves))} in the environment instead"
    elif kind in _AWS:
        fix = "its settings are environment variables (AWS_REGION, AWS_ENDPOINT_URL, AWS_PROFILE, ...)"
    else:
        fix = "it takes no options"
    raise ConfigError(f"store URL {base!r} with ?{'&'.join(shown)}: {backend} store reads no query; {fix}; "
                      f"use {usage}")


def parse_store_url(url: str) -> StoreLocation:
    """The one parser of ``REWIND_STORE`` / ``REWIND_PAYLOADS`` URLs (see ``ACCEPTED_URLS``)."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"store URL {url!r} is empty; use {ACCEPTED_URLS}")
    kind = next((k for k in _NO_QUERY if url.startswith(f"{k}://")), None)
    if kind is not None:
        _refuse_query(url, kind)
    if url.startswith("s3://"):
        bucket, _, prefix = url[len("s3://"):].partition("/")
        if not bucket:
            raise ConfigError(f"store URL {url!r} names no bucket; use s3://bucket[/prefix]")
        return StoreLocation("s3", bucket=bucket, prefix=prefix.strip("/"))
    if url.startswith("dynamodb://"):
        table, _, prefix = url[len("dynamodb://"):].partition("/")
        if not table:
            raise ConfigError(f"store URL {url!r} names no table; use dynamodb://table[/prefix]")
        return StoreLocation("dynamodb", bucket=table, prefix=prefix.strip("/"))
    if url.startswith(("postgresql://", "postgres://")):
        rest = url.split("://", 1)[1]
        host = rest.split("/", 1)[0].rpartition("@")[2]
        if not host or "/" not in rest or not rest.split("/", 1)[1].split("?", 1)[0]:
            raise ConfigError(f"store URL {_redacted(url)!r} names no host or database; use "
                              "postgresql://user@host:port/database[?schema=name]")
        return StoreLocation("postgresql", url=url)
    if url.startswith(("redis://", "rediss://")):
        if not url.split("://", 1)[1].split("/", 1)[0].rpartition("@")[2]:
            raise ConfigError(f"store URL {_redacted(url)!r} names no host; use redis://host:port/db")
        return StoreLocation("redis", url=url)
    if url.startswith("sqlite://"):
        path = url[len("sqlite://"):]
        if not path or path.endswith("/"):
            raise ConfigError(f"store URL {url!r} names no database file; use sqlite:///absolute/file.db "
                              "or sqlite://relative/file.db")
        return StoreLocation("sqlite", path=path)
    if url.startswith("file://"):
        path = url[len("file://"):]
        if not path:
            raise ConfigError(f"store URL {url!r} names no folder; use {ACCEPTED_URLS}")
        return StoreLocation("file", path=path)
    if "://" in url or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", url):
        # Also `s3:/bucket` or `s3//bucket`-like typos that would otherwise be a local folder named "s3:".
        raise ConfigError(f"store URL {url!r} has an unsupported scheme (or a typo in one); use {ACCEPTED_URLS}")
    if url.startswith(("s3/", "s3:")) or url.split("/", 1)[0] in {"s3", "file", "sqlite", "postgresql", "postgres", "dynamodb", "redis"}:
        raise ConfigError(f"store URL {url!r} looks like a mistyped s3:// or file:// URL; use {ACCEPTED_URLS}")
    return StoreLocation("file", path=url)


def open_object_store(url: str, *, endpoint_url: str | None = None, region_name: str | None = None) -> ObjectStore:
    """Open the store a ``REWIND_STORE``-style URL points at (see ``ACCEPTED_URLS``).

    S3 talks to ``endpoint_url`` (MinIO, a local S3 server; None: AWS) and
    takes its credentials from botocore's usual chain.
    """
    where = parse_store_url(url)
    if where.kind == "s3":
        from checkpoint_bridge.stores.s3 import S3ObjectStore

        try:
            return S3ObjectStore(where.bucket, where.prefix, endpoint_url=endpoint_url, region_name=region_name)
        except ConfigError as exc:
            raise ConfigError(f"store URL {url!r} is not usable: {exc}") from exc
    if where.kind == "dynamodb":
        from checkpoint_bridge.stores.dynamodb import DynamoObjectStore

        try:
            return DynamoObjectStore(where.bucket, where.prefix, endpoint_url=endpoint_url, region_name=region_name)
        except ConfigError as exc:
            raise ConfigError(f"store URL {url!r} is not usable: {exc}") from exc
    if where.kind == "postgresql":
        from checkpoint_bridge.stores.postgres import PostgresObjectStore

        try:
            return PostgresObjectStore(where.url)
        except ConfigError as exc:
            raise ConfigError(f"store URL {_redacted(url)!r} is not usable: {exc}") from exc
    if where.kind == "redis":
        from checkpoint_bridge.stores.redis import RedisObjectStore

        try:
            return RedisObjectStore(where.url)
        except ConfigError as exc:
            raise ConfigError(f"store URL {_redacted(url)!r} is not usable: {exc}") from exc
    if where.kind == "sqlite":
        from checkpoint_bridge.stores.sqlite import SqliteObjectStore

        return SqliteObjectStore(Path(where.path))
    from checkpoint_bridge.stores.folder import FileObjectStore

    return FileObjectStore(Path(where.path))


def _redacted(url: str) -> str:
    """The URL without the password of its user (for messages)."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.partition("@")
    if not sep or not at or ":" not in userinfo.split("/", 1)[0]:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"
