"""The clinical workflows, one slice each: a module holding the workflow's request and response bodies, its
service (a :class:`~.base.Workflow` whose ``run`` answers one request) and its routes.

- :mod:`.evidence`: ``/v1/evidence`` and its stream (drug-disease evidence);
- :mod:`.recommend`: ``/v1/guidelines/recommend`` (condition + findings -> Assessment & Plan);
- :mod:`.consult`: ``/v1/guidelines/consult`` (an interview -> findings and a diagnosis -> the recommendation);
- :mod:`.query`: ``/v1/query`` (query understanding, routing and agentic mode).

They stand on :mod:`.base` (context, steps, progress, timing, cost) and :mod:`.backend` (what they need of the
running system); :mod:`services.gateway.routes.workflows` registers their routes, one line each.
"""
