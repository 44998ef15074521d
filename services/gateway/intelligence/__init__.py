"""What the workflows work with besides query understanding (:mod:`services.gateway.understanding`): pure
modules without Kafka, each with a rule-based fallback where a model would otherwise decide.

- :mod:`.llm`: the LLM steps, asked of the synthesizer (``llm.steps.requests``), absent without an API key;
- :mod:`.cache`: results cached with a time to live (PostgreSQL ``workflow_cache``, or memory in tests);
- :mod:`.agent`: the agentic loop over its tools (each model turn: the synthesizer's step);
- :mod:`.rxnav`: drug names as RxNorm concepts (NLM's RxNav), for the interaction check;
- :mod:`.interactions`: the drug interaction check on the stored FDA labels and the literature (a tool of the
  agent, and said first in the answer to an interaction question);
- :mod:`.guidelines`: the guideline Assessment & Plan (``/v1/guidelines/recommend``);
- :mod:`.consult`: the interview's clinical findings by rules (``/v1/guidelines/consult``).
"""
