"""Query enhancement: the stored MeSH headings offline, Claude's rewrite and translation with a key."""

from __future__ import annotations

from services.gateway.intelligence.cache import MemoryCache
from services.gateway.understanding.enhance import QueryEnhancer, expanded_query, mesh_expand
from services.gateway.understanding.language import detect_language
from tests.fakes.workflow_anthropic import WorkflowAnthropic
from tests.unit.workflows.conftest import workflow_llm

VOCAB = {
    "Hydroxymethylglutaryl-CoA Reductase Inhibitors": 5,
    "Stroke": 7,
    "Humans": 100,
    "Dementia": 3,
    "Polycystic Ovary Syndrome": 2,
    "Metformin": 4,
    "Female": 80,
}


def test_mesh_expansion_uses_the_stored_headings() -> None:
    ds = mesh_expand("Do statins reduce dementia risk after a stroke?", VOCAB)
    assert set(ds) == {"Stroke", "Hydroxymethylglutaryl-CoA Reductase Inhibitors", "Dementia"}
    assert "Humans" not in mesh_expand("humans", VOCAB)
    q = expanded_query("Do statins reduce dementia risk after a stroke?", ds)
    assert q.endswith("Hydroxymethylglutaryl-CoA Reductase Inhibitors")
    assert mesh_expand("statins", {"Stroke": 1}) == []  # a heading the corpus lacks is never added


async def test_offline_enhancement_is_honest_about_translation() -> None:
    enhancer = QueryEnhancer(workflow_llm(None), MemoryCache())
    fr = detect_language("Quel est le traitement du paludisme chez la femme enceinte ?")
    out = await enhancer.enhance("Quel est le traitement du paludisme chez la femme enceinte ?", fr, VOCAB)
    assert out.method == "untranslated" and not out.translated and "needs the LLM" in (out.note or "")
    en = detect_language("Do statins reduce dementia risk?")
    out = await enhancer.enhance("Do statins reduce dementia risk?", en, VOCAB)
    assert out.method == "mesh" and "Hydroxymethylglutaryl-CoA Reductase Inhibitors" in out.search_query


async def test_llm_enhancement_translates(fake_llm: WorkflowAnthropic) -> None:
    enhancer = QueryEnhancer(workflow_llm(fake_llm), MemoryCache())
    q = "Quel est le traitement du paludisme chez la femme enceinte ?"
    out = await enhancer.enhance(q, detect_language(q), {})
    assert out.method == "llm" and out.translated
    assert out.english_question == "What is the treatment of malaria in pregnancy?"
