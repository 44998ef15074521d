"""Documentation generators: event JSON Schemas, the AsyncAPI documents, the settings table (docs/settings.md)
and the alert rules' copies."""
