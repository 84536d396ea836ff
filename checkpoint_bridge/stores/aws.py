"""What the AWS-backed stores (S3, DynamoDB) share: the store's prefix, one lazily
created client reused for every call, closing, and reading error codes.

One client per store (creating a client per call costs a credential lookup and a
new connection pool). Retries inside botocore are kept to one (``max_attempts=2``
tries in all): the caller, usually a Temporal activity, owns retrying, and two
stacked retry layers multiply delays.

A store instance is cheap to create. Its session is aiobotocore's own (aioboto3's
adds resources and S3 transfer helpers the stores do not use, and the import of
boto3); every session of the process shares one botocore data loader, so the
service models and endpoint rules are parsed once per process, not per store
(~120 ms each); and every client shares one TLS context per CA bundle, which
aiobotocore otherwise loads for each client, even for a plain-HTTP endpoint
(~70 ms). Credentials are still resolved per store, as before.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.httpsession import AIOHTTPSession
from aiobotocore.session import AioSession
from botocore.exceptions import BotoCoreError, ClientError
from botocore.httpsession import create_urllib3_context, get_cert_path
from botocore.loaders import Loader, create_loader

from workflows.vocabulary.errors import ConfigError, InvalidIdError

from checkpoint_bridge.stores.contract import check_key

if TYPE_CHECKING:
    import aioboto3

__all__ = ["AwsClientStore", "LIBRARY_ERRORS", "error_code", "client_config"]

# What a botocore call can raise besides our own errors: mapped by each store's _map.
LIBRARY_ERRORS = (ClientError, BotoCoreError, aiohttp.ClientError, asyncio.TimeoutError, OSError)

_shared_lock = threading.Lock()
_loader: Loader | None = None
_tls: dict[Any, ssl.SSLContext] = {}


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _shared_loader() -> Loader:
    global _loader
    with _shared_lock:
        if _loader is None:
            _loader = create_loader()
        return _loader


class _SharedTLSSession(AIOHTTPSession):
    """aiobotocore's HTTP session, with the TLS context (the CA bundle loaded) made once per
    process for each ``verify`` setting and shared by every client, as one client's
    connections already share it. A proxy or a client certificate: aiobotocore's own way."""

    def _create_connector(self, proxy_url: str | None) -> aiohttp.TCPConnector:
        verify = getattr(self, "_verify", None)
        options = (getattr(self, "_max_pool_connections", None), getattr(self, "_connector_args", None))
        if proxy_url or not verify or getattr(self, "_cert_file", True) is not None or None in options:
            return super()._create_connector(proxy_url)
        with _shared_lock:
            context = _tls.get(verify)
            if context is None:
                context = create_urllib3_context()
                context.load_verify_locations(get_cert_path(verify), None, None)
                _tls[verify] = context
        return aiohttp.TCPConnector(limit=options[0], ssl=context, **options[1])


def client_config(**options: Any) -> AioConfig:
    """A client configuration (botocore's ``Config`` options) for the stores' clients."""
    return AioConfig(http_session_cls=_SharedTLSSession, **options)


class AwsClientStore:
    """The shared half of an AWS store: `service`'s client for `endpoint_url`, under `prefix`."""

    service = ""  # "s3" | "dynamodb"
    prefix_kind = ""  # for messages: "S3 prefix", "DynamoDB store prefix"

    def _setup(self, prefix: str, endpoint_url: str | None, region_name: str | None,
               session: aioboto3.Session | AioSession | None) -> str:
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
        self._session: Any = session
        if session is None:
            self._session = AioSession()
            self._session.register_component("data_loader", _shared_loader())
            if region_name:
                self._session.set_config_variable("region", region_name)
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
                # An aioboto3 session (given by the caller) makes clients with `client`, ours with `create_client`.
                make = getattr(self._session, "create_client", None) or self._session.client
                client = make(self.service, endpoint_url=self.endpoint_url, config=config)
                self._client = await stack.enter_async_context(client)
                self._stack = stack
        return self._client

    def _where(self) -> str:
        return f"{self.url} (endpoint {self.endpoint_url or 'AWS default'})"  # type: ignore[attr-defined]
