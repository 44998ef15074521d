"""The workflows' pure components besides query understanding: the TTL cache, the guideline plan attribution
(the drug interaction check: ``test_interaction_check.py``)."""

from __future__ import annotations

from services.gateway.intelligence.cache import MemoryCache, cache_key, cached
from services.gateway.intelligence.guidelines import attribute
from shared.models import QueryForm
from tests.unit.workflows.conftest import GUIDELINES


async def test_cache_expires_after_its_ttl() -> None:
    now = [1000.0]
    cache = MemoryCache(clock=lambda: now[0])
    calls = []

    async def make() -> int:
        calls.append(1)
        return 7

    assert await cached(cache, "pubmed_count", cache_key("q"), 10, make) == (7, False)
    assert await cached(cache, "pubmed_count", cache_key("q"), 10, make) == (7, True)
    now[0] += 11
    assert await cached(cache, "pubmed_count", cache_key("q"), 10, make) == (7, False)
    assert len(calls) == 2


# --- guidelines -----------------------------------------------------------------------------------------


def test_condition_query_and_attribution() -> None:
    findings = ["symptom: fever 3 days", "medical_history: pregnant first trimester"]
    q = QueryForm.condition_findings("Malaria", findings).text()
    assert q == "Malaria. symptom: fever 3 days. medical_history: pregnant first trimester."
    answer = (
        "Extractive answer (no language model configured): quoted.\n\n"
        "- For a pregnant woman in the first trimester, artemether plus lumefantrine is recommended. "
        "[NBK:NBK999004]"
    )
    [item] = attribute(answer, GUIDELINES)
    assert item.citation_ids == ["NBK:NBK999004"]
    assert item.sections == [GUIDELINES[1].section]
