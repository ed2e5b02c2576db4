"""The run's own TLS identity for the provider's host (the default route: the key stays on the host).

Ouroboros 6.97.2 calls OpenRouter at the hard-coded `https://openrouter.ai/api/v1`. So that it can
keep that route, request shape and pricing look-ups unchanged while no container holds the key, the
run serves `openrouter.ai` itself: the shim makes the name resolve, in every agent container, to
the address of the run's gateway (which listens there on port 443), and those containers trust a
certificate authority made for this run alone. The gateway swaps each task's token for the key.

What this module makes, at run start, with the `cryptography` library:
- a run CA (EC P-256), its certificate constrained to the provider's host name (a leaked CA could
  not vouch for any other name); its private key is used once, to sign the leaf, and never written;
- a leaf certificate for the provider's host, signed by that CA; its private key is written 0600
  under <run_root>/private/ (never mounted anywhere) and deleted when the run ends;
- the bundle agent containers trust: the host's usual public roots followed by the run CA, written
  beside the run's other public files and mounted read-only, so every other HTTPS call of the agent
  (its fetch tool) still verifies as before.
"""

from __future__ import annotations

import datetime as dt
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

import certifi
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..runroot import layout
from ..runroot.layout import RunRoot

PROVIDER_HOST = "openrouter.ai"
TLS_PORT = 443
# Where an agent container finds the bundle, and the variables its HTTP clients read it from:
# httpx 0.28 (the openai SDK, Ouroboros's chat calls) and urllib read SSL_CERT_FILE, requests
# (Ouroboros's /models pricing look-ups) reads REQUESTS_CA_BUNDLE, curl CURL_CA_BUNDLE.
BUNDLE_IN_CONTAINER = f"/etc/cowork-adapter/{layout.PROVIDER_BUNDLE}"
CA_ENV_NAMES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
# A campaign's run lasts days at most; a certificate outliving its run is worth nothing to anyone.
VALID_DAYS = 30


@dataclass(frozen=True)
class RunTls:
    """The files of one run's TLS identity (host paths)."""

    bundle: Path  # public roots + run CA: mounted read-only into agent containers
    ca_cert: Path
    leaf_cert: Path
    leaf_key: Path  # 0600, under <run_root>/private

    def server_context(self) -> ssl.SSLContext:
        """The TLS context the gateway serves the provider's host with."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.leaf_cert, self.leaf_key)
        return context


def public_roots() -> bytes:
    """The host's usual trusted roots (what its own HTTPS verifies against): the file its OpenSSL
    names (SSL_CERT_FILE when set, else the system bundle), else certifi's."""
    paths = ssl.get_default_verify_paths()
    for candidate in (os.environ.get("SSL_CERT_FILE"), paths.cafile, paths.openssl_cafile):
        if candidate and os.path.isfile(candidate):
            data = Path(candidate).read_bytes()
            if b"BEGIN CERTIFICATE" in data:
                return data
    return Path(certifi.where()).read_bytes()


def _name(common: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "cowork-adapter run"),
            x509.NameAttribute(NameOID.COMMON_NAME, common),
        ]
    )


def make_certificates(
    run_label: str, host: str = PROVIDER_HOST, now: dt.datetime | None = None
) -> tuple[bytes, bytes, bytes]:
    """(CA certificate, leaf certificate, leaf private key), PEM; the CA's key is dropped here."""
    now = now or dt.datetime.now(dt.UTC)
    start, end = now - dt.timedelta(minutes=5), now + dt.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"cowork-adapter run CA {run_label[:16]}")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
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
        )
        # Only the provider's host: this CA vouches for no other name, whoever holds it.
        .add_extension(
            x509.NameConstraints(permitted_subtrees=[x509.DNSName(host)], excluded_subtrees=None), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(host))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = leaf_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return (
        ca_cert.public_bytes(serialization.Encoding.PEM),
        leaf_cert.public_bytes(serialization.Encoding.PEM),
        key_pem,
    )


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create `path` (never replace one: a run root is never reused) with `mode` from the start."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)  # the umask may have narrowed it; the bundle must be readable by the daemon
    finally:
        os.close(fd)


def make_run_tls(run_root: Path, run_label: str) -> RunTls:
    """Make the run's CA, leaf and bundle under `run_root` (tls/ public, private/ 0700)."""
    ca_pem, leaf_pem, key_pem = make_certificates(run_label)
    root = RunRoot(run_root)
    private = root.private
    private.mkdir(mode=0o700, parents=True, exist_ok=True)
    public = root.tls
    public.mkdir(mode=0o755, exist_ok=True)
    roots = public_roots()
    tls = RunTls(
        bundle=public / layout.PROVIDER_BUNDLE,
        ca_cert=public / layout.RUN_CA_CERT,
        leaf_cert=public / layout.PROVIDER_LEAF_CERT,
        leaf_key=root.provider_leaf_key,
    )
    _write_new(tls.leaf_key, key_pem, 0o600)
    _write_new(tls.ca_cert, ca_pem, 0o644)
    _write_new(tls.leaf_cert, leaf_pem, 0o644)
    _write_new(tls.bundle, roots.rstrip(b"\n") + b"\n" + ca_pem, 0o644)
    return tls


def remove_private(run_root: Path) -> None:
    """The leaf's private key, deleted when the run ends (the certificates stay: they are public)."""
    RunRoot(run_root).provider_leaf_key.unlink(missing_ok=True)
