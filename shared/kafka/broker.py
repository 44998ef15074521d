"""The one way a service gets its FastStream ``KafkaBroker``: :func:`make_broker`.

Every broker connects with the TLS/SASL of the Kafka settings, runs the dead-letter policy
(:class:`shared.kafka.retry.DeadLetterPolicy`) and Prometheus metrics on every message, decodes with the
tolerant parser and decoder (:mod:`shared.kafka.decoding`) and, when an OTLP endpoint is configured, traces.
"""

from __future__ import annotations

import logging
from typing import Any

from faststream.kafka import KafkaBroker
from faststream.kafka.prometheus import KafkaPrometheusMiddleware

from shared import metrics, tracing
from shared.kafka.decoding import tolerant_batch_decoder, tolerant_parser
from shared.kafka.metadata_backoff import install_metadata_backoff
from shared.kafka.retry import DeadLetterPolicy
from shared.kafka.security import broker_security
from shared.settings import KafkaSettings, Settings, get_settings


def make_broker(service: str, settings: Settings | None = None, **kwargs: Any) -> KafkaBroker:
    """A KafkaBroker for ``service`` with metrics and dead-letter handling installed.

    It connects with the TLS/SASL of the Kafka settings and, when an OTLP endpoint is configured, turns this
    process's tracing on (:func:`shared.tracing.setup_tracing`) and traces every message it handles.
    """
    install_metadata_backoff()
    s = settings or get_settings()
    tracing.setup_tracing(service, s.tracing)
    k: KafkaSettings = s.kafka
    return KafkaBroker(
        k.bootstrap,
        client_id=f"{k.client_id}-{service}",
        security=broker_security(k),
        middlewares=(
            # Outermost, so a message's consume span covers its retries and dead-lettering.
            *tracing.kafka_middlewares(),
            DeadLetterPolicy(
                service,
                k.max_delivery_attempts,
                k.retry_backoff_s,
                k.retry_backoff_max_s,
                request_max_age_s=k.request_timeout_s,
                max_payload_bytes=k.dlq_max_payload_bytes,
            ),
            KafkaPrometheusMiddleware(registry=metrics.registry, app_name=service, metrics_prefix="evidentia"),
        ),
        max_request_size=k.max_request_size,
        logger=logging.getLogger(f"evidentia.{service}.kafka"),
        **({"decoder": tolerant_batch_decoder, "parser": tolerant_parser} | kwargs),
    )
