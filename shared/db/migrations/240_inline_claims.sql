-- Issue 40 (11): an inline document that claims an NCBI record's id by its pmid or pmcid loses the claim when the
-- record arrives (services/parser/store.py, shared/provenance.py). These small indexes (inline documents only)
-- find the claimants of a stored record without reading every document.
CREATE INDEX IF NOT EXISTS documents_inline_pmid_idx ON documents (btrim(pmid)) WHERE origin = 'inline';
CREATE INDEX IF NOT EXISTS documents_inline_pmcid_idx ON documents (btrim(pmcid)) WHERE origin = 'inline';
