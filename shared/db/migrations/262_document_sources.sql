-- The sources a stored document may come from: the NCBI ones, ClinicalTrials.gov and FDA drug labels. The list
-- is shared.models.Source (tests/unit/shared/test_sources.py holds the two together); a new source widens it
-- here, in a migration of its own.
ALTER TABLE documents DROP CONSTRAINT IF EXISTS documents_source_check;
ALTER TABLE documents ADD CONSTRAINT documents_source_check
    CHECK (source IN ('pubmed', 'pmc', 'bookshelf', 'clinicaltrials', 'fda_label'));
