"""Signed evidence packs (`--sign-key`, `benchmark evidence verify DIR`): what a manifest proves, and who wrote it.

MANIFEST.sha256 lists every file's sha256. On its own it proves integrity against accidents (a bad copy, a truncated
transfer, a file edited by mistake): anyone who edits a file on purpose can regenerate it. A signature binds the
manifest to a key: MANIFEST.sig holds an HMAC-SHA256 (a secret shared with whoever verifies) or an Ed25519
signature (the `cryptography` package; anyone with the public key verifies, only the private key's holder signs)
of the manifest's bytes, so a changed or regenerated manifest no longer verifies without the key.

Keys are named, on the command line or in $FMB_SIGN_KEY, as `hmac:FILE` (the file's bytes, trailing whitespace
dropped, at least 16 bytes: e.g. `openssl rand -hex 32 > sign.key`) or `ed25519:FILE` (a PEM key: the private key
to sign, `openssl genpkey -algorithm ed25519 -out sign.pem`; its public key or the private key to verify, `openssl
pkey -in sign.pem -pubout -out sign.pub.pem`). A secret is never written on the command line, which the pack
records in command.txt.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from fairmedbench.engine import store
from fairmedbench.errors import InputError
from fairmedbench.spec import option

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

MANIFEST = "MANIFEST.sha256"
SIGNATURE = "MANIFEST.sig"
ENV_KEY = "FMB_SIGN_KEY"
HMAC = "hmac-sha256"
ED25519 = "ed25519"
FORMAT = "fairmedbench-evidence-signature/1"
#: what is signed: this prefix, then the manifest's bytes (a key used elsewhere cannot be replayed here)
DOMAIN = b"fairmedbench evidence manifest v1\n"
MIN_SECRET = 16
KEY_FORMS = f"hmac:FILE (a secret of at least {MIN_SECRET} bytes) or ed25519:FILE (a PEM key)"
#: what the hashes prove without a checked signature
HASHES_ONLY = ("the hashes alone show the files are as the manifest lists them (integrity against accidents: a bad "
               "copy, a truncated transfer, an edit by mistake), not who wrote them: anyone who edits a file can "
               "regenerate the manifest")
UNSIGNED = f"unsigned: {HASHES_ONLY}; sign packs with --sign-key"


@dataclass(frozen=True)
class Key:
    """A signing or verifying key: an HMAC secret, or an Ed25519 private key (signs) or public key (verifies)."""

    algorithm: str
    name: str  # as given (hmac:FILE, ed25519:FILE), for messages
    secret: bytes = field(default=b"", repr=False)
    private: Ed25519PrivateKey | None = field(default=None, repr=False)
    public: Ed25519PublicKey | None = None

    @property
    def key_id(self) -> str:
        """A short id that names the key without revealing it: HMAC of a fixed text (hmac), sha256 of the raw
        public key (ed25519)."""
        if self.algorithm == HMAC:
            return hmac.new(self.secret, b"fairmedbench key id", hashlib.sha256).hexdigest()[:16]
        return hashlib.sha256(_raw_public(self.public)).hexdigest()[:16]

    def sign(self, data: bytes) -> dict[str, str]:
        """The signature record of `data` (algorithm, key id, signature; the public key for Ed25519)."""
        if self.algorithm == HMAC:
            return {"algorithm": HMAC, "key_id": self.key_id,
                    "signature": hmac.new(self.secret, DOMAIN + data, hashlib.sha256).hexdigest()}
        if self.private is None:
            raise InputError(f"--sign-key {self.name}: a public key cannot sign; give the private key (PEM)")
        return {"algorithm": ED25519, "key_id": self.key_id,
                "public_key": base64.b64encode(_raw_public(self.public)).decode(),
                "signature": base64.b64encode(self.private.sign(DOMAIN + data)).decode()}

    def verifies(self, data: bytes, signature: str) -> bool:
        """Whether `signature` (as `sign` writes it) is this key's signature of `data`."""
        if self.algorithm == HMAC:
            return hmac.compare_digest(hmac.new(self.secret, DOMAIN + data, hashlib.sha256).hexdigest(), signature)
        from cryptography.exceptions import InvalidSignature

        assert self.public is not None, "an Ed25519 key always has its public key"
        try:
            self.public.verify(base64.b64decode(signature, validate=True), DOMAIN + data)
        except (InvalidSignature, ValueError):
            return False
        return True


def _raw_public(public: Ed25519PublicKey | None) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    assert public is not None, "an Ed25519 key always has its public key"
    return public.public_bytes(Encoding.Raw, PublicFormat.Raw)


