-- Citation metrics in a conversation's stored citations (issue 19): each citation keeps the iCite metrics it
-- was shown with when its turn was answered (a snapshot, JSON of shared.models.CitationMetrics), so
-- GET /v1/conversations/{id} shows them as the answer did. NULL: none were imported for its PMID then, or the
-- turn was stored before this migration.
ALTER TABLE conversation_citations ADD COLUMN IF NOT EXISTS citation_metrics jsonb;
