"""The behavioural suite every ``ObjectStore`` backend passes (the contract in contract.py).

Rewind's own backends run it in its tests; a third party runs it against
theirs, with or without pytest::

    from checkpoint_bridge.stores import conformance

    subject = conformance.Subject(
        name="mine",
        new_store=lambda: MyStore(fresh_namespace()),   # a fresh, empty store
        reopen=lambda s: MyStore(s.namespace),          # the same location, as another process opens it
        unreachable=lambda: MyStore(dead_server),       # optional: a store whose server is down
    )
    report = await conformance.validate(subject)
    print(report.text())
    assert report.passed

Each check is a plain coroutine ``check_*(subject)`` (listed in ``CHECKS``)
that raises ``ConformanceError`` saying which guarantee failed, so a test
runner can also run them one by one. Stores a check opens are closed by it.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from workflows.vocabulary.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    InvalidIdError,
    StoreUnavailableError,
)

from checkpoint_bridge.stores.contract import ObjectStore

__all__ = ["Subject", "ConformanceError", "Report", "CHECKS", "validate"]

Opener = Callable[[], "ObjectStore | Awaitable[ObjectStore]"]


class ConformanceError(AssertionError):
    """A backend broke one guarantee of the contract."""


@dataclass
class Subject:
    """The backend under test, as the suite opens it."""

    name: str
    new_store: Opener
    """A fresh, empty store (its own folder / prefix / schema / table)."""
    reopen: Callable[[ObjectStore], "ObjectStore | Awaitable[ObjectStore]"]
    """Another store on the same location as the one given (own connections), as a second process opens it."""
    unreachable: Opener | None = None
    """A store whose backend is down or unusable; None skips the checks of failures."""
    many: int = 1050
    """How many keys the listing check writes (more than a 1,000-key page)."""
    large: int = 5 * 1024 * 1024
    """The size of the large object the bytes check writes."""
    unreachable_within_s: float = 15.0
    """How soon an operation on an unreachable store must fail."""
    reads_need_a_server: bool = True
    """False for a backend with no server (a folder): reading an unusable location
    finds nothing (CheckpointNotFoundError, an empty listing) rather than failing."""
    _opened: list[ObjectStore] = field(default_factory=list, repr=False)

    async def open(self) -> ObjectStore:
        return await self._track(self.new_store())

    async def twin(self, store: ObjectStore) -> ObjectStore:
        return await self._track(self.reopen(store))

    async def down(self) -> ObjectStore:
        assert self.unreachable is not None
        return await self._track(self.unreachable())

    async def _track(self, made: Any) -> ObjectStore:
        store = await made if inspect.isawaitable(made) else made
        self._opened.append(store)
        return store

    async def close_all(self) -> None:
        opened, self._opened = self._opened, []
        for store in opened:
            try:
                await store.aclose()
            except Exception:  # noqa: BLE001 - closing must not hide the check's own result
                pass


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceError(message)


async def _raises(error: type[BaseException], call: Awaitable[Any], what: str) -> BaseException:
    try:
        result = await call
    except error as exc:
        return exc
    except Exception as exc:  # noqa: BLE001
        raise ConformanceError(f"{what}: raised {type(exc).__name__} ({exc}), not {error.__name__}") from exc
    raise ConformanceError(f"{what}: returned {result!r}, expected {error.__name__}")


# -- the checks ---------------------------------------------------------------


async def check_missing_key_is_not_found(subject: Subject) -> None:
    """Guarantee 7: a key that was never written reads as CheckpointNotFoundError."""
    store = await subject.open()
    await _raises(CheckpointNotFoundError, store.get("runs/r/never.json"), "get of a missing key")
    _expect(await store.list("") == [], "a fresh store lists keys")


async def check_conditional_create(subject: Subject) -> None:
    """Guarantee 2: True, then False for the same bytes, then a refusal for others; the first bytes stay."""
    store = await subject.open()
    _expect(await store.put_if_absent("a/b.json", b"one") is True, "the first put_if_absent did not return True")
    _expect(await store.put_if_absent("a/b.json", b"one") is False, "the same bytes again did not return False")
    await _raises(CheckpointExistsError, store.put_if_absent("a/b.json", b"two"), "other bytes under an existing key")
    _expect(await store.get("a/b.json") == b"one", "a refused write changed the stored object")
    twin = await subject.twin(store)
    await _raises(CheckpointExistsError, twin.put_if_absent("a/b.json", b"three"), "other bytes from a second store")
    _expect(await store.get("a/b.json") == b"one", "a second store's refused write changed the object")


async def check_racing_writers_one_wins(subject: Subject) -> None:
    """Guarantee 2: writers racing on one key with different bytes: exactly one succeeds."""
    store = await subject.open()
    writers = [await subject.twin(store) for _ in range(8)]
    for round_ in range(3):
        key = f"race/{round_}.json"
        outcomes = await asyncio.gather(
            *(w.put_if_absent(key, f"writer {i}".encode()) for i, w in enumerate(writers)), return_exceptions=True,
        )
        winners = [i for i, o in enumerate(outcomes) if o is True]
        others = [o for o in outcomes if o is not True]
        _expect(len(winners) == 1, f"{len(winners)} of 8 racing writers of {key} succeeded: {outcomes}")
        _expect(all(isinstance(o, CheckpointExistsError) for o in others),
                f"a losing writer of {key} did not get CheckpointExistsError: {others}")
        _expect(await store.get(key) == f"writer {winners[0]}".encode(), f"{key} does not hold the winner's bytes")
    # The same bytes from every writer: all succeed (one True, the rest False), one object.
    outcomes = await asyncio.gather(*(w.put_if_absent("race/same.json", b"same") for w in writers),
                                    return_exceptions=True)
    _expect(set(map(repr, outcomes)) <= {"True", "False"} and True in outcomes,
            f"racing writers of identical bytes: {outcomes}")
    _expect(await store.list("race/") == ["race/0.json", "race/1.json", "race/2.json", "race/same.json"],
            "racing writers left other keys")


async def check_read_after_write(subject: Subject) -> None:
    """Guarantee 4: another store on the same location sees a write and a delete at once."""
    store = await subject.open()
    twin = await subject.twin(store)
    for i in range(20):
        key = f"raw/{i:02d}.json"
        await store.put_if_absent(key, b"x" * i)
        _expect(await twin.get(key) == b"x" * i, f"a second store did not read {key} right after it was written")
        _expect(key in await twin.list("raw/"), f"a second store did not list {key} right after it was written")
    _expect(await store.delete("raw/05.json") is True, "delete of a written key did not return True")
    await _raises(CheckpointNotFoundError, twin.get("raw/05.json"), "a second store reading a deleted key")
    _expect("raw/05.json" not in await twin.list("raw/"), "a second store still lists a deleted key")


async def check_bytes_round_trip(subject: Subject) -> None:
    """Guarantee 5: empty, binary and large objects come back exactly."""
    store = await subject.open()
    every_byte = bytes(range(256)) * 4
    large = (b"0123456789abcdef" * (subject.large // 16 + 1))[: subject.large]
    samples = {"bytes/empty.bin": b"", "bytes/binary.bin": every_byte, "bytes/large.bin": large,
               "bytes/text.json": '{"é": "ü ✓"}'.encode()}
    for key, data in samples.items():
        _expect(await store.put_if_absent(key, data) is True, f"put_if_absent({key}) did not return True")
    twin = await subject.twin(store)
    for key, data in samples.items():
        got = await twin.get(key)
        _expect(got == data, f"{key}: {len(data)} bytes written, {len(got)} read back (or different content)")
        _expect(await store.put_if_absent(key, data) is False, f"{key}: the same bytes again did not return False")


async def check_listing(subject: Subject) -> None:
    """Guarantee 6: string-prefix matching, code-point order, the whole store for ''."""
    store = await subject.open()
    # Keys whose order differs between byte order and a locale's collation.
    keys = ["runs/a/1.json", "runs/a/2.json", "runs/a/sub/3.json", "runs/ab/x.json", "runs/a-b/y.json",
            "runs/a.b/z.json", "runs/a_b/w.json", "runs/aB/v.json", "runs/A/u.json", "runs/a0/t.json", "other.json"]
    for key in keys:
        await store.put_if_absent(key, b"{}")
    _expect(await store.list("") == sorted(keys), f"list('') is not every key in code-point order: {await store.list('')}")
    _expect(await store.list("runs/a/") == ["runs/a/1.json", "runs/a/2.json", "runs/a/sub/3.json"],
            f"list('runs/a/'): {await store.list('runs/a/')}")
    want = sorted(k for k in keys if k.startswith("runs/a"))
    _expect(await store.list("runs/a") == want, f"list('runs/a') is not a string-prefix match: {await store.list('runs/a')}")
    _expect(await store.list("runs/a_") == ["runs/a_b/w.json"], "'_' in a prefix is not taken literally")
    _expect(await store.list("nothing/") == [], "a prefix with no keys lists something")


async def check_listing_is_complete(subject: Subject) -> None:
    """Guarantee 6: a listing has no page limit."""
    store = await subject.open()
    keys = [f"many/{i:05d}.json" for i in range(subject.many)]
    gate = asyncio.Semaphore(16)

    async def put(key: str) -> None:
        async with gate:
            await store.put_if_absent(key, b"{}")

    await asyncio.gather(*(put(k) for k in keys))
    listed = await store.list("many/")
    _expect(listed == keys, f"{subject.many} keys written, {len(listed)} listed (or out of order)")
    _expect(await store.list("many/0001") == keys[10:20], "a prefix inside a large listing")


async def check_stores_are_isolated(subject: Subject) -> None:
    """Guarantee 6: two fresh stores on the backend do not see each other's keys."""
    first, second = await subject.open(), await subject.open()
    await first.put_if_absent("mine/1.json", b"first")
    _expect(await second.list("") == [], "a second fresh store lists the first one's keys")
    await _raises(CheckpointNotFoundError, second.get("mine/1.json"), "a second fresh store reading the first one's key")
    _expect(await second.put_if_absent("mine/1.json", b"second") is True, "a fresh store cannot write a key another store has")
    _expect(await first.get("mine/1.json") == b"first", "one store's write changed another's object")


