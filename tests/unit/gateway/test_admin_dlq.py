"""Issue #16 item 6 over HTTP: /v1/admin/dlq lists, shows and replays dead letters (Kafka faked here)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from services.gateway import deps, security
from services.gateway.routes import admin
from shared.events import DeadLetter
from shared.kafka import dlq
from shared.settings import Settings


def view(offset: int, error_type: str = "PoisonEvent", replayed: bool = False) -> dlq.LetterView:
    letter = DeadLetter(
        topic="documents.fetched",
        partition=1,
        offset=100 + offset,
        key=f"pmc:PMC{offset}",
        service="parser",
        error_type=error_type,
        error="cannot parse",
        attempts=1,
        payload_json={"document_id": f"pmc:PMC{offset}"},
    )
    return dlq.LetterView(
        dlq_topic="documents.fetched.dlq", dlq_partition=0, dlq_offset=offset, letter=letter, replayed=replayed
    )


class FakePool:
    async def execute(self, *args: Any) -> None:
        return None


class FakeProducer:
    """Stands in for the replay producer: records what would go back to Kafka."""

    def __init__(self, sent: list[tuple[str, bytes]]) -> None:
        self.sent = sent

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send_and_wait(self, topic: str, body: bytes, **kw: Any) -> None:
        self.sent.append((topic, body))


@pytest.fixture()
def letters(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {
        "views": [view(0), view(1, "RuntimeError"), view(2, replayed=True)],
        "replayed": [],
        "sent": [],
        "largest_read": 0,
    }

    async def read_letters(kafka: Any, topic: str, *, refs: Any = None, limit: int = 1000, **kw: Any) -> Any:
        seen["topic"] = topic
        seen["largest_read"] = max(seen["largest_read"], limit)
        views = seen["views"]
        if refs is not None:
            views = [v for v in views if (v.dlq_partition, v.dlq_offset) in set(refs)]
        return [v.model_copy() for v in views][:limit]

    async def letter_pages(kafka: Any, topic: str, *, page_size: int = dlq.PAGE_SIZE, **kw: Any) -> Any:
        seen["topic"] = topic
        views = seen["views"]
        for i in range(0, len(views), page_size):
            page = [v.model_copy() for v in views[i : i + page_size]]
            seen["largest_read"] = max(seen["largest_read"], len(page))
            yield page

    async def mark_replayed(pool: Any, views: Any) -> Any:
        return views

    async def replayed_refs(pool: Any, views: Any) -> Any:
        return {(v.dlq_topic, v.dlq_partition, v.dlq_offset) for v in views if v.replayed}

    async def send_back(producer: Any, kafka: Any, views: Any, **kw: Any) -> Any:
        seen["replayed"] += [v.ref for v in views]
        return await real_send_back(producer, kafka, views, **kw)

    real_send_back = dlq._send_back
    monkeypatch.setattr(dlq, "read_letters", read_letters)
    monkeypatch.setattr(dlq, "letter_pages", letter_pages)
    monkeypatch.setattr(dlq, "mark_replayed", mark_replayed)
    monkeypatch.setattr(dlq, "replayed_refs", replayed_refs)
    monkeypatch.setattr(dlq, "_send_back", send_back)
    monkeypatch.setattr(dlq, "_producer", lambda kafka: FakeProducer(seen["sent"]))
    return seen


def client(keys: str = "", host: str = "127.0.0.1", key: str | None = None) -> TestClient:
    """The admin router behind the gateway's real API guard (keys and their scopes), called as ``host``."""
    app = FastAPI()
    settings = Settings()  # type: ignore[call-arg]
    settings.gateway.api_key_hashes = keys
    pool = FakePool()  # the DLQ functions that read it are faked; replays are recorded through it
    app.include_router(admin.router)
    app.dependency_overrides[deps.get_settings] = lambda: settings
    app.dependency_overrides[deps.get_pool] = lambda: pool
    security.install(app, settings.gateway)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return TestClient(app, client=(host, 5000), headers=headers)


def test_list_and_show(letters: dict[str, Any]) -> None:
    with client() as http:
        listed = http.get("/v1/admin/dlq/documents.fetched").json()
        assert letters["topic"] == "documents.fetched.dlq" and listed["count"] == 3
        assert [(x["ref"], x["error_type"], x["replayed"]) for x in listed["letters"]] == [
            ("0:0", "PoisonEvent", False),
            ("0:1", "RuntimeError", False),
            ("0:2", "PoisonEvent", True),
        ]
        one = http.get("/v1/admin/dlq/documents.fetched.dlq/0:1").json()
        assert one["offset"] == 101 and one["payload_json"] == {"document_id": "pmc:PMC1"}
        assert http.get("/v1/admin/dlq/documents.fetched/0:9").status_code == 404
        assert http.get("/v1/admin/dlq/documents.fetched/x:y").status_code == 422


def test_replay_chosen_or_all_not_yet_replayed(letters: dict[str, Any]) -> None:
    with client() as http:
        assert http.post("/v1/admin/dlq/documents.fetched/replay", json={}).status_code == 422
        assert http.post("/v1/admin/dlq/documents.fetched/replay", json={"refs": ["0:7"]}).status_code == 404
        done = http.post("/v1/admin/dlq/documents.fetched/replay", json={"refs": ["1"]}).json()
        assert done == [{"ref": "0:1", "topic": "documents.fetched", "status": "replayed", "detail": ""}]
        letters["replayed"] = []
        http.post("/v1/admin/dlq/documents.fetched/replay", json={"all": True})
        assert letters["replayed"] == ["0:0", "0:1"]  # 0:2 was replayed before
        letters["replayed"] = []
        http.post(
            "/v1/admin/dlq/documents.fetched/replay", json={"all": True, "error_type": "PoisonEvent", "force": True}
        )
        assert letters["replayed"] == ["0:0", "0:2"]
        assert [topic for topic, _ in letters["sent"]] == ["documents.fetched"] * 5


def test_replaying_more_letters_than_a_page_holds_at_most_a_page(letters: dict[str, Any]) -> None:
    # Issue #40 item 6: replay used to read up to a million letters into the gateway's memory at once.
    count = 2 * dlq.PAGE_SIZE + 7
    letters["views"] = [view(i) for i in range(count)]
    with client() as http:
        done = http.post("/v1/admin/dlq/documents.fetched/replay", json={"all": True})
    assert done.status_code == 200, done.text
    assert [r["ref"] for r in done.json()] == [f"0:{i}" for i in range(count)]
    assert len(letters["sent"]) == count
    assert letters["largest_read"] <= dlq.PAGE_SIZE


def test_without_api_keys_only_local_clients_may_use_it(letters: dict[str, Any]) -> None:
    with client(host="10.1.2.3") as http:
        assert http.get("/v1/admin/dlq/documents.fetched").status_code == 403
        assert http.post("/v1/admin/dlq/documents.fetched/replay", json={"all": True}).status_code == 403
    assert letters["replayed"] == []
    # Keys configured: the API guard checks them, and the letters need a key with the admin scope.
    keys = f"{security.key_digest('reader')},{security.key_digest('operator')}:admin"
    with client(keys=keys, host="10.1.2.3") as http:
        assert http.get("/v1/admin/dlq/documents.fetched").status_code == 401
    with client(keys=keys, host="10.1.2.3", key="reader") as http:
        refused = http.get("/v1/admin/dlq/documents.fetched")
        assert refused.status_code == 403 and "admin" in refused.json()["detail"]
    with client(keys=keys, host="10.1.2.3", key="operator") as http:
        assert http.get("/v1/admin/dlq/documents.fetched").status_code == 200
    assert letters["replayed"] == []
