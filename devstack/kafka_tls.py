"""TLS material for a local Kafka SASL_SSL listener, made with the JDK's ``keytool`` (no OpenSSL needed).

:func:`make_broker_tls` writes, into one folder: a throw-away certificate authority (``ca.p12``), its
certificate as PEM (``ca.pem``: what clients trust, ``EVIDENTIA_KAFKA_SSL_CAFILE``), and the broker's
PKCS#12 keystore (``broker.p12``) whose key is signed by that CA for the given host names and addresses.
``keytool`` runs on the Java the broker runs on (:meth:`devstack.java.JavaRuntime.keytool`), so it is there
wherever the broker can start.
"""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from devstack.common import DevstackError
from devstack.java import find_java


@dataclass(frozen=True)
class BrokerTls:
    """The files of :func:`make_broker_tls` and the keystore's password."""

    keystore: Path
    password: str
    ca_pem: Path


def _run(tool: list[str], *args: str) -> None:
    result = subprocess.run([*tool, *args], capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0:
        raise DevstackError(f"keytool {args[0]} failed: {(result.stdout + result.stderr).strip()[-2000:]}")


def _san(hosts: Sequence[str]) -> str:
    entries = []
    for host in hosts:
        try:
            ipaddress.ip_address(host)
            entries.append(f"ip:{host}")
        except ValueError:
            entries.append(f"dns:{host}")
    return "SAN=" + ",".join(entries)


def make_broker_tls(folder: Path, hosts: Sequence[str] = ("localhost", "127.0.0.1"), days: int = 7) -> BrokerTls:
    """A CA and a broker keystore signed by it for ``hosts`` (DNS names or IP addresses), valid ``days``."""
    tool = find_java().keytool()
    folder.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(18)
    ca_store, ca_pem = folder / "ca.p12", folder / "ca.pem"
    keystore, csr, signed = folder / "broker.p12", folder / "broker.csr", folder / "broker.pem"
    for stale in (ca_store, ca_pem, keystore, csr, signed):
        stale.unlink(missing_ok=True)
    store = ("-storetype", "PKCS12", "-storepass", password, "-keypass", password)
    validity = ("-validity", str(days))
    key = ("-keyalg", "RSA", "-keysize", "2048")
    _run(tool, "-genkeypair", "-alias", "ca", *key, "-dname", "CN=Evidentia dev CA", "-ext", "bc:c", *validity,
         "-keystore", str(ca_store), *store)  # fmt: skip
    _run(tool, "-exportcert", "-rfc", "-alias", "ca", "-keystore", str(ca_store), "-storepass", password,
         "-file", str(ca_pem))  # fmt: skip
    _run(tool, "-genkeypair", "-alias", "broker", *key, "-dname", f"CN={hosts[0]}", *validity,
         "-keystore", str(keystore), *store)  # fmt: skip
    _run(tool, "-certreq", "-alias", "broker", "-keystore", str(keystore), "-storepass", password, "-file", str(csr))
    _run(tool, "-gencert", "-rfc", "-alias", "ca", "-keystore", str(ca_store), "-storepass", password,
         "-infile", str(csr), "-outfile", str(signed), *validity, "-ext", _san(hosts),
         "-ext", "KU=digitalSignature,keyEncipherment", "-ext", "EKU=serverAuth")  # fmt: skip
    _run(tool, "-importcert", "-noprompt", "-alias", "ca", "-file", str(ca_pem), "-keystore", str(keystore),
         "-storepass", password)  # fmt: skip
    _run(tool, "-importcert", "-noprompt", "-alias", "broker", "-file", str(signed), "-keystore", str(keystore),
         "-storepass", password)  # fmt: skip
    csr.unlink(missing_ok=True)
    return BrokerTls(keystore=keystore, password=password, ca_pem=ca_pem)