async def check_delete(subject: Subject) -> None:
    """Guarantee 8: delete says whether the key was there; deleted keys can be written again."""
    store = await subject.open()
    for key in ["seg/ab/abc.json", "seg/ab/abd.json", "seg/ac/ace.json"]:
        await store.put_if_absent(key, b"{}")
    _expect(await store.delete("seg/ab/abc.json") is True, "delete of a stored key did not return True")
    await _raises(CheckpointNotFoundError, store.get("seg/ab/abc.json"), "get after delete")
    _expect(await store.delete("seg/ab/abc.json") is False, "deleting twice did not return False")
    _expect(await store.delete("seg/zz/never.json") is False, "deleting a missing key did not return False")
    _expect(await store.list("") == ["seg/ab/abd.json", "seg/ac/ace.json"], "delete removed other keys")
    _expect(await store.put_if_absent("seg/ab/abc.json", b"again") is True, "a deleted key cannot be written again")
    _expect(await store.get("seg/ab/abc.json") == b"again", "a rewritten key does not hold its new bytes")


async def check_delete_prefix(subject: Subject) -> None:
    """Guarantee 8: delete_prefix deletes exactly its prefix and refuses the empty one."""
    store = await subject.open()
    for key in ["runs/a/1.json", "runs/a/deep/2.json", "runs/ab/3.json", "runs/b/4.json"]:
        await store.put_if_absent(key, b"{}")
    await store.delete_prefix("runs/a/")
    _expect(await store.list("") == ["runs/ab/3.json", "runs/b/4.json"], f"after delete_prefix: {await store.list('')}")
    await store.delete_prefix("runs/a/")  # nothing left: harmless
    await _raises(InvalidIdError, store.delete_prefix(""), "delete_prefix('')")
    _expect(len(await store.list("")) == 2, "delete_prefix('') deleted something")


