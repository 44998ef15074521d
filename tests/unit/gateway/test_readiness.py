"""The gateway's readiness waits for the emergency guard's model: until it has loaded, questions would wait for it
and a first ingest would share the cores with its loading."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx
import pytest
from fastapi import FastAPI

from services.gateway import deps
from services.gateway.app import create_app
from services.gateway.routes import ops
from services.gateway.runtime import Gateway
from shared.settings import Settings


class _Broker:
    async def ping(self, timeout: float) -> bool:
        return True


def _app(warmed_up: bool, monkeypatch: pytest.MonkeyPatch) -> FastAPI:
    async def database_ready(pool: object) -> bool:
        return True

    monkeypatch.setattr(ops, "database_ready", database_ready)
    app = create_app(Settings())  # type: ignore[call-arg]
    gateway = SimpleNamespace(kafka=SimpleNamespace(started=True, broker=_Broker()), pool=None, warmed_up=warmed_up)
    app.dependency_overrides[deps.get_gateway] = lambda: gateway
    return app


@pytest.mark.parametrize(("warmed_up", "status"), [(False, 503), (True, 200)])
async def test_readyz_waits_for_the_guard(warmed_up: bool, status: int, monkeypatch: pytest.MonkeyPatch) -> None:
    transport = httpx.ASGITransport(app=_app(warmed_up, monkeypatch))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        resp = await client.get("/readyz")
    assert resp.status_code == status
    assert resp.json() == {"ready": warmed_up, "checks": {"guard": warmed_up, "kafka": True, "postgres": True}}


async def test_warmed_up_once_the_guard_task_is_done() -> None:
    gateway = Gateway(Settings())  # type: ignore[call-arg]
    assert not gateway.warmed_up  # not started
    release = asyncio.Event()
    gateway._warm = asyncio.create_task(release.wait())  # type: ignore[assignment]
    await asyncio.sleep(0)
    assert not gateway.warmed_up  # loading
    release.set()
    await gateway._warm
    assert gateway.warmed_up
