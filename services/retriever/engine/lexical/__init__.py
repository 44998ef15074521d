"""The lexical index: exact BM25F over packed posting blocks, their compaction and an in-memory cache of common
terms' blocks."""
