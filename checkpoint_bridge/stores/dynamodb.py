"""The DynamoDB object store: every object an item of one table.

    dynamodb://TABLE[/prefix]      (endpoint: AWS_ENDPOINT_URL, or AWS itself; region: AWS_REGION)

Table layout (created on first use, on-demand capacity, when it does not exist):
partition key ``pk`` (string), sort key ``sk`` (string, the object's key).
``pk`` is the store's prefix and the key's first two segments (``runs/RUN``),
so one run's objects share a partition and are listed by one consistent Query,
while different runs spread over partitions (one partition per store would cap
every run of a deployment at one partition's write rate). A listing whose
prefix is shorter than two whole segments (``runs/``, the empty prefix) scans.

Conditional create is ``attribute_not_exists(pk)`` on the put: DynamoDB itself
refuses the second writer, and only then is the item read back to tell an
idempotent re-write from a conflict. Reads and listings are strongly
consistent (read-after-write across processes).

Items are limited to 400 KB: a larger object is written as chunks first (items
of a partition of their own, named by the key and the content's digest, never
listed), then the object's item naming the digest, so a reader sees the whole
object or none, and a writer that crashed between the two leaves only chunks
nobody reads.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError, NoCredentialsError

from workflows.vocabulary.errors import (
    CheckpointError,
    CheckpointExistsError,
    CheckpointNotFoundError,
    ConfigError,
    InvalidIdError,
    StoreUnavailableError,
)

from checkpoint_bridge.stores.aws import LIBRARY_ERRORS as _LIBRARY_ERRORS
from checkpoint_bridge.stores.aws import AwsClientStore, client_config
from checkpoint_bridge.stores.aws import error_code as _code
from checkpoint_bridge.stores.contract import check_key

if TYPE_CHECKING:
    import aioboto3

__all__ = ["DynamoObjectStore"]

_TABLE = re.compile(r"[A-Za-z0-9_.-]{3,255}")
_DENIED = {"AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException",
           "ExpiredTokenException", "MissingAuthenticationTokenException"}
# Below DynamoDB's 400 KB item limit with room for the keys and attributes.
CHUNK_BYTES = 350_000


class DynamoObjectStore(AwsClientStore):
    """Objects as items of DynamoDB table ``table``, under ``prefix``."""

    service = "dynamodb"
    prefix_kind = "DynamoDB store prefix"

    def __init__(self, table: str, prefix: str = "", endpoint_url: str | None = None, *,
                 region_name: str | None = None, max_attempts: int = 2, connect_timeout: float = 5.0,
                 read_timeout: float = 30.0, session: aioboto3.Session | None = None) -> None:
        if not _TABLE.fullmatch(table):
            raise ConfigError(f"DynamoDB table name {table!r} is invalid; use 3-255 characters of A-Z a-z 0-9 _ . -")
        self.table = table
        self.prefix = self._setup(prefix, endpoint_url, region_name, session)
        self.url = f"dynamodb://{table}/{self.prefix}" if self.prefix else f"dynamodb://{table}"
        self._config = client_config(retries={"mode": "standard", "total_max_attempts": max_attempts},
                              connect_timeout=connect_timeout, read_timeout=read_timeout, max_pool_connections=32)
        self._table_ready = False

    # -- public API ---------------------------------------------------------

    async def get(self, key: str) -> bytes:
        db = await self._db("read", key)
        try:
            found = await db.get_item(TableName=self.table, Key=self._item_key(key), ConsistentRead=True)
        except _LIBRARY_ERRORS as exc:
            raise self._map("read", key, exc) from exc
        item = found.get("Item")
        if item is None:
            raise CheckpointNotFoundError(f"no object {key!r} in {self.url}")
        return await self._data(key, item)

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        db = await self._db("write", key)
        item: dict[str, Any] = dict(self._item_key(key))
        digest = hashlib.sha256(data).hexdigest()
        chunked = len(data) > CHUNK_BYTES
        if chunked:
            await self._write_chunks(key, digest, data)
            item.update(digest={"S": digest}, chunks={"N": str(-(-len(data) // CHUNK_BYTES))},
                        size={"N": str(len(data))})
        else:
            item["data"] = {"B": data}
        try:
            await db.put_item(TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)")
            return True
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise self._map("write", key, exc) from exc
        except _LIBRARY_ERRORS as exc:
            raise self._map("write", key, exc) from exc
        try:
            existing = await self.get(key)
        except CheckpointNotFoundError:
            return await self.put_if_absent(key, data)  # deleted between the refusal and the read
        if existing == data:
            return False
        if chunked:  # our chunks are no object's: take them back
            await self._delete_chunks(key, digest)
        raise CheckpointExistsError(f"object {key!r} in {self.url} already exists with different content; "
                                    "stored objects are immutable, write under a new key instead")

    async def list(self, prefix: str) -> list[str]:
        check_key(prefix, prefix=True)
        return sorted(item["sk"]["S"] for item in await self._items(prefix, "list"))

    async def delete_prefix(self, prefix: str) -> None:
        if not prefix:
            raise InvalidIdError(f"refusing to delete everything in {self.url}: the prefix is empty")
        check_key(prefix, prefix=True)
        for item in await self._items(prefix, "delete"):
            await self._delete_item(item["sk"]["S"], item.get("digest", {}).get("S"))

    async def delete(self, key: str) -> bool:
        db = await self._db("delete", key)
        try:
            gone = await db.delete_item(TableName=self.table, Key=self._item_key(key), ReturnValues="ALL_OLD")
        except _LIBRARY_ERRORS as exc:
            raise self._map("delete", key, exc) from exc
        old = gone.get("Attributes")
        if old and "digest" in old:
            await self._delete_chunks(key, old["digest"]["S"])
        return old is not None

    async def check_access(self) -> None:
        """One request that fails the way every later one would (and the table, created if missing)."""
        await self._db()

    # -- helpers --------------------------------------------------------------

    def _group(self, key: str) -> str:
        return f"{self.prefix}#{'/'.join(key.split('/')[:2])}"

    def _item_key(self, key: str) -> dict[str, Any]:
        check_key(key)
        return {"pk": {"S": self._group(key)}, "sk": {"S": key}}

    def _chunk_pk(self, key: str, digest: str) -> str:
        # '!' is no key character: no object's partition starts like this.
        return f"{self.prefix}!chunks!{key}!{digest}"

    async def _items(self, prefix: str, op: str) -> list[dict[str, Any]]:
        """The items (key and digest, not the data) of every object whose key starts with `prefix`."""
        db = await self._db(op, prefix)
        if prefix.count("/") >= 2:  # the first two segments are whole: one partition
            request: dict[str, Any] = dict(
                KeyConditionExpression="#pk = :pk AND begins_with(#sk, :prefix)",
                ExpressionAttributeValues={":pk": {"S": self._group(prefix)}, ":prefix": {"S": prefix}})
            operation = "query"
        else:
            filters = ["begins_with(#pk, :store)"] + (["begins_with(#sk, :prefix)"] if prefix else [])
            values = {":store": {"S": f"{self.prefix}#"}, **({":prefix": {"S": prefix}} if prefix else {})}
            request = dict(FilterExpression=" AND ".join(filters), ExpressionAttributeValues=values)
            operation = "scan"
        items: list[dict[str, Any]] = []
        try:
            pages = db.get_paginator(operation).paginate(
                TableName=self.table, ConsistentRead=True, ProjectionExpression="#pk, #sk, #digest",
                ExpressionAttributeNames={"#pk": "pk", "#sk": "sk", "#digest": "digest"}, **request)
            async for page in pages:
                items.extend(page.get("Items", []))
        except _LIBRARY_ERRORS as exc:
            raise self._map("list", prefix, exc) from exc
        return items

    async def _data(self, key: str, item: dict[str, Any]) -> bytes:
        if "data" in item:
            return bytes(item["data"]["B"])
        digest, count = item["digest"]["S"], int(item["chunks"]["N"])
        db = await self._db()
        parts: list[bytes] = []
        try:
            pages = db.get_paginator("query").paginate(
                TableName=self.table, ConsistentRead=True, KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": self._chunk_pk(key, digest)}})
            async for page in pages:
                parts.extend(bytes(i["data"]["B"]) for i in page.get("Items", []))
        except _LIBRARY_ERRORS as exc:
            raise self._map("read", key, exc) from exc
        data = b"".join(parts)
        if len(parts) != count or hashlib.sha256(data).hexdigest() != digest:
            raise StoreUnavailableError(f"object {key!r} in {self.url} is missing {count - len(parts)} of its "
                                        f"{count} chunks (or they do not match its digest); restore the table "
                                        "from a backup")
        return data

    async def _write_chunks(self, key: str, digest: str, data: bytes) -> None:
        db = await self._db()
        pk = self._chunk_pk(key, digest)
        for index, start in enumerate(range(0, len(data), CHUNK_BYTES)):
            try:
                await db.put_item(TableName=self.table, Item={
                    "pk": {"S": pk}, "sk": {"S": f"{index:08d}"}, "data": {"B": data[start:start + CHUNK_BYTES]}})
            except _LIBRARY_ERRORS as exc:
                raise self._map("write", key, exc) from exc

    async def _delete_chunks(self, key: str, digest: str) -> None:
        db = await self._db()
        pk = self._chunk_pk(key, digest)
        try:
            found = await db.query(TableName=self.table, ConsistentRead=True, KeyConditionExpression="pk = :pk",
                                   ExpressionAttributeValues={":pk": {"S": pk}}, ProjectionExpression="sk")
            for item in found.get("Items", []):
                await db.delete_item(TableName=self.table, Key={"pk": {"S": pk}, "sk": item["sk"]})
        except _LIBRARY_ERRORS as exc:
            raise self._map("delete", key, exc) from exc

    async def _delete_item(self, key: str, digest: str | None) -> None:
        db = await self._db()
        try:
            await db.delete_item(TableName=self.table, Key=self._item_key(key))
        except _LIBRARY_ERRORS as exc:
            raise self._map("delete", key, exc) from exc
        if digest:
            await self._delete_chunks(key, digest)

    async def _db(self, op: str = "reach", key: str = "") -> Any:
        """The client, and the table (created if missing) on first use."""
        db = await self._aws(self._config)
        if not self._table_ready:
            async with self._lock:
                if not self._table_ready:
                    await self._ensure_table(db, op, key)
                    self._table_ready = True
        return db

    async def _ensure_table(self, db: Any, op: str, key: str) -> None:
        """The table, created (on-demand capacity) when missing; racing creators wait for the one that won."""
        try:
            described = await db.describe_table(TableName=self.table)
        except ClientError as exc:
            if _code(exc) != "ResourceNotFoundException":
                raise self._map(op, key, exc) from exc
            try:
                await db.create_table(
                    TableName=self.table, BillingMode="PAY_PER_REQUEST",
                    KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                    AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                          {"AttributeName": "sk", "AttributeType": "S"}])
            except ClientError as create_exc:
                if _code(create_exc) != "ResourceInUseException":
                    raise self._map("create the table", "", create_exc) from create_exc
            except _LIBRARY_ERRORS as create_exc:
                raise self._map("create the table", "", create_exc) from create_exc
            described = None
        except _LIBRARY_ERRORS as exc:
            raise self._map(op, key, exc) from exc
        if described is not None:
            schema = {k["AttributeName"]: k["KeyType"] for k in described["Table"].get("KeySchema", [])}
            if schema != {"pk": "HASH", "sk": "RANGE"}:
                raise StoreUnavailableError(
                    f"DynamoDB table {self.table!r} at {self._where()} has the key schema {schema}, not Rewind's "
                    "(pk: HASH, sk: RANGE, both strings); point the store at another table name", refused=True)
            if described["Table"].get("TableStatus") == "ACTIVE":
                return
        for _ in range(120):  # a new table is ACTIVE within seconds
            try:
                status = (await db.describe_table(TableName=self.table))["Table"].get("TableStatus")
            except _LIBRARY_ERRORS as exc:
                raise self._map(op, key, exc) from exc
            if status == "ACTIVE":
                return
            await asyncio.sleep(0.5)
        raise StoreUnavailableError(f"DynamoDB table {self.table!r} at {self._where()} did not become ACTIVE in "
                                    "60 s; check it in the AWS console and retry")

    def _map(self, op: str, key: str, exc: BaseException) -> CheckpointError:
        """Translate a botocore / aiohttp / socket error into a Rewind error."""
        what = f"{op} {key!r}" if key else op
        if isinstance(exc, ClientError):
            code = _code(exc)
            if code in _DENIED:
                return StoreUnavailableError(
                    f"DynamoDB store {self._where()} refused to {what} ({code}); check the AWS credentials "
                    "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_PROFILE) and the IAM policy (dynamodb:GetItem, "
                    "PutItem, DeleteItem, Query, Scan, DescribeTable, CreateTable)", refused=True)
            if code in ("ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"):
                return StoreUnavailableError(f"DynamoDB store {self._where()} throttled the request to {what} "
                                             f"({code}); retry, or raise the table's capacity")
            return StoreUnavailableError(f"DynamoDB store {self._where()} failed to {what} ({code}: "
                                         f"{exc.response.get('Error', {}).get('Message', '')}); check the service "
                                         "and retry")
        if isinstance(exc, NoCredentialsError):
            return StoreUnavailableError(f"no AWS credentials found for DynamoDB store {self._where()}; set "
                                         "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)", refused=True)
        return StoreUnavailableError(
            f"cannot reach DynamoDB store {self._where()} to {what} ({type(exc).__name__}: {exc}); check that the "
            "service is running and that AWS_ENDPOINT_URL, AWS_REGION and the network are right")
