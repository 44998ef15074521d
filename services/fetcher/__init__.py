"""Fetcher service: discovers PMIDs and fetches raw documents.

``ingest.requests`` -> ``pmids.discovered`` -> ``documents.fetched``.
"""
