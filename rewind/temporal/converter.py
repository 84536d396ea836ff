"""The settings of the data converter (rewind/temporal/payloads.py), checked without building it.

A command that connects to Temporal checks REWIND_PAYLOADS and REWIND_ENCRYPTION_KEYS
at once (a wrong one is its error, not a surprise at the first payload), but builds the
converter only when it decodes something: the converter's imports (the SDK's converter
module, the pydantic payload converter, an S3 client for s3:// payloads) cost a command
like `rewind status` of a finished run, which needs none of them, a quarter of its time.
This module imports none of them.
"""

from __future__ import annotations

import base64
import binascii

from checkpoint_bridge.stores.urls import parse_store_url
from workflows.vocabulary.errors import ConfigError


def parse_keys(text: str) -> list[tuple[str, bytes]]:
    """`kid:<base64 32 bytes>,...` -> [(kid, key)], in the given order (the first encrypts)."""
    keys: list[tuple[str, bytes]] = []
    for number, entry in enumerate((part.strip() for part in text.split(",")), 1):
        if not entry:
            continue
        kid, sep, encoded = entry.partition(":")
        kid = kid.strip()
        if not sep or not kid:  # the entry itself is not echoed: it may be a bare key
            raise ConfigError(f"REWIND_ENCRYPTION_KEYS entry #{number} must be kid:<base64 of 32 bytes>")
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"REWIND_ENCRYPTION_KEYS key {kid!r} is not valid base64") from None
        if len(key) != 32:
            raise ConfigError(f"REWIND_ENCRYPTION_KEYS key {kid!r} is {len(key)} bytes; AES-256 needs 32")
        if any(kid == seen for seen, _ in keys):
            raise ConfigError(f"REWIND_ENCRYPTION_KEYS lists key id {kid!r} twice")
        keys.append((kid, key))
    return keys


def check_converter_settings(payload_url: str, encryption_keys: str, require_encryption: bool) -> list[tuple[str, bytes]]:
    """The encryption keys; a ConfigError for a payload store URL or keys that cannot work."""
    parse_store_url(payload_url)
    keys = parse_keys(encryption_keys)
    if not keys and require_encryption:
        raise ConfigError(
            "REWIND_REQUIRE_ENCRYPTION is set but REWIND_ENCRYPTION_KEYS is empty; "
            "set kid:<base64 of 32 bytes> (see rewind/temporal/encryption.py)"
        )
    return keys


__all__ = ["check_converter_settings", "parse_keys"]
