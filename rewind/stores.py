"""The stores the settings name, opened and checked in one place.

`REWIND_STORE` (checkpoints) and `REWIND_PAYLOADS` (the live data of runs)
are opened here with the S3 endpoint and region of the settings, so no other
module needs to know where they come from. `check_stores` turns a store that
cannot work into one clear line naming the variable, before a worker starts
polling or a CLI command does anything else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkpoint_bridge.stores import ObjectStore, open_object_store, verify_store
from rewind.settings.config import Settings, StoreCompression
from workflows.vocabulary.errors import CheckpointError, ConfigError, StoreUnavailableError, StoreUnreachableError

if TYPE_CHECKING:
    from checkpoint_bridge.checkpoints.store import CheckpointStore


def object_store(settings: Settings, url: str) -> ObjectStore:
    return open_object_store(url, endpoint_url=settings.s3_endpoint_url, region_name=settings.aws_region)


def checkpoint_objects(settings: Settings, *, meter: Any = None) -> ObjectStore:
    """The objects of `REWIND_STORE`, behind the Redis hot tier of `REWIND_HOT_STORE` when it is set
    (`meter`: where the tier's flusher reports its lag, a worker's metrics)."""
    durable = object_store(settings, settings.store_url)
    if not settings.hot_store_url:
        return durable
    from checkpoint_bridge.stores.hot import HotTierObjectStore

    return HotTierObjectStore(settings.hot_store_url, durable, ttl_s=settings.hot_ttl_s, meter=meter)


def checkpoint_store(settings: Settings, *, deferred: bool = False) -> CheckpointStore:
    """The checkpoint store of `REWIND_STORE`, writing step objects as `REWIND_STORE_COMPRESSION`
    says (use as `async with`); `deferred`: built when first used (`DeferredCheckpointStore`)."""
    objects = checkpoint_objects(settings)
    if deferred:
        return DeferredCheckpointStore(objects, compression=settings.store_compression)  # type: ignore[return-value]
    from checkpoint_bridge.checkpoints.store import CheckpointStore

    return CheckpointStore(objects, compression=settings.store_compression)


class DeferredCheckpointStore:
    """The CheckpointStore of `objects`, built when first used (any attribute of a
    CheckpointStore asked of it; `objects` and `aclose` are its own). `rewind status` of a
    run whose result answers reads no checkpoint, and importing the store and its models
    would add some 30 ms to it."""

    def __init__(self, objects: ObjectStore, *, compression: StoreCompression = "gzip") -> None:
        self.objects = objects
        self._compression = compression
        self._store: CheckpointStore | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_store", "_compression"):  # copy, pickle: not the store's
            raise AttributeError(name)
        if self._store is None:
            from checkpoint_bridge.checkpoints.store import CheckpointStore

            self._store = CheckpointStore(self.objects, compression=self._compression)
        return getattr(self._store, name)

    async def aclose(self) -> None:
        await (self._store.aclose() if self._store is not None else self.objects.aclose())


def payload_store(settings: Settings) -> ObjectStore:
    """The store of `REWIND_PAYLOADS`: transcript segments and idempotency records."""
    return object_store(settings, settings.payload_url)


def _config_error(setting: str, exc: CheckpointError) -> ConfigError:
    """One line naming the setting; `StoreUnreachableError` when the store did not answer or
    failed (it may come back by itself), a plain `ConfigError` when a person must fix it."""
    heals = isinstance(exc, StoreUnavailableError) and not exc.refused
    return (StoreUnreachableError if heals else ConfigError)(f"{setting}: {exc}")


async def check_store(objects: ObjectStore, variable: str, *, probe_writes: bool = False) -> None:
    """Raise `ConfigError` (one line, naming `variable`) if the store cannot be used
    (`StoreUnreachableError` if it may heal by itself: down, timing out, failing)."""
    hot = getattr(objects, "durable", None)
    if hot is not None:  # a hot tier: the durable store behind it must keep the promises itself
        await check_store(hot, variable, probe_writes=probe_writes)
        if not probe_writes:
            return  # a command reads through a Redis that is down (from the durable store)
        try:
            await objects.redis.ping()  # type: ignore[attr-defined]
        except CheckpointError as exc:
            raise _config_error(f"REWIND_HOT_STORE={objects.redis.url}", exc) from exc  # type: ignore[attr-defined]
        return
    try:
        await verify_store(objects, probe_writes=probe_writes)
    except CheckpointError as exc:
        raise _config_error(f"{variable}={objects.url}", exc) from exc


async def check_stores(settings: Settings, *, probe_writes: bool = False) -> None:
    """Check both configured stores (a worker also probes that writes are conditional)."""
    wanted = [("REWIND_STORE", settings.store_url)]
    if settings.payload_url != settings.store_url:
        wanted.append(("REWIND_PAYLOADS", settings.payload_url))
    for variable, url in wanted:
        objects = checkpoint_objects(settings) if variable == "REWIND_STORE" else object_store(settings, url)
        try:
            await check_store(objects, variable, probe_writes=probe_writes)
        finally:
            await objects.aclose()


__all__ = ["object_store", "checkpoint_objects", "checkpoint_store", "DeferredCheckpointStore", "payload_store", "check_store", "events_bus",
           "check_stores"]


def events_bus(settings: Settings) -> Any:
    """The bus a run's live events travel on (REWIND_EVENTS; checkpoint_bridge/events/bus.py),
    for a worker that publishes or a reader."""
    from checkpoint_bridge.events.bus import open_bus

    return open_bus(settings.events_url, settings.live_dir)
