"""Everything Evidentia does with Kafka, one concern a module.

- :mod:`~shared.kafka.broker`: :func:`make_broker`, the one way a service gets a FastStream broker.
- :mod:`~shared.kafka.retry`: the consumer middleware that retries a failing event and dead-letters it.
- :mod:`~shared.kafka.errors`: which failures are outages (retried without limit), poison or the event's data.
- :mod:`~shared.kafka.decoding`: events from records, tolerant of a bad record in a batch.
- :mod:`~shared.kafka.dead_letters`: a dead letter made from a failed record and sent to ``<topic>.dlq``.
- :mod:`~shared.kafka.dlq`: reading and replaying dead letters (``evidentia dlq``, the gateway's admin routes).
- :mod:`~shared.kafka.reply_client` and :mod:`~shared.kafka.reply_server`: request/reply over Kafka.
- :mod:`~shared.kafka.publish`: keyed sends of whole record batches from a raw producer; :mod:`~shared.kafka.murmur2`:
  Kafka's default partitioner for a whole batch of keys at once.
- :mod:`~shared.kafka.topics` (names, retention) and :mod:`~shared.kafka.topic_admin` (creating, sweeping).
- :mod:`~shared.kafka.security`: TLS and SASL for every client; :mod:`~shared.kafka.messages`: headers and records;
  :mod:`~shared.kafka.context`: what handlers take from FastStream's context, resolved on the event loop.
- :mod:`~shared.kafka.pause` and :mod:`~shared.kafka.metadata_backoff`: keeping a consumer and a producer healthy
  through an outage.

Import from the module that owns a name; this package re-exports nothing.
"""
