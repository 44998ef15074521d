"""Parser service: raw documents -> stored documents and chunks (``documents.fetched`` -> ``chunks.created``)."""
