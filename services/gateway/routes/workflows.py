"""The clinical workflows' routes, one slice each (:mod:`services.gateway.workflows`), in the order they are
registered (and listed in the OpenAPI document). A new workflow is its module there and one line here."""

from __future__ import annotations

from fastapi import APIRouter

from services.gateway.workflows import consult, evidence, query, recommend

router = APIRouter()
for _slice in (
    evidence,
    recommend,
    consult,
    query,
):
    router.include_router(_slice.router)
