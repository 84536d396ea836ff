"""The S3 object store (AWS S3, MinIO, or any S3-compatible server).

Immutable writes use a conditional put (``If-None-Match: *``): S3 itself
refuses the second writer with 412, and only then do we read the object back
to tell an idempotent re-write (same bytes) from a conflict. The client, its
retries and closing are shared with the DynamoDB store (aws.py).
"""

from __future__ import annotations

import asyncio
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

__all__ = ["S3ObjectStore"]

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_NOT_FOUND = {"NoSuchKey", "NotFound", "404"}
_DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "403"}


class S3ObjectStore(AwsClientStore):
    """Objects under ``s3://bucket/prefix/``."""

    service = "s3"
    prefix_kind = "S3 prefix"

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        *,
        region_name: str | None = None,
        max_attempts: int = 2,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        list_page_size: int = 1000,
        session: aioboto3.Session | None = None,
    ) -> None:
        if not _BUCKET.fullmatch(bucket):
            raise ConfigError(f"S3 bucket name {bucket!r} is invalid; use 3-63 characters of a-z 0-9 . -")
        self.bucket = bucket
        self.prefix = self._setup(prefix, endpoint_url, region_name, session)
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._config = client_config(
            # botocore's "max_attempts" key counts retries; "total_max_attempts" counts tries.
            retries={"mode": "standard", "total_max_attempts": max_attempts},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            # A checkpoint's chain is read with up to 32 GETs at once (chain.py);
            # botocore's default pool of 10 connections would queue them.
            max_pool_connections=32,
            # Custom endpoints (MinIO, local servers) rarely resolve bucket subdomains.
            s3={"addressing_style": "path"} if self.endpoint_url else None,
        )
        self._page_size = list_page_size

    # -- public API ---------------------------------------------------------

    async def get(self, key: str) -> bytes:
        s3 = await self._s3()
        try:
            response = await s3.get_object(Bucket=self.bucket, Key=self._key(key))
            async with response["Body"] as body:
                return await body.read()
        except _LIBRARY_ERRORS as exc:
            raise self._map("read", key, exc) from exc

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        s3 = await self._s3()
        for attempt in range(5):
            try:
                await s3.put_object(
                    Bucket=self.bucket, Key=self._key(key), Body=data,
                    ContentType="application/json", IfNoneMatch="*",
                )
                return True
            except ClientError as exc:
                code = _code(exc)
                if code == "ConditionalRequestConflict":
                    # Another conditional write to this key is in flight; let it finish.
                    await asyncio.sleep(0.05 * (attempt + 1))
                    continue
                if code != "PreconditionFailed":
                    raise self._map("write", key, exc) from exc
            except _LIBRARY_ERRORS as exc:
                raise self._map("write", key, exc) from exc
            try:
                existing = await self.get(key)
            except CheckpointNotFoundError:
                continue  # deleted between the refusal and the read; try again
            if existing == data:
                return False
            raise CheckpointExistsError(
                f"object {key!r} in {self.url} already exists with different content; "
                "stored objects are immutable, write under a new key instead"
            )
        raise StoreUnavailableError(
            f"S3 store {self.url} kept reporting conflicting writes to {key!r}; "
            "check for another process writing the same run and retry"
        )

    async def list(self, prefix: str) -> list[str]:
        check_key(prefix, prefix=True)
        s3 = await self._s3()
        base = f"{self.prefix}/" if self.prefix else ""
        keys: list[str] = []
        # Pages followed by hand, not with botocore's paginator: its first use in a process
        # loads the paginator models from disk (a scan of botocore's data folders, ~10-20 ms),
        # a cost every cold `load` (which lists the branch's rollback markers) paid.
        page_args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": base + prefix, "MaxKeys": self._page_size}
        try:
            while True:
                page = await s3.list_objects_v2(**page_args)
                keys.extend(item["Key"][len(base):] for item in page.get("Contents", []))
                token = page.get("NextContinuationToken")
                if not page.get("IsTruncated") or not token:
                    break
                page_args["ContinuationToken"] = token
        except _LIBRARY_ERRORS as exc:
            raise self._map("list", prefix, exc) from exc
        return sorted(keys)

    async def delete_prefix(self, prefix: str) -> None:
        if not prefix:
            raise InvalidIdError(f"refusing to delete everything in {self.url}: the prefix is empty")
        keys = await self.list(prefix)
        s3 = await self._s3()
        for start in range(0, len(keys), 1000):  # the DeleteObjects limit
            batch = [{"Key": self._key(k)} for k in keys[start:start + 1000]]
            try:
                result = await s3.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
            except _LIBRARY_ERRORS as exc:
                raise self._map("delete", prefix, exc) from exc
            if result.get("Errors"):
                first = result["Errors"][0]
                raise StoreUnavailableError(
                    f"S3 store {self.url} could not delete {len(result['Errors'])} objects under "
                    f"{prefix!r} (first: {first.get('Key')}: {first.get('Code')}); "
                    "check the credentials allow s3:DeleteObject and retry"
                )

    async def delete(self, key: str) -> bool:
        # DeleteObject answers 204 whether or not the key existed: a HEAD first says which.
        s3 = await self._s3()
        full = self._key(key)
        try:
            await s3.head_object(Bucket=self.bucket, Key=full)
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                return False
            raise self._map("delete", key, exc) from exc
        except _LIBRARY_ERRORS as exc:
            raise self._map("delete", key, exc) from exc
        try:
            await s3.delete_object(Bucket=self.bucket, Key=full)
        except _LIBRARY_ERRORS as exc:
            raise self._map("delete", key, exc) from exc
        return True

    async def check_access(self) -> None:
        """One request that fails the way every later one would: unreachable
        endpoint, missing bucket, refused credentials."""
        s3 = await self._s3()
        try:
            await s3.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND | {"NoSuchBucket"}:
                raise StoreUnavailableError(
                    f"S3 bucket {self.bucket!r} does not exist at {self._where()}; "
                    "create it (aws s3 mb / mc mb) or point the store at an existing bucket", refused=True
                ) from exc
            raise self._map("access", "", exc) from exc
        except _LIBRARY_ERRORS as exc:
            raise self._map("reach", "", exc) from exc

    # -- helpers --------------------------------------------------------------

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    async def _s3(self) -> Any:
        return await self._aws(self._config)

    def _map(self, op: str, key: str, exc: BaseException) -> CheckpointError:
        """Translate a botocore / aiohttp / socket error into a Rewind error."""
        if isinstance(exc, ClientError):
            code = _code(exc)
            if code in _NOT_FOUND and op == "read":
                return CheckpointNotFoundError(f"no object {key!r} in {self.url}")
            if code == "NoSuchBucket":
                return StoreUnavailableError(
                    f"S3 bucket {self.bucket!r} does not exist at {self._where()}; "
                    "create it or point REWIND_STORE at an existing bucket", refused=True
                )
            if code in _DENIED:
                what = f"{op} {key!r}" if key else op
                return StoreUnavailableError(
                    f"S3 store {self._where()} refused to {what} ({code}); check the AWS "
                    "credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_PROFILE) and the bucket policy",
                    refused=True,
                )
            return StoreUnavailableError(
                f"S3 store {self._where()} failed to {op} {key!r} ({code}: "
                f"{exc.response.get('Error', {}).get('Message', '')}); check the service and retry"
            )
        if isinstance(exc, NoCredentialsError):
            return StoreUnavailableError(
                f"no AWS credentials found for S3 store {self._where()}; set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)", refused=True
            )
        what = f" to {op} {key!r}" if key else ""
        return StoreUnavailableError(
            f"cannot reach S3 store {self._where()}{what} ({type(exc).__name__}: {exc}); "
            "check that the S3 service is running and that AWS_ENDPOINT_URL and the network are right"
        )
