-- Citation metrics (seed 003 `icite_metadata`; issue 19): the NIH iCite database snapshot's metrics, one row a
-- PMID, loaded by `evidentia import icite FILE` (services/retriever/icite.py, icite_store.py). Its own table,
-- joined to documents by PMID when searching (never copied onto documents or chunks): a re-import replaces the
-- rows of the PMIDs it holds and nothing else, and a document ingested later finds its metrics already there.
-- pmid is text like documents.pmid, so the join compares equal types on both indexes (no cast per row);
-- the loader writes it as digits without leading zeros, as PubMed does.
CREATE TABLE IF NOT EXISTS citation_metrics (
    pmid                        text PRIMARY KEY CONSTRAINT citation_metrics_pmid_digits CHECK (pmid ~ '^[1-9][0-9]{0,18}$'),
    year                        smallint,
    citation_count              integer,
    relative_citation_ratio     double precision,
    nih_percentile              double precision,
    citations_per_year          double precision,
    expected_citations_per_year double precision,
    field_citation_rate         double precision,
    apt                         double precision,
    is_research_article         boolean,
    is_clinical                 boolean,
    provisional                 boolean,
    updated_at                  timestamptz NOT NULL DEFAULT now()
);
-- The search filters (min_citation_count, min_nih_percentile) probe by PMID (the primary key); these serve
-- reports and filter-first plans that start from the metrics.
CREATE INDEX IF NOT EXISTS citation_metrics_citation_count_idx ON citation_metrics (citation_count);
CREATE INDEX IF NOT EXISTS citation_metrics_nih_percentile_idx ON citation_metrics (nih_percentile);
