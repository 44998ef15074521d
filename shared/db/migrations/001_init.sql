-- Evidentia's first schema: documents, chunks, vector indexes, ingestion tracking, search cache.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE documents (
    document_id        text PRIMARY KEY,            -- '<source>:<source_id>', e.g. 'pubmed:12345'
    source             text NOT NULL CHECK (source IN ('pubmed', 'pmc', 'bookshelf')),
    source_id          text NOT NULL,
    pmid               text,
    pmcid              text,
    doi                text,
    title              text NOT NULL,
    abstract           text,
    full_text          text,
    journal            text,
    journal_iso        text,
    year               integer,
    pub_date           text,
    language           text,
    publication_types  text[] NOT NULL DEFAULT '{}',
    study_type         text,
    evidence_level     real,
    mesh_terms         text[] NOT NULL DEFAULT '{}',
    retracted          boolean NOT NULL DEFAULT false,
    metadata           jsonb NOT NULL DEFAULT '{}'::jsonb,  -- the parsed document less text and chunks
    content_hash       text NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (source, source_id)
);
CREATE INDEX documents_pmid_idx ON documents (pmid);
CREATE INDEX documents_year_idx ON documents (year);
CREATE INDEX documents_study_type_idx ON documents (study_type);
CREATE INDEX documents_mesh_idx ON documents USING gin (mesh_terms);

CREATE TABLE chunks (
    chunk_id        text PRIMARY KEY,               -- '<document_id>#<content hash prefix>#<ordinal>'
    document_id     text NOT NULL REFERENCES documents (document_id) ON DELETE CASCADE,
    ordinal         integer NOT NULL,
    section         text,
    doc_title       text NOT NULL DEFAULT '',
    content         text NOT NULL,
    embedding_text  text NOT NULL,
    token_count     integer NOT NULL,
    char_start      integer,
    char_end        integer,
    created_at      timestamptz NOT NULL DEFAULT now(),
    tsv             tsvector GENERATED ALWAYS AS (
                        setweight(to_tsvector('english', coalesce(doc_title, '')), 'A') ||
                        setweight(to_tsvector('english', coalesce(section, '')), 'B') ||
                        setweight(to_tsvector('english', content), 'C')
                    ) STORED,
    UNIQUE (document_id, ordinal)
);
CREATE INDEX chunks_tsv_idx ON chunks USING gin (tsv);

-- One row per vector index. Each index is its own table (vector(dim) is fixed per column);
-- exactly one is active: the one searched and written by default.
CREATE TABLE vector_indexes (
    name          text PRIMARY KEY,
    model         text NOT NULL,
    dim           integer NOT NULL CHECK (dim > 0),
    table_name    text NOT NULL UNIQUE,
    state         text NOT NULL DEFAULT 'building' CHECK (state IN ('building', 'active', 'retired')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    activated_at  timestamptz
);
CREATE UNIQUE INDEX vector_indexes_one_active ON vector_indexes ((true)) WHERE state = 'active';

-- Where each document is in the pipeline: the latest stage wins.
CREATE TABLE document_status (
    document_id  text PRIMARY KEY,
    stage        text NOT NULL CHECK (stage IN ('discovered', 'fetched', 'parsed', 'embedded', 'failed', 'deleted')),
    error        text,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE ingest_jobs (
    job_id       text PRIMARY KEY,
    kind         text NOT NULL,
    params       jsonb NOT NULL DEFAULT '{}'::jsonb,
    state        text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'discovered', 'failed')),
    error        text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE ingest_job_documents (
    job_id       text NOT NULL REFERENCES ingest_jobs (job_id) ON DELETE CASCADE,
    document_id  text NOT NULL,
    PRIMARY KEY (job_id, document_id)
);
CREATE INDEX ingest_job_documents_doc_idx ON ingest_job_documents (document_id);

-- Recorded searches: a repeated search inside the TTL is answered from here.
CREATE TABLE search_queries (
    query        text NOT NULL,
    database     text NOT NULL DEFAULT 'pubmed',
    max_results  integer NOT NULL,
    total_count  integer NOT NULL,
    pmids        text[] NOT NULL,
    searched_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (query, database, max_results)
);
