"""The web page at ``/``: one static HTML file with its script inline, no build step."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter(tags=["web"])


@lru_cache(maxsize=1)
def page() -> str:
    return resources.files("services.gateway").joinpath("static/index.html").read_text("utf-8")


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index() -> HTMLResponse:
    return HTMLResponse(
        page(),
        headers={
            "Cache-Control": "no-cache",
            "Content-Security-Policy": "default-src 'self'; script-src 'self' 'unsafe-inline'; "
            "style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            "connect-src 'self'; frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff",
        },
    )
