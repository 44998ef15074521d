"""A reindex embedder: ``EVIDENTIA_EMBEDDING_MODEL=X python -m services.embedder.reindex``.

``evidentia reindex --model X`` publishes every chunk lacking a vector in X's index to
``chunks.reindex`` as a ``ChunkCreated`` with ``target_model`` X. This process consumes that topic in
the consumer group of model X, embeds the events aimed at X through the same pipeline as the regular
embedder (pre-tokenised ids, length-sorted batches, publish then commit) and publishes them to
``chunks.embedded``, where the retriever stores them in X's building index. It never reads
``chunks.created``, so the running pipeline keeps embedding new chunks with the current model meanwhile.
"""

from __future__ import annotations

from faststream.kafka import KafkaBroker

from services.embedder.handlers import (
    GROUP_ID,
    EmbedderState,
    batch_subscriber_options,
    configured_model,
    reindex_group,
)
from shared.kafka.broker import make_broker
from shared.kafka.context import KafkaMessage
from shared.kafka.topics import CHUNKS_REINDEX
from shared.service import make_app, run_app
from shared.settings import get_settings

__all__ = ["GROUP_ID", "register_reindex"]


def register_reindex(broker: KafkaBroker, state: EmbedderState) -> str:
    """Subscribe to ``chunks.reindex`` in the group of the configured model; return that model's name."""
    state.attach(broker)
    model = configured_model(state.settings)

    @broker.subscriber(
        CHUNKS_REINDEX,
        group_id=reindex_group(model),
        **batch_subscriber_options(state),
        title="chunks.reindex:embedder",
        description="ChunkCreated events of `evidentia reindex`, embedded only by embedders of their target_model.",
    )
    async def on_reindex(msg: KafkaMessage) -> None:
        await state.take(msg, target_model=model)

    return model


settings = get_settings()
broker = make_broker("embedder-reindex", settings)
state = EmbedderState(settings)
register_reindex(broker, state)
app = make_app(
    "embedder-reindex",
    broker,
    on_startup=[state.start],
    on_shutdown=[state.stop],
    ready=state.ready,
    live=state.live,
    details=state.health,
    description="Re-embeds the chunks.reindex events aimed at the configured model (evidentia reindex).",
)

if __name__ == "__main__":
    run_app("embedder-reindex", app)
