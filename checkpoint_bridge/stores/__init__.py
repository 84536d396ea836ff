"""Object stores: the contract (contract.py) and one module per backend.

    FileObjectStore(root)                      file://path or a bare path    folder.py
    S3ObjectStore(bucket, prefix, endpoint)    s3://bucket/prefix             s3.py
    SqliteObjectStore(path)                    sqlite:///path/file.db         sqlite.py
    PostgresObjectStore(url)                   postgresql://user@host/db      postgres.py
    DynamoObjectStore(table, prefix, endpoint) dynamodb://table/prefix        dynamodb.py
    RedisObjectStore(url)                      redis://host:port/db           redis.py
    HotTierObjectStore(redis_url, durable)     REWIND_HOT_STORE=redis://...   hot.py

``open_object_store(url)`` opens the one a URL names (urls.py). A backend's
module is imported when it is first named, so a folder store never loads an
S3 client.
"""

from __future__ import annotations

from typing import Any

from checkpoint_bridge.stores.contract import ObjectStore, check_key, verify_store
from checkpoint_bridge.stores.urls import ACCEPTED_URLS, StoreLocation, open_object_store, parse_store_url

__all__ = [
    "ObjectStore", "check_key", "verify_store", "ACCEPTED_URLS", "StoreLocation", "open_object_store",
    "parse_store_url", "FileObjectStore", "S3ObjectStore", "SqliteObjectStore",
    "PostgresObjectStore", "DynamoObjectStore", "RedisObjectStore", "HotTierObjectStore",
]

_BACKENDS = {
    "FileObjectStore": "checkpoint_bridge.stores.folder",
    "S3ObjectStore": "checkpoint_bridge.stores.s3",
    "SqliteObjectStore": "checkpoint_bridge.stores.sqlite",
    "PostgresObjectStore": "checkpoint_bridge.stores.postgres",
    "DynamoObjectStore": "checkpoint_bridge.stores.dynamodb",
    "RedisObjectStore": "checkpoint_bridge.stores.redis",
    "HotTierObjectStore": "checkpoint_bridge.stores.hot",
}


def __getattr__(name: str) -> Any:
    module = _BACKENDS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
