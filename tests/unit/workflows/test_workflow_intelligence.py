"""The workflows' pure components besides query understanding: the TTL cache, the drug interaction client and
the guideline plan attribution."""

from __future__ import annotations

from services.gateway.intelligence.cache import MemoryCache, cache_key, cached
from services.gateway.intelligence.guidelines import attribute
from services.gateway.intelligence.rxnav import NOT_CONFIGURED, RxNavClient
from shared.models import QueryForm
from tests.fakes.rxnav_server import FakeRxNav
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


async def test_rxnav_unconfigured_says_so() -> None:
    check = await RxNavClient(None).check(["warfarin", "aspirin"])
    assert not check.configured and check.text() == NOT_CONFIGURED


async def test_rxnav_against_the_fake() -> None:
    with FakeRxNav() as fake:
        url = fake.url
        fake.add_drug("warfarin", "11289")
        fake.add_drug("aspirin", "1191")
        fake.add_interaction("11289", "1191", "high", "Aspirin increases the bleeding risk of warfarin.")
        check = await RxNavClient(fake.url).check(["Warfarin", "aspirin", "unobtainium"])
        assert check.resolved == {"warfarin": "11289", "aspirin": "1191"} and check.unresolved == ["unobtainium"]
        assert check.interactions[0].severity == "high"
        assert "bleeding risk" in check.text() and "unobtainium" in check.text()
        fake.fail_status = 503
        failed = await RxNavClient(fake.url).check(["warfarin", "aspirin"])
        assert failed.error and "could not be used" in failed.text()
    down = await RxNavClient(url, timeout_s=2).check(["warfarin", "aspirin"])  # server stopped
    assert down.error is not None and not down.interactions


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
