-- Conversations: messages, and the citations with their conversation-wide display numbers.
CREATE TABLE conversations (
    conversation_id  text PRIMARY KEY,
    owner            text,                         -- id of the API key that made it (NULL when auth is off)
    title            text NOT NULL DEFAULT '',     -- the first question, shortened
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE conversation_messages (
    conversation_id      text NOT NULL REFERENCES conversations (conversation_id) ON DELETE CASCADE,
    turn                 integer NOT NULL CHECK (turn >= 1),
    role                 text NOT NULL CHECK (role IN ('user', 'assistant')),
    content              text NOT NULL,     -- user: as asked; assistant: the answer citing [PMID:...] ids
    display              text,              -- assistant: the answer citing conversation-wide numbers [n]
    standalone_question  text,              -- user: the question rewritten to stand alone (what was searched)
    mode                 text,              -- assistant: llm, extractive, insufficient-evidence, emergency
    cited_ids            text[] NOT NULL DEFAULT '{}',
    cited_chunk_ids      text[] NOT NULL DEFAULT '{}',   -- offered again to the retrieval of later turns
    details              jsonb NOT NULL DEFAULT '{}'::jsonb,  -- citation check, evidence summary, timings
    created_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation_id, turn, role)
);

CREATE TABLE conversation_citations (
    conversation_id  text NOT NULL REFERENCES conversations (conversation_id) ON DELETE CASCADE,
    citation_id      text NOT NULL,                -- PMID:..., PMCID:... or NBK:...
    number           integer NOT NULL CHECK (number >= 1),
    document_id      text NOT NULL,
    title            text NOT NULL,
    journal          text,
    year             integer,
    url              text,
    first_turn       integer NOT NULL,
    PRIMARY KEY (conversation_id, citation_id),
    UNIQUE (conversation_id, number)
);
CREATE INDEX conversations_updated_idx ON conversations (updated_at);
