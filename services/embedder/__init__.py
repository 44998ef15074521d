"""Embedder service: ``chunks.created`` -> ``chunks.embedded`` in batches; the only GPU service."""
