"""AES-256-GCM encryption of every Temporal payload (a PayloadCodec).

With `REWIND_ENCRYPTION_KEYS` set, workflow inputs, activity inputs and
results, queries, heartbeats and (through the failure converter with encoded
attributes, see rewind/temporal/payloads.py) failure messages and stack traces reach
the Temporal server only as ciphertext; payloads large enough for external
storage are encrypted before they are offloaded, so the payload store holds
ciphertext too.

    REWIND_ENCRYPTION_KEYS=kid2:<base64 of 32 bytes>,kid1:<...>

The first key encrypts; every listed key decrypts, so a rotation puts the new
key first and keeps the old ones until no history still needs them. An
encoded payload carries `encoding: binary/encrypted`, `encryption-key-id:
<kid>`, and data = 12-byte nonce + ciphertext of the serialized payload.
With `REWIND_REQUIRE_ENCRYPTION=1` a plaintext payload is refused on decode.

Generate a key: python -c "import os, base64; print(base64.b64encode(os.urandom(32)).decode())"
"""

from __future__ import annotations

import os
from typing import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from rewind.temporal.converter import parse_keys
from workflows.vocabulary.errors import ConfigError, PayloadEncryptionError

ENCODING = b"binary/encrypted"
KEY_ID_KEY = "encryption-key-id"
NONCE_BYTES = 12



class EncryptionCodec(PayloadCodec):
    def __init__(self, keys: Sequence[tuple[str, bytes]], *, require_encryption: bool = False) -> None:
        if not keys:
            raise ConfigError("payload encryption needs at least one key in REWIND_ENCRYPTION_KEYS")
        self._key_id = keys[0][0]
        # Imported here: every client builds its data converter, but only one with keys
        # needs the cipher (`rewind status` without encryption does not load it).
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._ciphers = {kid: AESGCM(key) for kid, key in keys}
        self._require = require_encryption

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        cipher = self._ciphers[self._key_id]
        out = []
        for payload in payloads:
            nonce = os.urandom(NONCE_BYTES)
            data = nonce + cipher.encrypt(nonce, payload.SerializeToString(), None)
            out.append(Payload(metadata={"encoding": ENCODING, KEY_ID_KEY: self._key_id.encode()}, data=data))
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decode_one(p) for p in payloads]

    def _decode_one(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            if self._require:
                raise PayloadEncryptionError(
                    f"refusing a plaintext payload (encoding {payload.metadata.get('encoding', b'').decode(errors='replace')!r}): "
                    "REWIND_REQUIRE_ENCRYPTION is set, so every payload must be encrypted; unset it to read "
                    "data written before encryption was turned on"
                )
            return payload
        kid = payload.metadata.get(KEY_ID_KEY, b"").decode(errors="replace")
        cipher = self._ciphers.get(kid)
        if cipher is None:
            raise PayloadEncryptionError(
                f"payload was encrypted with key id {kid!r}, which this process does not have "
                f"(it has: {', '.join(sorted(self._ciphers))}); add {kid}:<key> to REWIND_ENCRYPTION_KEYS"
            )
        from cryptography.exceptions import InvalidTag

        data = payload.data
        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], None)
        except InvalidTag:
            raise PayloadEncryptionError(
                f"payload encrypted with key id {kid!r} does not decrypt: the key under that id in "
                "REWIND_ENCRYPTION_KEYS is not the one it was written with, or the data was altered"
            ) from None
        out = Payload()
        out.ParseFromString(plain)
        return out


__all__ = ["EncryptionCodec", "PayloadEncryptionError", "parse_keys", "ENCODING", "KEY_ID_KEY"]
