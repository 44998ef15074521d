"""How every Kafka client of Evidentia connects: TLS and SASL from :class:`~shared.settings.KafkaSettings`.

One owner for the mapping. :func:`broker_security` builds FastStream's security object (``SASLPlaintext``,
``SASLScram256``/``SASLScram512`` or ``BaseSecurity`` with an SSL context) for every ``KafkaBroker``;
:func:`client_options` turns that same object into the keyword arguments of the raw aiokafka clients
Evidentia makes itself (the embedder's vector producer, the topic admin), with FastStream's own
translation, so a broker and a raw client can never disagree about how to connect.
"""

from __future__ import annotations

import ssl
from typing import Any

from faststream.kafka.security import parse_security
from faststream.security import BaseSecurity, SASLPlaintext, SASLScram256, SASLScram512

from shared.settings import KafkaSettings


def ssl_context(k: KafkaSettings) -> ssl.SSLContext | None:
    """The client TLS context of ``SSL``/``SASL_SSL``, or None for the plaintext protocols.

    Verifies the broker's certificate against ``ssl_cafile`` (default: the system's CAs), checks the host
    name unless told not to, and presents a client certificate when one is configured (mutual TLS).
    """
    if not k.security_protocol.endswith("SSL"):
        return None
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=k.ssl_cafile)
    context.check_hostname = k.ssl_check_hostname
    if k.ssl_certfile:
        password = k.ssl_key_password.get_secret_value() if k.ssl_key_password else None
        context.load_cert_chain(k.ssl_certfile, k.ssl_keyfile, password)
    return context


def broker_security(k: KafkaSettings) -> BaseSecurity | None:
    """FastStream's security object for ``KafkaBroker(security=...)``; None for plain ``PLAINTEXT``."""
    context = ssl_context(k)
    if k.security_protocol == "PLAINTEXT":
        return None
    if k.security_protocol == "SSL":
        return BaseSecurity(ssl_context=context, use_ssl=True)
    assert k.sasl_username is not None and k.sasl_password is not None  # checked by KafkaSettings
    use_ssl = k.security_protocol == "SASL_SSL"
    kinds: dict[str, type[SASLPlaintext | SASLScram256 | SASLScram512]] = {
        "PLAIN": SASLPlaintext,
        "SCRAM-SHA-256": SASLScram256,
        "SCRAM-SHA-512": SASLScram512,
    }
    return kinds[k.sasl_mechanism](
        k.sasl_username, k.sasl_password.get_secret_value(), ssl_context=context, use_ssl=use_ssl
    )


def client_options(k: KafkaSettings) -> dict[str, Any]:
    """``bootstrap_servers`` and the security keyword arguments of a raw aiokafka producer, consumer or admin."""
    options: dict[str, Any] = {"bootstrap_servers": k.bootstrap}
    security = broker_security(k)
    if security is not None:
        options.update(parse_security(security))
    return options
