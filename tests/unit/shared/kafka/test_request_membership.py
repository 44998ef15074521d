"""Request consumers fail over fast: a short session, and static membership when an instance id is given."""

from __future__ import annotations

from pathlib import Path

from devstack.processes import ServiceStack
from shared.kafka.reply_server import request_subscriber_options
from shared.kafka.topics import RETRIEVAL_REQUESTS, SYNTHESIS_REQUESTS
from shared.settings import KafkaSettings


def test_request_consumers_have_a_short_session_and_heartbeat_three_times_in_it() -> None:
    options = request_subscriber_options(KafkaSettings(request_session_timeout_ms=6000), SYNTHESIS_REQUESTS)
    assert options["session_timeout_ms"] == 6000 and options["heartbeat_interval_ms"] == 2000
    assert "group_instance_id" not in options  # dynamic membership unless an id is configured


def test_a_static_instance_id_is_made_per_request_topic() -> None:
    kafka = KafkaSettings(group_instance_id="retriever-7f9c")
    ids = {request_subscriber_options(kafka, t)["group_instance_id"] for t in (RETRIEVAL_REQUESTS, SYNTHESIS_REQUESTS)}
    assert ids == {f"retriever-7f9c.{RETRIEVAL_REQUESTS}", f"retriever-7f9c.{SYNTHESIS_REQUESTS}"}


def test_a_replica_stack_gives_each_process_its_own_stable_instance_id(tmp_path: Path) -> None:
    second = ServiceStack(log_dir=tmp_path, env={}, services=("retriever", "synthesizer"), instance="r2")
    ids = {n: p.env["EVIDENTIA_KAFKA_GROUP_INSTANCE_ID"] for n, p in second.processes.items()}
    assert ids == {"retriever": "r2-retriever", "synthesizer": "r2-synthesizer"}
    plain = ServiceStack(log_dir=tmp_path, env={}, services=("synthesizer",))
    assert "EVIDENTIA_KAFKA_GROUP_INSTANCE_ID" not in plain.processes["synthesizer"].env
