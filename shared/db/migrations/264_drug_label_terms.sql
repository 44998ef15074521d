-- The `drugs` search filter (services/retriever/engine/filters/fields.py): a drug label's names and RxCUIs
-- (metadata -> drug_label -> match_terms, a JSON array of strings) matched with `?|`, which this GIN index serves.
CREATE INDEX IF NOT EXISTS documents_drug_terms_idx ON documents USING gin ((metadata -> 'drug_label' -> 'match_terms'));
