"""Retriever service: owns the vector store (``chunks.embedded``) and answers ``retrieval.requests``."""
