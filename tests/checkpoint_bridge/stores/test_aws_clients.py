"""A new S3 or DynamoDB store is cheap to create: every store of the process shares
one botocore data loader (service models and endpoint rules parsed once) and one
TLS context per CA bundle (loaded once), while credentials stay per store.
What is shared, not how long it takes."""

from __future__ import annotations

import ssl
import subprocess
import sys

from aiobotocore.httpsession import AIOHTTPSession

from checkpoint_bridge.stores import DynamoObjectStore, S3ObjectStore
from checkpoint_bridge.stores.aws import client_config


async def test_stores_share_the_data_loader_and_resolve_credentials_each() -> None:
    one, two = S3ObjectStore("bucket-one", "p"), DynamoObjectStore("table-two", "p")
    assert one._session is not two._session  # credentials are looked up per store, as before
    assert one._session.get_component("data_loader") is two._session.get_component("data_loader")


def test_the_stores_do_not_load_boto3() -> None:
    done = subprocess.run([sys.executable, "-c", "import sys; from checkpoint_bridge.stores.s3 import S3ObjectStore; "
                           "from checkpoint_bridge.stores.dynamodb import DynamoObjectStore; "
                           "print(sorted({'boto3', 'aioboto3'} & set(sys.modules)))"],
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


async def test_https_clients_share_one_verifying_tls_context() -> None:
    config = client_config(max_pool_connections=4)
    sessions = [config.http_session_cls(verify=True, max_pool_connections=4) for _ in range(2)]
    first, second = (s._create_connector(None) for s in sessions)
    own = AIOHTTPSession(verify=True)._create_connector(None)  # what aiobotocore makes for each client
    try:
        assert first._ssl is second._ssl and isinstance(first._ssl, ssl.SSLContext)
        assert (first._ssl.verify_mode, first._ssl.check_hostname) == (own._ssl.verify_mode, own._ssl.check_hostname)
        assert first._ssl.verify_mode == ssl.CERT_REQUIRED
        assert first._ssl.cert_store_stats() == own._ssl.cert_store_stats()  # the same CA bundle, loaded
        unverified = config.http_session_cls(verify=False)._create_connector(None)
        assert unverified._ssl is False  # verify=False stays aiobotocore's own: no TLS checks
    finally:
        for connector in (first, second, own):
            await connector.close()
