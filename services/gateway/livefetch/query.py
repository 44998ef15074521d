"""The PubMed query of a question and its relaxations.

The terms come from the query intelligence (:mod:`services.gateway.understanding`): with a model, the ``enhance``
step's medical terms (cached like every rewrite); offline, the question's concepts (:func:`question_concepts`,
from its English form: a question that could not be translated is searched as asked), shaped by the rules of
the query intelligence:

- a disease or lay name the rules know (:data:`services.gateway.understanding.disease.SYNONYMS`,
  :data:`~services.gateway.understanding.disease.PARENTS`, the MeSH table
  :data:`services.gateway.understanding.enhance.LAY_TO_MESH`) is one term, a phrase, ORed with its well-known
  synonym and its MeSH descriptor (``("heart attack" OR "myocardial infarction" OR "Myocardial
  Infarction"[mesh])``), rather than one ANDed word each;
- the disease normaliser's staging and severity qualifiers ("severe", "stage III", "metastatic",
  :func:`services.gateway.understanding.disease.is_staging_qualifier`) are left out: they narrow a search to the
  records that happen to spell them out;
- every other content word is a term of its own, in the question's order.

The first query ANDs every term (at most :data:`MAX_TERMS`); a query that finds nothing is relaxed by dropping
terms from the end (the question's later, usually qualifying, words), then keeping only its first half.
The same concepts are what :mod:`.topic` asks a stored source to cover for ``auto`` to skip PubMed.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.gateway.understanding.disease import PARENTS, SYNONYMS, is_staging_qualifier
from services.gateway.understanding.enhance import LAY_TO_MESH
from shared.text import STOP_WORDS, words

MAX_TERMS = 8
MAX_QUERIES = 3
MIN_WORD = 3
"""Shortest content word searched (shorter ones, "d" of "vitamin D", match too much alone)."""


@dataclass(frozen=True)
class Concept:
    """One thing the question is about: how it says it and the other names PubMed may index it under."""

    text: str
    synonyms: tuple[str, ...] = ()
    mesh: tuple[str, ...] = ()

    @property
    def phrasings(self) -> tuple[str, ...]:
        """Every name of the concept, the question's first."""
        return (self.text, *self.synonyms, *self.mesh)

    def clause(self) -> str:
        """The concept as one E-utilities clause: a word, a quoted phrase, or its names ORed in parentheses."""
        parts = [_quoted(self.text), *(_quoted(s) for s in self.synonyms), *(f'"{m}"[mesh]' for m in self.mesh)]
        return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"


def _quoted(phrase: str) -> str:
    return f'"{phrase}"' if " " in phrase else phrase


def _known_names() -> dict[tuple[str, ...], Concept]:
    """The phrases the rules know, as word tuples, with their synonyms and MeSH descriptors."""
    names: dict[tuple[str, ...], Concept] = {}
    for name in {*SYNONYMS, *PARENTS, *LAY_TO_MESH}:
        key = tuple(words(name))
        if not key:
            continue
        synonym = SYNONYMS.get(name)
        synonyms = (synonym.lower(),) if synonym and synonym.lower() != name else ()
        mesh = tuple(d for d in LAY_TO_MESH.get(name, ()) if d.lower() not in (name, *synonyms))[:1]
        names[key] = Concept(" ".join(key), synonyms, mesh)
    return names


KNOWN_NAMES = _known_names()
LONGEST_NAME = max(len(k) for k in KNOWN_NAMES)


def question_concepts(question: str) -> list[Concept]:
    """The concepts of ``question``, each once, in order, at most :data:`MAX_TERMS` (see the module's rules)."""
    ws = words(question)
    out: list[Concept] = []
    i = 0
    while i < len(ws):
        for n in range(min(LONGEST_NAME, len(ws) - i), 0, -1):  # the longest known name starting here
            known = KNOWN_NAMES.get(tuple(ws[i : i + n]))
            if known is not None:
                concept, i = known, i + n
                break
        else:
            w, i = ws[i], i + 1
            if w in STOP_WORDS or len(w) < MIN_WORD or is_staging_qualifier(w):
                continue
            concept = Concept(w)
        if concept.text not in (c.text for c in out):
            out.append(concept)
    return out[:MAX_TERMS]


def question_terms(question: str) -> list[str]:
    """The search terms of ``question`` offline: its concepts' clauses (:func:`question_concepts`)."""
    return [c.clause() for c in question_concepts(question)]


def model_terms(terms: list[str]) -> list[str]:
    """A model's search terms cleaned for E-utilities: trimmed, without quotes or brackets, each once."""
    out: list[str] = []
    for t in terms:
        clean = " ".join(t.replace('"', " ").replace("[", " ").replace("]", " ").split())
        if clean and clean.lower() not in (o.lower() for o in out):
            out.append(clean)
    return out[:MAX_TERMS]


def _clause(term: str) -> str:
    """A term as a clause: a clause built by :meth:`Concept.clause` as it is, a bare phrase quoted."""
    if term.startswith(("(", '"')):
        return term
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
