"""Documentation generators: event JSON Schemas, the AsyncAPI document and the README settings table."""
