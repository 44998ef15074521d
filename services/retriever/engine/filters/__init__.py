"""The search filters: one declaration per field (``fields``), what the engine derives from them (``derived``)
and their resolution before a search (``passing``)."""