def read_key(spec: str, flag: str = "--sign-key") -> Key:
    """The key named `hmac:FILE` or `ed25519:FILE`; a one-line InputError saying what is wrong otherwise."""
    kind, sep, path = spec.partition(":")
    if not sep or kind not in ("hmac", "ed25519") or not path:
        raise InputError(f"{flag} {spec}: name a key as {KEY_FORMS}")
    file = Path(path).expanduser()
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{flag} {spec}: {file} does not exist; give the file that holds the key") from None
    except IsADirectoryError:
        raise InputError(f"{flag} {spec}: {file} is a folder; give the file that holds the key") from None
    if kind == "hmac":
        secret = data.rstrip()
        if data.lstrip().startswith(b"-----BEGIN"):
            raise InputError(f"{flag} {spec}: {file} is a PEM key; name it as ed25519:{path}")
        if len(secret) < MIN_SECRET:
            raise InputError(f"{flag} {spec}: the secret in {file} has {len(secret)} bytes; give at least "
                             f"{MIN_SECRET} (e.g. openssl rand -hex 32 > {file})")
        return Key(HMAC, spec, secret=secret)
    return _ed25519(data, spec, flag, file)


def _ed25519(data: bytes, spec: str, flag: str, file: Path) -> Key:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_pem_public_key

    loaded: object
    try:
        if b"PUBLIC KEY-----" in data:
            loaded = load_pem_public_key(data)
        else:
            loaded = load_pem_private_key(data, password=None)
    except (ValueError, TypeError):  # not PEM, encrypted, or an unsupported key
        raise InputError(f"{flag} {spec}: {file} is not an unencrypted PEM key; make one with openssl genpkey "
                         "-algorithm ed25519 -out sign.pem") from None
    if isinstance(loaded, Ed25519PrivateKey):
        return Key(ED25519, spec, private=loaded, public=loaded.public_key())
    if isinstance(loaded, Ed25519PublicKey):
        return Key(ED25519, spec, public=loaded)
    raise InputError(f"{flag} {spec}: {file} holds a {type(loaded).__name__}, not an Ed25519 key")


def signing_key(option_value: str | None) -> Key | None:
    """The key that signs a pack: `--sign-key`, else $FMB_SIGN_KEY, else none; read (and refused) before any
    work. A public key cannot sign."""
    spec, flag = (option_value, "--sign-key") if option_value else (os.environ.get(ENV_KEY) or None, ENV_KEY)
    if spec is None:
        return None
    key = read_key(spec, flag)
    if key.algorithm == ED25519 and key.private is None:
        raise InputError(f"{flag} {spec}: a public key cannot sign; give the private key (PEM)")
    return key


def pack_key(evidence: str | None, sign_key: str | None) -> Key | None:
    """The key an evidence pack is signed with (`signing_key`), read before any work; `--sign-key` without
    `--evidence` is refused ($FMB_SIGN_KEY without it is unused)."""
    if sign_key and not evidence:
        raise InputError("--sign-key signs an evidence pack; give --evidence DIR too")
    return signing_key(sign_key) if evidence else None


def sign_manifest(folder: Path, key: Key) -> Path:
    """MANIFEST.sig: the key's signature of MANIFEST.sha256's bytes, with the manifest's sha256 and the key's id."""
    data = (folder / MANIFEST).read_bytes()
    record = {"format": FORMAT, "signed_file": MANIFEST, "manifest_sha256": hashlib.sha256(data).hexdigest(),
              **key.sign(data)}
    return store.write_json(folder / SIGNATURE, record)


@dataclass(frozen=True)
class EvidenceVerifyOptions:
    """`benchmark evidence verify DIR [--key KEY]`."""

    folder: str = field(metadata=option("the evidence pack's folder", flag="folder", metavar="DIR"))
    key: str | None = field(default=None, metadata=option(
        "the key to check MANIFEST.sig with: hmac:FILE (the signing secret) or ed25519:FILE (the public key, or the "
        "private key); without it the hashes are checked and the signature only as far as it can be", metavar="KEY"))


