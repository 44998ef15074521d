"""``DELETE /v1/conversations/{id}``: who may delete what, 204/404, and a turn answered while its conversation
was deleted (not stored, 404). The gateway app in-process with the in-memory store; the PostgreSQL store's
deletion and row locking are in ``tests/integration/test_conversation_store.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import FastAPI

from services.gateway import deps
from services.gateway.security import key_digest
from shared import metrics
from shared.events import SynthesisReply, SynthesisRequest
from shared.settings import GatewaySettings
from tests.unit.gateway.conftest import FakeKafka, MemoryStore, build_app, client
from tests.unit.gateway.test_gateway_answers import parse_sse

QUESTION = "Does telephone counseling increase mammography screening?"
ALICE, BOB, ADMIN = "alice-key-1234567890", "bob-key-0987654321", "admin-key-5555555555"


def deleted(reason: str) -> float:
    value = metrics.registry.get_sample_value("evidentia_conversations_deleted_total", {"reason": reason})
    return value or 0.0


def keyed() -> GatewaySettings:
    return GatewaySettings(  # type: ignore[call-arg]
        api_key_hashes=f"{key_digest(ALICE)}, {key_digest(BOB)}:ingest, {key_digest(ADMIN)}:admin",
        rate_limit_per_minute=0,
    )


async def _start(app: FastAPI, key: str | None = None) -> str:
    async with client(app, key) as http:
        r = await http.post("/v1/ask", json={"question": QUESTION})
        assert r.status_code == 200, r.text
        cid: str = r.json()["conversation_id"]
        r = await http.post("/v1/ask", json={"question": "And in older women?", "conversation_id": cid})
        assert r.status_code == 200 and r.json()["turn"] == 2
        return cid


async def test_delete_removes_the_conversation_with_its_turns() -> None:
    app, _, store = build_app()
    cid = await _start(app)
    other = await _start(app)
    before = deleted("request")
    async with client(app) as http:
        r = await http.delete(f"/v1/conversations/{cid}")
        assert r.status_code == 204 and r.content == b""
        assert cid not in store.conversations and other in store.conversations  # only that one
        assert (await http.get(f"/v1/conversations/{cid}")).status_code == 404
        r = await http.post("/v1/ask", json={"question": "What about letters?", "conversation_id": cid})
        assert r.status_code == 404  # a follow-up cannot bring it back
        again = await http.delete(f"/v1/conversations/{cid}")
        assert again.status_code == 404 and cid in again.json()["detail"]
        assert (await http.delete("/v1/conversations/no-such-id")).status_code == 404
        assert (await http.get(f"/v1/conversations/{other}")).status_code == 200
    assert deleted("request") == before + 1


async def test_only_the_owner_or_an_admin_key_may_delete() -> None:
    app, _, store = build_app(gateway=keyed())
    mine = await _start(app, ALICE)
    theirs = await _start(app, ALICE)
    async with client(app, BOB) as bob, client(app, ADMIN) as admin, client(app, ALICE) as alice:
        assert (await bob.delete(f"/v1/conversations/{mine}")).status_code == 404  # not Bob's: as if unknown
        assert (await alice.get(f"/v1/conversations/{mine}")).status_code == 200
        assert (await client(app).delete(f"/v1/conversations/{mine}")).status_code == 401  # no key at all
        assert (await alice.delete(f"/v1/conversations/{mine}")).status_code == 204
        assert (await admin.delete(f"/v1/conversations/{theirs}")).status_code == 204  # admin: any conversation
        assert (await alice.get(f"/v1/conversations/{theirs}")).status_code == 404
    assert store.conversations == {}


class DeletingKafka(FakeKafka):
    """Deletes the conversation ``victim`` while its turn is being synthesised (as another request would)."""

    def __init__(self, base: FakeKafka, store: MemoryStore):
        super().__init__(base.synth, base.hits)
        self.store = store
        self.victim: str | None = None

    async def _strike(self) -> None:
        if self.victim is not None:
            assert await self.store.delete(self.victim, None)
            self.victim = None

    async def synthesize(self, request: SynthesisRequest) -> SynthesisReply:
        await self._strike()
        return await super().synthesize(request)

    async def synthesize_stream(self, request: SynthesisRequest) -> AsyncIterator[tuple[str, bytes]]:
        await self._strike()
        async for event in super().synthesize_stream(request):
            yield event


async def test_a_turn_answered_while_its_conversation_is_deleted_is_not_stored() -> None:
    app, base, store = build_app()
    kafka = DeletingKafka(base, store)
    app.dependency_overrides[deps.get_kafka] = lambda: kafka
    whole, streamed = await _start(app), await _start(app)
    async with client(app) as http:
        kafka.victim = whole
        r = await http.post("/v1/ask", json={"question": "What about letters?", "conversation_id": whole})
        assert kafka.victim is None  # the deletion struck while the turn was in flight
        assert r.status_code == 404, r.text
        assert "deleted" in r.json()["detail"] and "not stored" in r.json()["detail"]
        assert whole not in store.conversations  # not resurrected by the late turn

        kafka.victim = streamed
        r = await http.post("/v1/ask/stream", json={"question": "And reminders?", "conversation_id": streamed})
        assert kafka.victim is None
        events = parse_sse(r.text)
        assert events[0][0] == "retrieval_done"
        assert events[-1][0] == "error" and events[-1][1]["status"] == 404, events[-1]
        assert events[-1][1]["type"] == "ConversationGone"
        assert streamed not in store.conversations


async def test_cors_lets_a_browser_delete() -> None:
    app, _, _ = build_app(gateway=GatewaySettings(cors_origins="https://app.example.org"))  # type: ignore[call-arg]
    async with client(app) as http:
        r = await http.options(
            "/v1/conversations/abc",
            headers={"Origin": "https://app.example.org", "Access-Control-Request-Method": "DELETE"},
        )
    assert r.status_code == 200, r.text
    assert "DELETE" in r.headers["access-control-allow-methods"]
