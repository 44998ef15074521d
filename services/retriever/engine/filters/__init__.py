"""The search filters: one declaration per field and what the engine derives from them (``fields``)
and their resolution before a search (``passing``)."""