@dataclass
class PackCheck:
    """What `verify_pack` found: one line per problem, what the pack proves when there is none, and the files in
    the folder that are not the pack's (a user's notes beside it: never a problem, never vouched for)."""

    problems: list[str]
    proves: list[str]
    unlisted: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Every file matches the manifest, and the signature (where one was asked for or is present) verifies."""
        return not self.problems

    def lines(self) -> list[str]:
        """The lines the CLI prints: each problem and a count, or what the pack proves."""
        extra = ([f"not part of the pack (not in {MANIFEST}, so nothing here vouches for them; --force keeps them): "
                  f"{', '.join(self.unlisted)}"] if self.unlisted else [])
        if self.problems:
            return [*self.problems, *extra, f"not verified: {len(self.problems)} problem(s)"]
        return [*self.proves, *extra]


_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


def _entries(folder: Path, problems: list[str]) -> dict[str, str]:
    """The manifest's entries (relative path -> sha256); malformed lines and paths outside the folder are
    problems."""
    entries: dict[str, str] = {}
    for n, line in enumerate((folder / MANIFEST).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        match = _LINE.match(line)
        if match is None:
            problems.append(f"{MANIFEST} line {n}: not '<sha256>  <path>': {line[:80]!r}")
            continue
        digest, rel = match.groups()
        parts = PurePosixPath(rel).parts
        if PurePosixPath(rel).is_absolute() or ".." in parts or rel in (MANIFEST, SIGNATURE):
            problems.append(f"{MANIFEST} line {n}: {rel!r} is not a file of this pack")
        elif rel in entries:
            problems.append(f"{MANIFEST} line {n}: {rel} is listed twice")
        else:
            entries[rel] = digest
    return entries


def _check_files(folder: Path, entries: dict[str, str], problems: list[str]) -> list[str]:
    """Each listed file present and unchanged (else a problem); returns the files the manifest does not list."""
    for rel, digest in entries.items():
        path = folder / rel
        if not path.is_file():
            problems.append(f"missing: {rel} is listed in {MANIFEST} but not in the folder")
        elif store.sha256_file(path) != digest:
            problems.append(f"changed: {rel} does not match its sha256 in {MANIFEST}")
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    return sorted(present - set(entries) - {MANIFEST, SIGNATURE})


def _check_signature(folder: Path, key: Key | None, problems: list[str], proves: list[str]) -> None:
    path = folder / SIGNATURE
    if not path.is_file():
        if key is not None:
            problems.append(f"unsigned: no {SIGNATURE}, so nothing shows the manifest was written by the holder of "
                            f"{key.name} (it may have been regenerated after an edit)")
        else:
            proves.append(UNSIGNED)
        return
    try:
        record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        algorithm, key_id, signature = record["algorithm"], record["key_id"], record["signature"]
    except (ValueError, KeyError, TypeError):
        record = {}
    if record.get("format") != FORMAT:
        problems.append(f"{SIGNATURE}: unreadable (not the {FORMAT} record a signing writes)")
        return
    manifest = (folder / MANIFEST).read_bytes()
    if record.get("manifest_sha256") != hashlib.sha256(manifest).hexdigest():
        problems.append(f"{MANIFEST} was changed after it was signed (edited or regenerated): its sha256 is not "
                        f"the one {SIGNATURE} signed")
        return
    if key is None and algorithm == ED25519:
        try:
            key = Key(ED25519, f"the public key in {SIGNATURE}", public=_public_from(record["public_key"]))
        except (ValueError, KeyError, TypeError):
            problems.append(f"{SIGNATURE}: its public key is unreadable")
            return
        stated = (f"signed with the Ed25519 key {key_id} that {SIGNATURE} names; anyone can sign with a key of "
                  "their own, so check that it is the key you expect with --key ed25519:PUBLIC.pem")
    elif key is None:
        proves.append(f"signed ({algorithm}, key id {key_id}) but not checked (give --key hmac:FILE with the signing "
                      f"secret); until it is, {HASHES_ONLY}")
        return
    else:
        stated = (f"signed ({algorithm}) with the key {key.name} (key id {key.key_id}): the files are as its "
                  "holder listed them")
    if algorithm != key.algorithm:
        problems.append(f"{SIGNATURE}: signed with {algorithm}, but the key given is {key.algorithm}")
    elif key_id != key.key_id:
        problems.append(f"{SIGNATURE}: signed with another key (key id {key_id}; {key.name} has key id "
                        f"{key.key_id})")
    elif not key.verifies(manifest, str(signature)):
        problems.append(f"{SIGNATURE}: the signature does not match {MANIFEST} (the manifest or the signature was "
                        "changed after signing)")
    else:
        proves.append(stated)


def _public_from(text: str) -> Ed25519PublicKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    return Ed25519PublicKey.from_public_bytes(base64.b64decode(text, validate=True))


def verify_pack(folder: str | Path, key: str | None = None) -> PackCheck:
    """Check every file of the pack against MANIFEST.sha256, files not listed, and MANIFEST.sig (with `key`, named
    as `read_key` takes it); a folder that is not there is an InputError."""
    folder = Path(folder)
    verifier = None if key is None else read_key(key, "--key")
    if not folder.is_dir():
        raise InputError(f"{folder}: not a folder; give the evidence pack's folder")
    problems: list[str] = []
    proves: list[str] = []
    if not (folder / MANIFEST).is_file():
        return PackCheck([f"{folder}: no {MANIFEST}: not an evidence pack, or its manifest was removed"], [])
    entries = _entries(folder, problems)
    unlisted = _check_files(folder, entries, problems)
    _check_signature(folder, verifier, problems, proves)
    if not problems:
        proves.insert(0, f"verified: {len(entries)} files match {MANIFEST}")
    return PackCheck(problems, proves, unlisted)


__all__ = ["ENV_KEY", "SIGNATURE", "EvidenceVerifyOptions", "Key", "PackCheck", "pack_key", "read_key", "sign_manifest",
           "signing_key", "verify_pack"]
