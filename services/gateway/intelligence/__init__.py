"""What the workflows work with besides query understanding (:mod:`services.gateway.understanding`): pure
modules without Kafka, each with a rule-based fallback where a model would otherwise decide.

- :mod:`.llm`: the LLM steps, asked of the synthesizer (``llm.steps.requests``), absent without an API key;
- :mod:`.cache`: results cached with a time to live (PostgreSQL ``workflow_cache``, or memory in tests);
- :mod:`.agent`: the agentic loop over its tools (each model turn: the synthesizer's step);
- :mod:`.rxnav`: an RxNav-style drug interaction client (a tool of the agent, and the interaction check);
- :mod:`.guidelines`: the guideline Assessment & Plan (``/v1/guidelines/recommend``);
- :mod:`.consult`: the interview's clinical findings by rules (``/v1/guidelines/consult``).
"""
