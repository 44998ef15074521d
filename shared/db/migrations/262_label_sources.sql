-- Documents of every source in the registry (shared/sources, shared.models.Source): ClinicalTrials.gov studies
-- and FDA drug labels join PubMed, PMC and Bookshelf. Written so that it may run after another migration that
-- widened the same check.
ALTER TABLE documents DROP CONSTRAINT IF EXISTS documents_source_check;
ALTER TABLE documents ADD CONSTRAINT documents_source_check
    CHECK (source IN ('pubmed', 'pmc', 'bookshelf', 'clinicaltrials', 'fda_label'));

-- The `drugs` search filter: a drug label's names and RxCUIs (metadata -> drug_label -> match_terms, a JSON
-- array of strings) matched with `?|`, which this GIN index serves.
CREATE INDEX IF NOT EXISTS documents_drug_terms_idx ON documents USING gin ((metadata -> 'drug_label' -> 'match_terms'));
