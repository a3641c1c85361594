"""The node key ring: AES-256-GCM encryption of signing secrets at rest (issue 14).

Secrets are registry values (CRDT registers) that replicate between regions in the clear
over the mTLS gRPC link; each region's store seals them with its own node key as they are
written to disk (``SqliteStore``, ``PostgresStore``; which rows, ``AtRest``), so regions
may hold different keys. A sealed blob is

    0xC1 "RS1" | len(key id) (1 byte) | key id (ASCII) | nonce (12 bytes) | ciphertext+tag

0xC1 is the one byte msgpack never uses, so a sealed blob is never mistaken for the
msgpack a plaintext row holds (rows written before encryption stay readable). The
associated data binds each blob to the row it was written for (AESGCM from the
``cryptography`` package; NIST SP 800-38D, random 96-bit nonces).

Key ring text (``[secrets] keys``, ``REGIONSYNC_SECRETS__KEYS``, or the lines of
``[secrets] key_file``): entries ``<key id>:<base64 of 32 bytes>`` separated by commas or
newlines (``#`` starts a comment line). The first entry is the current key (new writes);
the others are only read. Rotation: put a new key first, keep the old ones after it.
Without a configured key a node generates ``<data_dir>/<region>.key`` (mode 0600) on its
first start and uses it from then on.

The processes of a region agree on the ring (``AtRest.agree``): a store keeps a key check
(the meta row ``key_check``: a known text sealed with the current key of the first
process to open it, sealed again by one that opens it but has another current key, as
after a rotation), and a process
whose ring cannot open it does not start (``errors.CannotStart`` naming ``[secrets]
keys``): it could not read the secrets the others seal.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
import secrets
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..core.registry import is_secret_key, may_hold_secret
from ..errors import CannotStart

__all__ = ["KEY_CHECK", "MAGIC", "AtRest", "NodeKeys", "SealedKeyError", "is_sealed"]

KEY_CHECK = "key_check"  # the meta row holding a store's key check (base64)
_CHECK_TEXT = b"regionsync key check"
_CHECK_AAD = b"meta\0key_check"

MAGIC = b"\xc1RS1"
_NONCE = 12
_KEY_ID = re.compile(r"[A-Za-z0-9_.\-]{1,32}")


class SealedKeyError(ValueError):
    """A sealed blob names a key id this node does not have, or fails authentication."""


def is_sealed(blob: bytes) -> bool:
    """True if ``blob`` was written by ``NodeKeys.seal``."""
    return blob[:4] == MAGIC


class NodeKeys:
    """An ordered key ring ``[(key id, 32-byte key), ...]``; the first key seals.

    Raises ValueError for an empty ring, a bad key id (``[A-Za-z0-9_.-]{1,32}``), a key
    that is not 32 bytes, or a repeated id.
    """

    def __init__(self, keys: Sequence[tuple[str, bytes]]):
        if not keys:
            raise ValueError("secrets: the key ring is empty")
        self._keys: dict[str, AESGCM] = {}
        for kid, key in keys:
            if not _KEY_ID.fullmatch(kid):
                raise ValueError(f"secrets: bad key id {kid!r} (want [A-Za-z0-9_.-]{{1,32}})")
            if len(key) != 32:
                raise ValueError(f"secrets: key {kid!r} must be 32 bytes, not {len(key)}")
            if kid in self._keys:
                raise ValueError(f"secrets: key id {kid!r} appears twice")
            self._keys[kid] = AESGCM(key)
        self.current = keys[0][0]

    @property
    def ids(self) -> list[str]:
        """Key ids, current first."""
        return list(self._keys)

    @classmethod
    def parse(cls, text: str) -> NodeKeys:
        """A ring from its text form (module docstring); raises ValueError naming the entry."""
        keys = []
        entries = [
            e.strip()
            for line in text.splitlines()
            if not line.strip().startswith("#")
            for e in line.split(",")
        ]
        for entry in entries:
            if not entry:
                continue
            kid, sep, b64 = entry.partition(":")
            if not sep:
                raise ValueError("secrets: a key entry must be '<key id>:<base64 key>'")
            try:
                key = base64.b64decode(b64.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"secrets: key {kid.strip()!r} is not base64") from None
            keys.append((kid.strip(), key))
        return cls(keys)

    @staticmethod
    def generate_entry() -> str:
        """A new ring entry ``<random id>:<base64 key>`` (the key from os.urandom)."""
        kid = "k" + secrets.token_hex(4)
        return f"{kid}:{base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()}"

    @classmethod
    def load(cls, keys: str | None, key_file: Path | None, default_file: Path) -> NodeKeys:
        """The node's ring: ``keys`` text if given, else ``key_file``'s contents, else
        ``default_file``, created with one new key (mode 0600, parent made) if missing.
        Processes of a region that start at once on one data directory all get the ring
        the first of them made: the file appears whole (written aside, then linked).

        Raises FileNotFoundError for a missing ``key_file`` and ValueError for bad text.
        """
        if keys:
            return cls.parse(keys)
        if key_file is not None:
            return cls.parse(Path(key_file).read_text())
        path = Path(default_file)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            text = (
                "# regionsync node key ring: '<id>:<base64 32 bytes>', the first one seals;\n"
                "# to rotate, put a new key first and keep the old ones below it\n"
                + cls.generate_entry()
                + "\n"
            )
            fd, aside = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # 0600
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
                with contextlib.suppress(FileExistsError):  # another process made it first
                    os.link(aside, path)
            finally:
                os.unlink(aside)
        return cls.parse(path.read_text())

    def seal(self, plaintext: bytes, aad: bytes) -> bytes:
        """``plaintext`` encrypted with the current key, bound to ``aad``."""
        nonce = os.urandom(_NONCE)
        kid = self.current.encode()
        ct = self._keys[self.current].encrypt(nonce, plaintext, aad)
        return MAGIC + bytes([len(kid)]) + kid + nonce + ct

    def open(self, blob: bytes, aad: bytes) -> bytes:
        """The plaintext of a sealed ``blob`` (a blob that is not sealed is returned as it
        is: rows written before encryption). Raises SealedKeyError for an unknown key id
        or a blob that does not authenticate (wrong key, other row, tampered)."""
        if not is_sealed(blob):
            return blob
        n, kid = blob[4], _key_id(blob)
        aes = self._keys.get(kid)
        if aes is None:
            raise SealedKeyError(f"secrets: sealed with key id {kid!r}, which is not configured")
        nonce = blob[5 + n : 5 + n + _NONCE]
        try:
            return aes.decrypt(nonce, blob[5 + n + _NONCE :], aad)
        except Exception as exc:  # cryptography's InvalidTag
            raise SealedKeyError(f"secrets: a blob sealed with key {kid!r} fails to open") from exc


def _key_id(blob: bytes) -> str:
    """The key id a sealed ``blob`` names."""
    return blob[5 : 5 + blob[4]].decode("ascii", "replace")


class AtRest:
    """The rows of a store that are sealed with ``keys`` (None: nothing is sealed) and
    how: a registry row whose key holds a secret (``core.registry.is_secret_key``), bound
    to its key, and a log record whose body may carry one (``may_hold_secret``), bound to
    its ``(origin, seq)``. ``store`` names the store in errors.

    Opening a sealed blob without a ring raises ValueError; with a ring that lacks its
    key or a blob moved to another row, SealedKeyError (a ValueError)."""

    def __init__(self, keys: NodeKeys | None, store: str):
        self.keys, self.store = keys, store

    @staticmethod
    def registry_aad(key: str) -> bytes:
        """The associated data of registry row ``key``."""
        return b"registry\0" + key.encode()

    @staticmethod
    def log_aad(origin: str, seq: int) -> bytes:
        """The associated data of log record ``(origin, seq)``."""
        return b"log\0" + origin.encode() + b"\0" + str(seq).encode()

    def seal_state(self, key: str, state: bytes) -> bytes:
        """Registry row ``key``'s ``state`` as it is written: sealed if it holds a secret."""
        if self.keys is None or not is_secret_key(key) or is_sealed(state):
            return state
        return self.keys.seal(state, self.registry_aad(key))

    def seal_body(self, origin: str, seq: int, body: bytes) -> bytes:
        """A log record's ``body`` as it is written: sealed if it may hold a secret."""
        if self.keys is None or not may_hold_secret(body) or is_sealed(body):
            return body
        return self.keys.seal(body, self.log_aad(origin, seq))

    def open_state(self, key: str, blob: bytes) -> bytes:
        """Registry row ``key`` as written (``seal_state``) back to its plaintext state."""
        return self._open(blob, self.registry_aad(key)) if is_sealed(blob) else blob

    def open_body(self, origin: str, seq: int, blob: bytes) -> bytes:
        """A log record's stored body back to its plaintext body (the associated data is
        built only for a sealed one: most are not, and every record read comes here)."""
        return self._open(blob, self.log_aad(origin, seq)) if is_sealed(blob) else blob

    def agree(
        self, region: str, stored: str | None, rows: Iterable[tuple[str, bytes]]
    ) -> str | None:
        """The key check (module docstring) to store after this ring met ``stored`` (None:
        none yet; then the ring must open every sealed registry row of ``rows``, what
        the region's processes sealed before there was a check), or None to keep
        ``stored`` (or without a ring: this process seals nothing). Raises CannotStart
        when the ring cannot open them."""
        if self.keys is None:
            return None
        try:
            if stored is not None:
                blob = base64.b64decode(stored)
                self.keys.open(blob, _CHECK_AAD)
                if _key_id(blob) == self.keys.current:
                    return None
            else:
                for key, state in rows:
                    if is_sealed(state):
                        self.keys.open(state, self.registry_aad(key))
        except ValueError as exc:  # SealedKeyError, or text that is no base64
            raise CannotStart(
                f"secrets: this process's key ring ({', '.join(self.keys.ids)}) cannot open "
                f"what is sealed in region {region}'s {self.store} store "
                f"({str(exc).removeprefix('secrets: ')}): every process of a region needs "
                "the same ring: set [secrets] keys (or key_file) rather than letting each "
                "generate its own <data_dir>/<region>.key"
            ) from None
        return base64.b64encode(self.keys.seal(_CHECK_TEXT, _CHECK_AAD)).decode()

    def _open(self, blob: bytes, aad: bytes) -> bytes:
        if self.keys is None:
            raise ValueError(f"store {self.store} holds encrypted rows but has no key ring")
        return self.keys.open(blob, aad)
