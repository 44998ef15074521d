"""Offline evaluation of retrieval (BEIR-format datasets, nDCG/recall) against a private PostgreSQL."""
