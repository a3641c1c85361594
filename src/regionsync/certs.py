"""``regionsync certs``: a private CA and one certificate per region for mutual TLS.

For local use and tests. Each region gets a key and a certificate signed by the CA, valid
for server and client authentication (replication is mutual TLS: every node is both),
with the region name, ``localhost``, ``127.0.0.1``, ``::1`` and any extra names as
subject alternative names (gRPC checks the name of the address it dials). Keys are EC
P-256; files are written with mode 0600 for keys.

An existing CA in ``out`` (``ca.pem`` and ``ca.key``) is reused to sign the new
certificates, so adding a region later keeps every earlier certificate valid; ``force``
replaces it (every earlier certificate then stops chaining to ``ca.pem``).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .config import REGION_PATTERN

__all__ = ["CertsError", "check_name", "check_region", "make_certs"]

# RFC 1123 host name labels (letters, digits, inner hyphens, 1..63 each, 253 in all); a
# leading "*." wildcard label is allowed (RFC 6125 6.4.3)
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?")


class CertsError(ValueError):
    """A refused argument or an existing file that cannot be used; the message names it."""


def check_region(region: str) -> str:
    """A region name as node.toml accepts it (``config.REGION_PATTERN``); it also names the
    files, so it can never hold a path separator. Raises CertsError."""
    if not re.fullmatch(REGION_PATTERN, region):
        raise CertsError(f"--region {region!r}: must match {REGION_PATTERN} (as node.toml)")
    return region


def check_name(name: str) -> str:
    """An extra subject alternative name: an IP address, or a DNS name of RFC 1123 labels
    (an optional leading ``*.``), at most 253 characters. Raises CertsError."""
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        pass
    labels = name.removeprefix("*.").split(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise CertsError(f"--name {name!r}: not a DNS name (RFC 1123) or an IP address")
    return name


_VALID = dt.timedelta(days=365)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """Write ``data``; a private file is created with mode 0600 (never readable by others,
    not even between creation and a chmod)."""
    if not private:
        path.write_bytes(data)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def _san(names: Sequence[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _existing_ca(out: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    """The CA already in ``out``, or None when neither file is there. Raises CertsError
    when only one is there, either does not parse, or the key is not the certificate's."""
    pem, key = out / "ca.pem", out / "ca.key"
    if not pem.exists() and not key.exists():
        return None
    if not (pem.is_file() and key.is_file()):
        raise CertsError(f"{out}: has only one of ca.pem and ca.key (--force makes a new CA)")
    try:
        ca = x509.load_pem_x509_certificate(pem.read_bytes())
        ca_key = serialization.load_pem_private_key(key.read_bytes(), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise CertsError(
            f"{out}: ca.pem/ca.key cannot be read ({exc}); --force makes a new CA"
        ) from None
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey) or (
        ca_key.public_key().public_numbers() != ca.public_key().public_numbers()
    ):
        raise CertsError(f"{out}: ca.key is not the key of ca.pem (--force makes a new CA)")
    return ca, ca_key


def make_certs(
    out: Path, regions: Sequence[str], extra_names: Sequence[str] = (), force: bool = False
) -> dict[str, Path]:
    """Write ``<region>.pem``/``<region>.key`` into ``out``, signed by the CA there
    (``ca.pem``/``ca.key``), which is made when absent or when ``force``.

    Returns ``{name: path}`` of what was written (the CA's files only when made). Raises
    CertsError for no regions, a region outside ``config.REGION_PATTERN``, a name that is
    not a DNS name or IP address, or a CA in ``out`` that cannot be used; OSError when
    ``out`` cannot be written.
    """
    if not regions:
        raise CertsError("at least one --region is needed")
    for region in regions:
        check_region(region)
    for name in extra_names:
        check_name(name)
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    existing = None if force else _existing_ca(out)
    written: dict[str, Path] = {}
    if existing is not None:
        ca, ca_key = existing
        _sign_regions(out, ca, ca_key, regions, extra_names, now, written)
        return written
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "regionsync local CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .sign(ca_key, hashes.SHA256())
    )
    written.update({"ca.pem": out / "ca.pem", "ca.key": out / "ca.key"})
    _write(written["ca.key"], _key_pem(ca_key), private=True)
    _write(written["ca.pem"], ca.public_bytes(serialization.Encoding.PEM))
    _sign_regions(out, ca, ca_key, regions, extra_names, now, written)
    return written


def _sign_regions(
    out: Path,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    regions: Sequence[str],
    extra_names: Sequence[str],
    now: dt.datetime,
    written: dict[str, Path],
) -> None:
    """Issue and write one key and certificate per region, signed by ``ca``."""
    ca_name = ca.subject
    for region in regions:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, region)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(
                _san([region, "localhost", "127.0.0.1", "::1", *extra_names]), critical=False
            )
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        written[f"{region}.pem"] = out / f"{region}.pem"
        written[f"{region}.key"] = out / f"{region}.key"
        _write(written[f"{region}.pem"], cert.public_bytes(serialization.Encoding.PEM))
        _write(written[f"{region}.key"], _key_pem(key), private=True)
