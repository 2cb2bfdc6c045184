"""Certificates made for a test: a CA and certificates it signs (SAN localhost and 127.0.0.1),
with the `cryptography` package when it is installed, else the `openssl` command line."""
from __future__ import annotations

import datetime
import ipaddress
import pathlib
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Authority:
    directory: pathlib.Path
    label: str

    @property
    def ca(self) -> str:
        return str(self.directory / f"{self.label}-ca.pem")

    @property
    def ca_key(self) -> str:
        return str(self.directory / f"{self.label}-ca.key")

    def issue(self, name: str) -> tuple[str, str]:
        """(certificate, key) paths of a new certificate `name` signed by this CA."""
        cert, key = self.directory / f"{name}.pem", self.directory / f"{name}.key"
        try:
            _issue_with_cryptography(self, name, cert, key)
        except ImportError:
            _issue_with_openssl(self, name, cert, key)
        return str(cert), str(key)


def make_authority(directory: pathlib.Path, label: str) -> Authority:
    authority = Authority(directory, label)
    try:
        _ca_with_cryptography(authority)
    except ImportError:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", authority.ca_key, "-out", authority.ca, "-days", "1",
                        "-subj", f"/CN={label}", "-addext", "basicConstraints=critical,CA:TRUE"],
                       check=True, capture_output=True)
    return authority


def _issue_with_openssl(authority: Authority, name: str, cert: pathlib.Path, key: pathlib.Path) -> None:
    request, extensions = authority.directory / f"{name}.csr", authority.directory / f"{name}.ext"
    extensions.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(request), "-subj", f"/CN={name}"], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", str(request), "-CA", authority.ca, "-CAkey", authority.ca_key,
                    "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(extensions)],
                   check=True, capture_output=True)


def _ca_with_cryptography(authority: Authority) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, authority.label)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    pathlib.Path(authority.ca).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pathlib.Path(authority.ca_key).write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def _issue_with_cryptography(authority: Authority, common: str, cert_path: pathlib.Path,
                             key_path: pathlib.Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca_cert = x509.load_pem_x509_certificate(pathlib.Path(authority.ca).read_bytes())
    ca_key = serialization.load_pem_private_key(pathlib.Path(authority.ca_key).read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    san = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(san, critical=False).sign(ca_key, hashes.SHA256()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
