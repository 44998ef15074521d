"""PubMed searched at question time (``/v1/ask``'s ``fetch``): whether to search (:mod:`.plan`), the PubMed
query built from the question and relaxed when it finds nothing (:mod:`.query`), and the search, ingestion
job and bounded wait that make the new records searchable before the answer (:mod:`.runner`)."""
