-- Stored guideline consultations (POST /v1/guidelines/consult with `consultation_id`): the interview so far,
-- the findings accumulated over its turns, the caller's diagnoses and the latest differentials.
CREATE TABLE IF NOT EXISTS consultations (
    consultation_id  text PRIMARY KEY,
    owner            text,                                 -- id of the API key that made it (NULL when auth is off)
    turns            integer NOT NULL DEFAULT 0 CHECK (turns >= 0),
    messages         jsonb NOT NULL DEFAULT '[]'::jsonb,   -- the interview, oldest first: {role, content, turn}
    findings         jsonb NOT NULL DEFAULT '[]'::jsonb,   -- accumulated: {type, text, value, source, turn}
    diagnoses        jsonb NOT NULL DEFAULT '[]'::jsonb,   -- the caller's diagnoses, oldest first
    differentials    jsonb NOT NULL DEFAULT '[]'::jsonb,   -- the latest turn's ranked differentials
    population       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS consultations_updated_idx ON consultations (updated_at);
