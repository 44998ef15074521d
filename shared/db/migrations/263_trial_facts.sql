-- A registered trial's phase, overall status and whether results are posted (ClinicalTrials.gov), as columns of
-- its document so the search filters trial_phase, trial_status and has_results read them as they read
-- study_type (services/retriever/engine/filters/fields.py). NULL for every document that is no trial, which
-- fails each of the three filters. The parser writes them (services/parser/store.py); the same facts are in
-- the document's metadata (`trial`).
ALTER TABLE documents ADD COLUMN IF NOT EXISTS trial_phases text[];
ALTER TABLE documents ADD COLUMN IF NOT EXISTS trial_status text;
ALTER TABLE documents ADD COLUMN IF NOT EXISTS has_results boolean;
CREATE INDEX IF NOT EXISTS documents_trial_status_idx ON documents (trial_status) WHERE trial_status IS NOT NULL;
