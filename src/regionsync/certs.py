"""``regionsync certs``: a private CA and one certificate per region for mutual TLS.

For local use and tests. Each region gets a key and a certificate signed by the CA, valid
for server and client authentication (replication is mutual TLS: every node is both),
with the region name, ``localhost``, ``127.0.0.1``, ``::1`` and any extra names as
subject alternative names (gRPC checks the name of the address it dials). Keys are EC
P-256; files are written with mode 0600 for keys.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["make_certs"]

_VALID = dt.timedelta(days=365)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)


def _san(names: Sequence[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def make_certs(
    out: Path, regions: Sequence[str], extra_names: Sequence[str] = ()
) -> dict[str, Path]:
    """Write ``ca.pem``/``ca.key`` and ``<region>.pem``/``<region>.key`` into ``out``.

    Returns ``{name: path}`` of what was written. Raises ValueError for no regions.
    """
    if not regions:
        raise ValueError("at least one region is needed")
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
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
    written = {"ca.pem": out / "ca.pem", "ca.key": out / "ca.key"}
    _write(written["ca.pem"], ca.public_bytes(serialization.Encoding.PEM))
    _write(written["ca.key"], _key_pem(ca_key), private=True)
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
    return written
