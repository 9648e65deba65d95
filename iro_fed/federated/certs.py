"""Certificates and keys for a TLS federation, made with ``cryptography`` (no openssl needed).

* :func:`make_tls` writes a private CA (``ca.crt``/``ca.key``) and a SuperLink server
  certificate (``server.crt``/``server.key``) valid for the given host names and IP addresses;
  the SuperLink serves with the server pair, SuperNodes and ``flwr`` trust ``ca.crt``.
* :func:`make_node_key` writes a SuperNode's authentication key pair in OpenSSH format
  (ECDSA P-384, as Flower's docs make with ``ssh-keygen``): the private key stays on the node
  (``--auth-supernode-private-key``), the ``.pub`` is registered with ``flwr supernode register``.

For production, certificates from your own PKI work the same way; these are for tests, labs
and first deployments. Private keys are written with mode 0600. Both functions replace files
that are there; ``iro fed certs`` refuses to unless ``--force`` (a new CA invalidates every
certificate the old one signed).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

#: The files :func:`make_tls` writes into its folder.
TLS_FILES = ("ca.crt", "ca.key", "server.crt", "server.key")
#: Validity bounds of :func:`make_tls` in days (ten years at most: a longer-lived private CA is
#: one whose key is more likely to leak before it expires).
MIN_DAYS, MAX_DAYS = 1, 3650
_DNS_LABEL = re.compile(r"\A(?!-)[A-Za-z0-9_-]{1,63}(?<!-)\Z")  # \Z: "$" would accept a trailing newline


def check_host(host: str) -> str:
    """``host`` if it can be a subject alternative name (an IP address or an ASCII DNS name,
    ``*.`` allowed first), else ValueError saying why."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    if not host.isascii():
        raise ValueError(f"{host!r}: give a non-ASCII name in its IDNA form (xn--...)")
    labels = host.removeprefix("*.").removesuffix(".").split(".")
    if len(host) > 253 or not all(_DNS_LABEL.match(label) for label in labels):
        raise ValueError(f"{host!r} is neither an IP address nor a DNS name")
    return host


def node_key_files(name: str) -> tuple[str, str]:
    """The files :func:`make_node_key` writes for ``name``."""
    return name, f"{name}.pub"


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """Write ``data`` to ``path`` through a new temporary file beside it, renamed over it: a
    private key is 0600 from its first byte, another file 0644. The temporary file is made by
    ``mkstemp`` (O_EXCL, 0600, a random name): a fixed name opened with O_CREAT|O_TRUNC kept the
    mode of a file already there (a world-readable key) and wrote through a symbolic link planted
    at it. ``path`` itself, a link or not, is replaced, never written through (unlike
    :func:`iro_fed.problem_io.write_file_atomic`, which follows links and makes files 0644)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            if not private:
                os.fchmod(fh.fileno(), 0o644)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def make_tls(out: str | os.PathLike[str], hosts: Sequence[str] = ("localhost", "127.0.0.1"),
             days: int = 365) -> dict[str, Path]:
    """A CA and a server certificate for ``hosts`` (DNS names or IPs) in ``out``; returns the paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if not hosts:
        raise ValueError("hosts: give at least one DNS name or IP address for the server certificate")
    for host in hosts:
        check_host(host)
    if not MIN_DAYS <= days <= MAX_DAYS:
        raise ValueError(f"days: must be {MIN_DAYS}..{MAX_DAYS}, got {days}")
    out = Path(out)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "iro-fed federation CA")])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP384R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    none = serialization.NoEncryption()
    paths = dict(zip(("ca", "ca_key", "cert", "key"), (out / name for name in TLS_FILES), strict=True))
    _write(paths["ca"], ca_cert.public_bytes(pem))
    _write(paths["ca_key"], ca_key.private_bytes(pem, pkcs8, none), private=True)
    _write(paths["cert"], cert.public_bytes(pem))
    _write(paths["key"], key.private_bytes(pem, pkcs8, none), private=True)
    return paths


def make_node_key(out: str | os.PathLike[str], name: str = "supernode") -> dict[str, Path]:
    """An OpenSSH ECDSA P-384 key pair ``name`` / ``name.pub`` for SuperNode authentication."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    out = Path(out)
    key = ec.generate_private_key(ec.SECP384R1())
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    paths = dict(zip(("private", "public"), (out / f for f in node_key_files(name)), strict=True))
    _write(paths["private"], private, private=True)
    _write(paths["public"], public + f" {name}\n".encode())
    return paths
