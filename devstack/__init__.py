"""Local development stack: a real Kafka broker and a real PostgreSQL + pgvector, no Docker.

Both run as plain processes with their data under ``<repo>/.data`` (or any directory
given), so the services, the integration tests and the CLI talk to the same kind of
infrastructure they meet in production.  ``python -m devstack --help`` drives them.
"""

from devstack.common import DevstackError, default_root, repo_root
from devstack.kafka import KAFKA_VERSION, LocalKafka
from devstack.postgres import LocalPostgres

__all__ = ["KAFKA_VERSION", "DevstackError", "LocalKafka", "LocalPostgres", "default_root", "repo_root"]
