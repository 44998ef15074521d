-- The blocks still without score bounds (written before migration 260), found through an index of them alone.
--
-- A storing retriever's compaction fills such blocks' bounds in (`bound_blocks`) before every run, every
-- `EVIDENTIA_RETRIEVAL_BM25_COMPACT_EVERY_S` (5 s): without this index that look-up read every block of the
-- lexical index each time, none of them lacking bounds (37,488 blocks, 6,790 pages at 3x10^6 chunks: 48 ms cold,
-- beside the searches on the same cores, and growing with the corpus). The index holds only the blocks without
-- bounds: none once they are filled in, so it costs nothing to keep.

CREATE INDEX IF NOT EXISTS bm25_blocks_unbounded_idx ON bm25_blocks (block_id) WHERE max_tf_text IS NULL;
