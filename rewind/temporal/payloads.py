"""Large Temporal payloads go to external storage; history keeps a reference.

Temporal refuses payloads over 2 MB and terminates histories near 50 MB. With
the SDK's ExternalStorage, any payload above `REWIND_PAYLOAD_THRESHOLD` bytes
(64 KiB by default) is written to the payload store and history holds a
~300-byte claim. The payload store is `REWIND_PAYLOADS`:

    file://path            LocalStorageDriver below, in path/temporal (embedded default .rewind/payloads)
    sqlite:///file.db      LocalStorageDriver on that SQLite store (keys temporal/...)
    s3://bucket[/prefix]   the SDK's own S3StorageDriver: content-addressed keys under
                           `v0/` at the bucket's root (the driver takes no prefix)

Client, worker and CLI must all use the same converter: `data_converter()`.
With encryption keys (rewind/temporal/encryption.py) it also encrypts every payload;
the SDK applies the codec before external storage, so offloaded payloads are
stored encrypted and history's claim points at ciphertext.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from checkpoint_bridge.stores.addressed import get_addressed, put_addressed
from checkpoint_bridge.stores import FileObjectStore, ObjectStore, open_object_store, parse_store_url
from rewind.temporal.converter import check_converter_settings
from rewind.temporal.encryption import EncryptionCodec
from workflows.vocabulary.errors import PayloadIntegrityError
from workflows.vocabulary.wire import LOCAL_PAYLOAD_DRIVER, S3_PAYLOAD_DRIVER

DEFAULT_THRESHOLD = 64 * 1024


class ReusingDataConverter(DataConverter):
    """The SDK's DataConverter, building its payload and failure converters once per class.

    With external storage on, the SDK copies the data converter (``dataclasses.replace``)
    for every payload sequence it may store, and each copy built a new pydantic payload
    converter: a new, empty type-adapter cache (so a TypeAdapter rebuilt for the same
    model again and again) and a new failure converter. Under 100 concurrent runs that was
    about a twentieth of a worker's CPU (BENCHMARKS.md section 5). Both converters are
    stateless apart from that cache, and the SDK gives a copy its serialization context
    through ``with_context`` (a new object), never by changing the shared one.
    """

    def __post_init__(self) -> None:  # noqa: D105 - see the class
        payload = _SHARED.get(("payload", self.payload_converter_class))
        if payload is None:
            payload = _SHARED[("payload", self.payload_converter_class)] = self._new_payload_converter()
        failure = _SHARED.get(("failure", self.failure_converter_class))
        if failure is None:
            failure = _SHARED[("failure", self.failure_converter_class)] = self.failure_converter_class()
        object.__setattr__(self, "payload_converter", payload)
        object.__setattr__(self, "failure_converter", failure)


_SHARED: dict[tuple[str, type], object] = {}
_SHARED_PYDANTIC: list[type] = []


def shared_pydantic_converter() -> type:
    """PydanticPayloadConverter with one instance per process, whoever builds it.

    Besides our data converter's copies (``ReusingDataConverter``), the SDK's worker makes
    a DataConverter of its own class (``_CommandAwareDataConverter``) for every workflow
    activation it decodes and every completion it encodes, and each built its payload
    converter anew: a pydantic schema serializer, a type-adapter cache and the composite
    of encodings, twice per workflow task (~1.5% of a worker's CPU under 100 runs). The
    converter is stateless but for that cache, so every one of them is the same object.
    """
    if not _SHARED_PYDANTIC:
        from temporalio.contrib.pydantic import PydanticPayloadConverter

        class SharedPydanticPayloadConverter(PydanticPayloadConverter):
            _instance: SharedPydanticPayloadConverter | None = None

            def __new__(cls) -> SharedPydanticPayloadConverter:
                if cls._instance is None:
                    cls._instance = super().__new__(cls)
                return cls._instance

            def __init__(self) -> None:
                if not self.__dict__.get("_rewind_built"):  # built once; later calls find it built
                    super().__init__()
                    self._rewind_built = True

        _SHARED_PYDANTIC.append(SharedPydanticPayloadConverter)
    return _SHARED_PYDANTIC[0]



def local_payload_key(digest: str, workflow_id: str | None = None) -> str:
    """Where LocalStorageDriver keeps the payload of claim `{"sha256": digest[, "workflow_id": id]}`."""
    if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
        raise PayloadIntegrityError(f"malformed payload claim {digest!r}")
    if workflow_id is None:  # claims written before payloads were kept by workflow
        return f"temporal/{digest[:2]}/{digest}"
    return f"{workflow_payload_prefix(workflow_id)}{digest[:2]}/{digest}"


def workflow_payload_prefix(workflow_id: str) -> str:
    """Where LocalStorageDriver keeps the payloads stored for one workflow (every run of it)."""
    if not (isinstance(workflow_id, str) and _SAFE_ID.fullmatch(workflow_id) and ".." not in workflow_id):
        raise PayloadIntegrityError(f"malformed payload claim: workflow id {workflow_id!r:.80}")
    return f"temporal/wf/{workflow_id}/"


_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


class LocalStorageDriver(StorageDriver):
    """Content-addressed payload files in a local folder (the embedded default),
    written through the same object store (and its atomic, exclusive writes) as
    the transcript segments:

        temporal/wf/<workflow id>/<2 hex>/<sha256>   a payload stored for that workflow
        temporal/<2 hex>/<sha256>                    any other (and claims from before)

    The SDK names the workflow a payload is for (its input, its activities'
    inputs and results, its queries' answers), so every payload of a workflow
    sits under its own folder, as the SDK's S3 driver keeps them under its id:
    erasing a run (rewind/erasure.py) takes its folders whole, including
    payloads no history names (the answer to a query).

    Shared by every worker on the machine; use S3 when workers run on
    several machines.
    """

    def __init__(self, root: Path | ObjectStore) -> None:
        # A folder, or any other object store of the same keys (a SQLite file).
        self._objects = FileObjectStore(root) if isinstance(root, Path) else root

    def name(self) -> str:
        return LOCAL_PAYLOAD_DRIVER

    def type(self) -> str:
        return LOCAL_PAYLOAD_DRIVER

    @staticmethod
    def _workflow_of(context: StorageDriverStoreContext) -> str | None:
        target = context.target
        wid = target.id if isinstance(target, StorageDriverWorkflowInfo) else None
        return wid if wid and _SAFE_ID.fullmatch(wid) and ".." not in wid else None

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        claims = []
        workflow_id = self._workflow_of(context)
        for payload in payloads:
            digest = await put_addressed(self._objects, lambda d: local_payload_key(d, workflow_id),
                                         payload.SerializeToString())
            claim = {"sha256": digest} if workflow_id is None else {"sha256": digest, "workflow_id": workflow_id}
            claims.append(StorageDriverClaim(claim_data=claim))
        return claims

    async def retrieve(self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        out = []
        for claim in claims:
            digest = claim.claim_data.get("sha256", "")
            key = local_payload_key(digest, claim.claim_data.get("workflow_id"))
            data = await get_addressed(self._objects, key, digest, "payload", error=PayloadIntegrityError)
            payload = Payload()
            payload.ParseFromString(data)
            out.append(payload)
        return out


def _driver(url: str, endpoint_url: str | None, region_name: str | None) -> StorageDriver:
    where = parse_store_url(url)
    if where.kind == "s3":
        import aioboto3
        from temporalio.contrib.aws.s3driver import S3StorageDriver
        from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client

        return _LazyS3Driver(where.bucket, aioboto3.Session(region_name=region_name or None), endpoint_url,
                             S3StorageDriver, new_aioboto3_client)
    if where.kind == "file":
        return LocalStorageDriver(Path(where.path))
    return LocalStorageDriver(open_object_store(url, endpoint_url=endpoint_url, region_name=region_name))


class _LazyS3Driver(StorageDriver):
    """S3StorageDriver over an aioboto3 client opened on first use (in the running loop)."""

    def __init__(self, bucket: str, session, endpoint_url, driver_cls, client_factory) -> None:  # type: ignore[no-untyped-def]
        self._bucket, self._session, self._endpoint_url = bucket, session, endpoint_url
        self._driver_cls, self._client_factory = driver_cls, client_factory
        self._driver: StorageDriver | None = None
        self._context = None

    def name(self) -> str:
        return S3_PAYLOAD_DRIVER

    def type(self) -> str:
        return S3_PAYLOAD_DRIVER

    async def _get(self) -> StorageDriver:
        if self._driver is None:
            self._context = self._session.client("s3", endpoint_url=self._endpoint_url or None)
            client = await self._context.__aenter__()
            self._driver = self._driver_cls(self._client_factory(client), bucket=self._bucket)
        return self._driver

    async def store(self, context, payloads):  # type: ignore[no-untyped-def]
        return await (await self._get()).store(context, payloads)

    async def retrieve(self, context, claims):  # type: ignore[no-untyped-def]
        return await (await self._get()).retrieve(context, claims)


def data_converter(payload_url: str, threshold: int = DEFAULT_THRESHOLD, **options: Any) -> DataConverter:
    """pydantic converter + external storage of payloads above `threshold` bytes,
    + AES-GCM encryption of every payload when `encryption_keys` are given (the options
    of `converter_factory`)."""
    return converter_factory(payload_url, threshold, **options)()


def converter_factory(
    payload_url: str,
    threshold: int = DEFAULT_THRESHOLD,
    *,
    encryption_keys: str = "",
    require_encryption: bool = False,
    s3_endpoint_url: str | None = None,
    aws_region: str | None = None,
) -> Callable[[], DataConverter]:
    """`data_converter`, checked now and built when called: whatever in the settings can be
    wrong (the payload store's driver, the keys, REWIND_REQUIRE_ENCRYPTION without keys) is
    its error here, and the call only assembles. The pydantic converter is imported by the
    call: `rewind pending` with no open run decodes nothing (rewind/temporal/connect.py)."""
    keys = check_converter_settings(payload_url, encryption_keys, require_encryption)
    driver = _driver(payload_url, s3_endpoint_url, aws_region)

    def build() -> DataConverter:
        pydantic_converter = shared_pydantic_converter()
        storage = ExternalStorage(drivers=[driver], payload_size_threshold=threshold)
        if not keys:
            return ReusingDataConverter(payload_converter_class=pydantic_converter, external_storage=storage)
        return ReusingDataConverter(
            payload_converter_class=pydantic_converter,
            external_storage=storage,
            payload_codec=EncryptionCodec(keys, require_encryption=require_encryption),
            # Failure messages and stack traces move into an encoded (so encrypted)
            # attribute; history keeps only "Encoded failure".
            failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
        )

    return build
