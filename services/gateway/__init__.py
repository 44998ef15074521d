"""Gateway service: the HTTP API (FastAPI) in front of the Kafka services."""