async def check_unsafe_keys_are_refused(subject: Subject) -> None:
    """Guarantee 1: unsafe keys raise InvalidIdError and write nothing."""
    store = await subject.open()
    for key in ["../outside.json", "/abs.json", "a/../b.json", "", "a//b.json", ".hidden", "a/b c.json", "a\\b.json"]:
        await _raises(InvalidIdError, store.put_if_absent(key, b"x"), f"put_if_absent({key!r})")
        await _raises(InvalidIdError, store.get(key), f"get({key!r})")
        await _raises(InvalidIdError, store.delete(key), f"delete({key!r})")
    await _raises(InvalidIdError, store.list("../"), "list('../')")
    _expect(await store.list("") == [], "an unsafe key was written")


async def check_unreachable_backend(subject: Subject) -> None:
    """Guarantee 7: a backend that is down raises StoreUnavailableError naming the store, fast."""
    if subject.unreachable is None:
        return
    store = await subject.down()
    calls = {
        "check_access": lambda: store.check_access(),
        "put_if_absent": lambda: store.put_if_absent("down/1.json", b"x"),
        "get": lambda: store.get("down/1.json"),
        "list": lambda: store.list("down/"),
        "delete": lambda: store.delete("down/1.json"),
    }
    if not subject.reads_need_a_server:
        await _raises(CheckpointNotFoundError, store.get("down/1.json"), "get on an unusable location")
        _expect(await store.list("down/") == [], "list on an unusable location found keys")
        del calls["get"], calls["list"]
    for op, call in calls.items():
        started = time.monotonic()
        exc = await _raises(StoreUnavailableError, call(), f"{op} on an unreachable store")
        took = time.monotonic() - started
        _expect(store.url in str(exc), f"{op}: the error does not name the store {store.url}: {exc}")
        _expect(took < subject.unreachable_within_s, f"{op} took {took:.1f} s to fail on an unreachable store")


