"""Secrets at rest and tokens.

- Values we must read back (webhook secrets, TOTP seeds) are encrypted with AES-256-GCM under a
  key derived from the operator key (``COCKPIT_SECRET_KEY``) with HKDF, one key per purpose.
- Values we only compare (session cookies, API tokens, sign-in links) are stored as SHA-256
  hashes: they are long random strings, so a plain hash is enough and lookups stay indexed.
- Passwords use argon2id.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_hasher = PasswordHasher()
_VERSION = "v1"


class SecretUnavailable(Exception):
    """An encrypted value cannot be decrypted (wrong operator key, or damaged)."""


def _derive(operator_key: str, purpose: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"lifecycle-cockpit", info=purpose.encode()).derive(
        operator_key.encode()
    )


def encrypt(operator_key: str, purpose: str, plaintext: str) -> str:
    nonce = os.urandom(12)
    sealed = AESGCM(_derive(operator_key, purpose)).encrypt(nonce, plaintext.encode(), purpose.encode())
    return f"{_VERSION}.{base64.urlsafe_b64encode(nonce + sealed).decode()}"


def decrypt(operator_key: str, purpose: str, token: str) -> str:
    try:
        version, payload = token.split(".", 1)
        if version != _VERSION:
            raise ValueError(version)
        raw = base64.urlsafe_b64decode(payload.encode())
        return AESGCM(_derive(operator_key, purpose)).decrypt(raw[:12], raw[12:], purpose.encode()).decode()
    except Exception as exc:
        raise SecretUnavailable(f"cannot decrypt {purpose} secret") from exc


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(prefix: str = "", nbytes: int = 32) -> str:
    return prefix + secrets.token_urlsafe(nbytes)


def sign(operator_key: str, purpose: str, value: str) -> str:
    """A keyed digest (CSRF tokens are derived from the session this way, not stored)."""
    key = _derive(operator_key, purpose)
    return hmac.new(key, value.encode(), hashlib.sha256).hexdigest()


def constant_time_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    if not password_hash:
        # Spend the same time as a real check, so unknown accounts are not told apart.
        try:
            _hasher.verify(_DUMMY_HASH, password)
        except (VerificationError, InvalidHashError):
            pass
        return False
    try:
        return _hasher.verify(password_hash, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


_DUMMY_HASH = _hasher.hash("dummy-password-for-timing")
