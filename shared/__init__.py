"""Evidentia's common package: event schemas, settings, database, broker, metrics, logging, CLI."""
