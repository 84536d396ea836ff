"""What the AWS-backed stores (S3, DynamoDB) share: the store's prefix, one lazily
created aioboto3 client reused for every call, closing, and reading error codes.

One client per store (creating a client per call costs a credential lookup and a
new connection pool). Retries inside botocore are kept to one (``max_attempts=2``
tries in all): the caller, usually a Temporal activity, owns retrying, and two
stacked retry layers multiply delays.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import aioboto3
import aiohttp
from botocore.exceptions import BotoCoreError, ClientError

from workflows.errors import ConfigError, InvalidIdError

from checkpoint_bridge.stores.contract import check_key

__all__ = ["AwsClientStore", "LIBRARY_ERRORS", "error_code"]

# What a botocore call can raise besides our own errors: mapped by each store's _map.
LIBRARY_ERRORS = (ClientError, BotoCoreError, aiohttp.ClientError, asyncio.TimeoutError, OSError)


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class AwsClientStore:
    """The shared half of an AWS store: `service`'s client for `endpoint_url`, under `prefix`."""

    service = ""  # "s3" | "dynamodb"
    prefix_kind = ""  # for messages: "S3 prefix", "DynamoDB store prefix"

    def _setup(self, prefix: str, endpoint_url: str | None, region_name: str | None,
               session: aioboto3.Session | None) -> str:
        """The checked prefix; sets the endpoint, session and client slots."""
        prefix = prefix.strip("/")
        if prefix:
            try:
                check_key(prefix)
            except InvalidIdError as exc:
                raise ConfigError(
                    f"{self.prefix_kind} {prefix!r} is unsafe; use '/'-separated segments of "
                    "A-Z a-z 0-9 . _ - that start with a letter or digit, without '..'"
                ) from exc
        # Given explicitly (Settings reads AWS_ENDPOINT_URL): None is AWS itself.
        self.endpoint_url = endpoint_url or None
        self._session = session or aioboto3.Session(region_name=region_name or None)
        self._stack: AsyncExitStack | None = None
        self._client: Any = None
        self._lock = asyncio.Lock()
        return prefix

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, endpoint_url={self.endpoint_url!r})"  # type: ignore[attr-defined]

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def _aws(self, config: Any) -> Any:
        """The store's client, created on first use."""
        async with self._lock:
            if self._client is None:
                stack = AsyncExitStack()
                client = self._session.client(self.service, endpoint_url=self.endpoint_url, config=config)
                self._client = await stack.enter_async_context(client)
                self._stack = stack
        return self._client

    def _where(self) -> str:
        return f"{self.url} (endpoint {self.endpoint_url or 'AWS default'})"  # type: ignore[attr-defined]
