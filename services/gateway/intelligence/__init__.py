"""Workflow intelligence of the gateway: rules and fallbacks, as pure modules without Kafka.

- :mod:`.llm`: the LLM steps, asked of the synthesizer (``llm.steps.requests``), absent without an API key;
- :mod:`.cache`: results cached with a time to live (PostgreSQL ``workflow_cache``, or memory in tests);
- :mod:`.disease`: disease-name normalisation, hit-count check and broadening with a blocklist;
- :mod:`.expansion`: PubMed search-term expansion over five axes with per-axis caps;
- :mod:`.classify`: question classification and drug-pair extraction;
- :mod:`.language`: language detection;
- :mod:`.enhance`: query rewriting (the synthesizer's step) or MeSH-based expansion from the stored headings;
- :mod:`.rxnav`: an RxNav-style drug interaction client;
- :mod:`.agent`: the agentic loop and its tools (each model turn: the synthesizer's step);
- :mod:`.guidelines`: the condition + findings query and the Assessment & Plan.
"""
