"""FDA drug labels through the running services: ingested from the fake openFDA endpoint, found by search and
the ``drugs`` filter, cited by their set id, replaced by a new version, and read by the drug interaction check
(the gateway on the fake RxNav).

The fetcher is restarted with ``EVIDENTIA_OPENFDA_URL`` and the gateway with ``EVIDENTIA_WORKFLOW_RXNAV_URL`` for
this module, then restarted back. The labels are the abridged fixtures of ``tests/fixtures/openfda``.

The last test has the interaction check fetch a label at question time: metronidazole's (``metronidazole.json``),
served by the fake openFDA only, which no module ingests; the PubMed search of the pair finds nothing in the fake
E-utilities, so the shared store gains that one label and no paper.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fakes.openfda_server import FakeOpenFda, load
from tests.fakes.rxnav_server import FakeRxNav
from tests.integration.conftest import Stack
from tests.integration.gateways import extra_gateway

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WARFARIN_SET = "d2a1e8f4-2c3b-4e0a-9a51-6f0c2b7d9e11"
FLUCONAZOLE_SET = "3f8b2a90-51c4-4d6e-b7a2-1c9e0d4f5a33"
AMOXICILLIN_SET = "5c0d9e21-7a4f-4b83-a1d6-2e8f3c9b7a05"
METRONIDAZOLE_SET = "8e4c1f27-6b3a-4d95-a0e2-7f1d9c3b5e48"  # at the fake openFDA only, fetched at question time
ENV = {"fetcher": "EVIDENTIA_OPENFDA_URL", "gateway": "EVIDENTIA_WORKFLOW_RXNAV_URL"}
# The interaction check's wait for a label it fetched: room for a loaded test machine (the bound is unit-tested).
WAIT = {"gateway": {"EVIDENTIA_ASK_FETCH_LABEL_WAIT_S": "90"}}


@pytest.fixture(scope="module")
def fakes(stack: Stack) -> Iterator[tuple[FakeOpenFda, FakeRxNav]]:
    openfda, rx = FakeOpenFda().start(), FakeRxNav().start()
    rx.add_drug("warfarin", "11289", brands=["Coumadin"], classes=["Vitamin K Antagonist"])
    rx.add_drug("fluconazole", "4450", brands=["Diflucan"], classes=["Azole Antifungal"])
    rx.add_drug("amoxicillin", "723", brands=["Amoxil"])
    rx.add_drug("metronidazole", "6922", brands=["Flagyl"], classes=["Nitroimidazole Antimicrobial"])
    urls = {"fetcher": openfda.url, "gateway": rx.url}
    saved = {name: dict(stack.services.processes[name].env) for name in ENV}
    try:
        for name, variable in ENV.items():
            proc = stack.services.processes[name]
            proc.env = {**proc.env, variable: urls[name], **WAIT.get(name, {})}
            stack.services.restart(name)
        yield openfda, rx
    finally:
        for name in ENV:
            stack.services.processes[name].env = saved[name]
            stack.services.restart(name)
        openfda.stop()
        rx.stop()


def ingest(stack: Stack, body: dict[str, Any]) -> dict[str, Any]:
    with stack.http() as http:
        r = http.post("/v1/ingest", json={"source": "fda_label", **body})
    assert r.status_code == 202, r.text
    status = stack.wait_job(r.json()["job_id"])
    assert status["state"] != "failed" and status["done"], status
    return status


def search(stack: Stack, query: str, **filters: Any) -> list[dict[str, Any]]:
    with stack.http() as http:
        r = http.post(
            "/v1/search", json={"query": query, "top_n": 20, "filters": {"sources": ["fda_label"], **filters}}
        )
    assert r.status_code == 200, r.text
    hits: list[dict[str, Any]] = r.json()["hits"]
    return hits


def test_labels_are_ingested_found_filtered_and_cited(stack: Stack, fakes: tuple[FakeOpenFda, FakeRxNav]) -> None:
    openfda, _ = fakes
    ingest(stack, {"query": "warfarin"})
    ingest(stack, {"ids": [FLUCONAZOLE_SET, AMOXICILLIN_SET]})
    assert any("set_id" in (r.get("search") or [""])[0] for r in openfda.requests)
    hits = search(stack, "CYP2C9 inhibitors increase warfarin exposure")
    assert {h["source_id"] for h in hits} <= {WARFARIN_SET, FLUCONAZOLE_SET, AMOXICILLIN_SET}
    top = hits[0]
    assert top["source_id"] == WARFARIN_SET and top["section"] == "Drug interactions"
    assert top["url"] == f"https://dailymed.nlm.nih.gov/dailymed/lookup.cfm?setid={WARFARIN_SET}"
    # the drugs filter: by generic name without its salt, by brand, by RxCUI; a drug without a label: nothing
    for drug in ("warfarin", "Diflucan", "308182"):
        found = {h["source_id"] for h in search(stack, "contraindicated", drugs=[drug])}
        assert len(found) == 1, (drug, found)
    assert search(stack, "contraindicated", drugs=["unobtainium"]) == []
    sections = {h["section"] for h in search(stack, "warfarin", drugs=["warfarin"], sections=["Boxed warning"])}
    assert sections == {"Boxed warning"}


def test_a_new_label_version_replaces_the_old_one(stack: Stack, fakes: tuple[FakeOpenFda, FakeRxNav]) -> None:
    openfda, _ = fakes
    ingest(stack, {"ids": [WARFARIN_SET]})  # stored already (the test above, or now)
    before = search(stack, "voriconazole amiodarone fluconazole", drugs=["warfarin"], sections=["Drug interactions"])
    assert before and not any("voriconazole" in h["text"] for h in before)
    openfda.replace(load("warfarin-v13.json"))
    ingest(stack, {"ids": [WARFARIN_SET], "refresh": True})
    after = search(stack, "voriconazole amiodarone fluconazole", drugs=["warfarin"], sections=["Drug interactions"])
    assert after and all(h["source_id"] == WARFARIN_SET for h in after)
    assert any("voriconazole" in h["text"] for h in after)
    assert not {h["chunk_id"] for h in before} & {h["chunk_id"] for h in after}  # the old version's chunks are gone
    everything = search(stack, "warfarin sodium bleeding", drugs=["warfarin"])
    assert {h["document_id"] for h in everything} == {f"fda_label:{WARFARIN_SET}"}  # one document, not two


def test_the_interaction_check_answers_from_the_labels(stack: Stack, fakes: tuple[FakeOpenFda, FakeRxNav]) -> None:
    _, rx = fakes
    ingest(stack, {"ids": [WARFARIN_SET, FLUCONAZOLE_SET, AMOXICILLIN_SET]})
    with stack.http() as http:
        found = http.post("/v1/query", json={"question": "Does warfarin interact with fluconazole?"}).json()
        none = http.post("/v1/query", json={"question": "Does warfarin interact with amoxicillin?"}).json()
        agent = http.post(
            "/v1/query", json={"question": "Is there an interaction between Coumadin and Diflucan?", "mode": "agent"}
        ).json()
        asked = http.post("/v1/ask", json={"question": "Does warfarin interact with fluconazole?"}, timeout=120).json()
    check = found["interaction"]
    assert check["status"] == "found" and check["configured"] is True
    assert check["rxcuis"] == {"warfarin": "11289", "fluconazole": "4450"}
    assert [(f["label_of"], f["other"], f["citation_id"]) for f in check["findings"]] == [
        ("warfarin", "fluconazole", f"FDA:{WARFARIN_SET}")
    ]
    assert found["answer"].startswith("Drug interaction check: Labelled interactions found:")
    assert f"fda_label:{WARFARIN_SET}" in {s["document_id"] for s in found["sources"]}
    assert not [r for r in found["citation_check"]["removed"] if r.startswith("FDA:")]  # label ids verify
    assert none["interaction"]["status"] == "none_found" and none["interaction"]["findings"] == []
    assert set(none["interaction"]["labels_read"]) == {"warfarin", "amoxicillin"}
    [step] = [s for s in agent["agent"]["steps"] if s["tool"] == "check_drug_interaction"]
    assert f"FDA:{WARFARIN_SET}" in step["source_ids"] and "Labelled interactions found" in step["output"]
    # /v1/ask says the same check first, its citation in the finding (the words name none)
    assert asked["interaction"]["status"] == "found" and asked["answer"].startswith("Drug interaction check:")
    assert asked["interaction"]["findings"][0]["citation_id"] == f"FDA:{WARFARIN_SET}"
    assert any(path == "/REST/rxclass/class/byRxcui.json" for path, _ in rx.requests)


def test_the_interaction_check_fetches_a_label_not_stored(stack: Stack, fakes: tuple[FakeOpenFda, FakeRxNav]) -> None:
    openfda, _ = fakes
    openfda.replace(load("metronidazole.json"))  # served from now on; not stored
    ingest(stack, {"ids": [WARFARIN_SET]})
    question = "Does warfarin interact with metronidazole?"

    def asked_openfda() -> int:
        return sum(1 for r in openfda.requests if "metronidazole" in (r.get("search") or [""])[0].lower())

    # A key without the `ingest` scope, `fetch: never`, and /v1/query under the stack's default (`never`): the
    # store only, the label named as missing and why, openFDA not asked.
    reader = "interaction-reader-0123456789"
    env = {"EVIDENTIA_GATEWAY_API_KEY_HASHES": hashlib.sha256(reader.encode()).hexdigest()}
    with (
        extra_gateway(stack, "interaction-scopes", env) as url,
        httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {reader}"}) as http,
    ):
        no_scope = http.post("/v1/ask", json={"question": question, "fetch": "auto"}).json()["interaction"]
    with stack.http() as http:
        never = http.post("/v1/ask", json={"question": question, "fetch": "never"}, timeout=120).json()["interaction"]
        query = http.post("/v1/query", json={"question": question}, timeout=120).json()["interaction"]
    for check in (no_scope, never, query):
        assert check["missing_labels"] == ["metronidazole"] and check["label_fetch"] is None, check
        assert "no FDA label is stored" in check["missing_reasons"]["metronidazole"]
        assert check["status"] == "none_found" and check["literature_fetch"] is None  # warfarin's label was read
    assert asked_openfda() == 0
    assert not search(stack, "warfarin", drugs=["metronidazole"])

    # A caller that may fetch: one openFDA job for the missing label, waited for, read; PubMed searched for the pair.
    with stack.http() as http:
        body = http.post("/v1/ask", json={"question": question, "fetch": "auto"}, timeout=240).json()
    check = body["interaction"]
    assert asked_openfda() >= 1
    assert check["label_fetch"]["drugs"] == ["metronidazole"] and check["label_fetch"]["done"] is True
    assert check["status"] == "found" and check["missing_labels"] == [] and check["missing_reasons"] == {}
    assert [(f["label_of"], f["other"], f["citation_id"]) for f in check["findings"]] == [
        ("metronidazole", "warfarin", f"FDA:{METRONIDAZOLE_SET}")
    ]
    assert check["findings"][0]["url"] == f"https://dailymed.nlm.nih.gov/dailymed/lookup.cfm?setid={METRONIDAZOLE_SET}"
    literature = check["literature_fetch"]
    assert literature["searched"] is True and literature["query"] == "(warfarin AND metronidazole)"
    assert literature["found"] == 0 and literature["ingested"] == []
    assert any(r.param("term") == "(warfarin AND metronidazole)" for r in stack.fake.requests_to("esearch"))
    # stored now: the next question reads it without fetching, and cites it
    with stack.http() as http:
        again = http.post("/v1/query", json={"question": question}, timeout=120).json()
    assert again["interaction"]["status"] == "found" and again["interaction"]["label_fetch"] is None
    assert again["interaction"]["findings"][0]["citation_id"] == f"FDA:{METRONIDAZOLE_SET}"
    assert f"fda_label:{METRONIDAZOLE_SET}" in {s["document_id"] for s in again["sources"]}
    assert not [r for r in again["citation_check"]["removed"] if r.startswith("FDA:")]
    assert {h["source_id"] for h in search(stack, "warfarin", drugs=["metronidazole"])} == {METRONIDAZOLE_SET}
