"""The PubMed query of a question and its relaxations.

The terms come from the query intelligence (:mod:`services.gateway.understanding.enhance`): with a model, the
``enhance`` step's medical terms (cached like every rewrite); offline, the question's content words (in English:
a question that could not be translated is searched as asked). The first query ANDs every term (at most
:data:`MAX_TERMS`); a query that finds nothing is relaxed by dropping terms from the end (the question's later,
usually qualifying, words), then keeping only its first half.
"""

from __future__ import annotations

from shared.text import content_words

MAX_TERMS = 8
MAX_QUERIES = 3


def question_terms(question: str) -> list[str]:
    """The content words of ``question``, each once, in order, at most :data:`MAX_TERMS`."""
    out: list[str] = []
    for w in content_words(question, min_length=3):
        if w not in out:
            out.append(w)
    return out[:MAX_TERMS]


def model_terms(terms: list[str]) -> list[str]:
    """A model's search terms cleaned for E-utilities: trimmed, without quotes or brackets, each once."""
    out: list[str] = []
    for t in terms:
        clean = " ".join(t.replace('"', " ").replace("[", " ").replace("]", " ").split())
        if clean and clean.lower() not in (o.lower() for o in out):
            out.append(clean)
    return out[:MAX_TERMS]


def _clause(term: str) -> str:
    return f'"{term}"' if " " in term else term


def pubmed_query(terms: list[str]) -> str:
    """The terms ANDed (a phrase quoted)."""
    return " AND ".join(_clause(t) for t in terms)


def relaxed_queries(terms: list[str]) -> list[str]:
    """The queries tried in order until one finds records: every term, all but the last, the first half
    (at least one term each; each query once; at most :data:`MAX_QUERIES`)."""
    if not terms:
        return []
    cuts = [len(terms), len(terms) - 1, (len(terms) + 1) // 2]
    out: list[str] = []
    for n in cuts:
        if n >= 1:
            q = pubmed_query(terms[:n])
            if q not in out:
                out.append(q)
    return out[:MAX_QUERIES]