async def check_aclose_twice(subject: Subject) -> None:
    """Guarantee 9: aclose may be called more than once."""
    made = subject.new_store()
    store: ObjectStore = await made if inspect.isawaitable(made) else made  # not tracked: closed here
    await store.put_if_absent("closing/1.json", b"{}")
    await store.aclose()
    await store.aclose()


CHECKS: list[Callable[[Subject], Awaitable[None]]] = [
    check_missing_key_is_not_found,
    check_conditional_create,
    check_racing_writers_one_wins,
    check_read_after_write,
    check_bytes_round_trip,
    check_listing,
    check_listing_is_complete,
    check_stores_are_isolated,
    check_delete,
    check_delete_prefix,
    check_unsafe_keys_are_refused,
    check_unreachable_backend,
    check_aclose_twice,
]


async def run_check(subject: Subject, check: Callable[[Subject], Awaitable[None]]) -> None:
    """One check, closing every store it opened."""
    try:
        await check(subject)
    finally:
        await subject.close_all()


@dataclass
class Report:
    """What ``validate`` found: check name -> None (passed) or the failure."""

    subject: str
    results: dict[str, str | None]

    @property
    def passed(self) -> bool:
        return all(r is None for r in self.results.values())

    def text(self) -> str:
        lines = [f"object-store conformance: {self.subject}"]
        for name, failure in self.results.items():
            lines.append(f"  {'PASS' if failure is None else 'FAIL'} {name}" + ("" if failure is None else f": {failure}"))
        passed = sum(r is None for r in self.results.values())
        lines.append(f"  {passed} of {len(self.results)} checks passed")
        return "\n".join(lines)


async def validate(subject: Subject, checks: list[Callable[[Subject], Awaitable[None]]] | None = None) -> Report:
    """Run every check (or the given ones) against the subject."""
    results: dict[str, str | None] = {}
    for check in checks or CHECKS:
        try:
            await run_check(subject, check)
            results[check.__name__] = None
        except ConformanceError as exc:
            results[check.__name__] = str(exc)
        except Exception as exc:  # noqa: BLE001 - an unexpected error is a failure of that check
            results[check.__name__] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
    return Report(subject.name, results)
