"""API tokens: 'fmb_<id>_<secret>', shown once; only a salted PBKDF2-SHA256 hash of the secret is stored."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

ITERATIONS = 60_000
TOKEN_RE = re.compile(r"^fmb_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")


def new_token() -> tuple[str, str]:
    """(token id, the whole token): the id is the lookup key, the rest a 256-bit secret."""
    token_id = secrets.token_hex(6)
    return token_id, f"fmb_{token_id}_{secrets.token_urlsafe(32)}"


def hash_token(token: str, iterations: int = ITERATIONS) -> str:
    """'pbkdf2_sha256$<iterations>$<salt hex>$<hash hex>' of a token, with a fresh 16-byte salt."""
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", token.encode("utf-8"), salt, iterations)
    return f"pbkdf2_sha256${iterations}${salt.hex()}${digest.hex()}"


def check_token(token: str, stored: str) -> bool:
    """Whether `token` hashes to `stored` (constant-time comparison)."""
    try:
        scheme, iterations, salt, digest = stored.split("$")
        if scheme != "pbkdf2_sha256":
            return False
        again = hashlib.pbkdf2_hmac("sha256", token.encode("utf-8"), bytes.fromhex(salt), int(iterations))
    except ValueError:
        return False
    return hmac.compare_digest(again.hex(), digest)


def token_id(token: str) -> str | None:
    """The id part of a well-formed token, else None."""
    m = TOKEN_RE.match(token)
    return m.group(1) if m else None
