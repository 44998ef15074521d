"""Workflow intelligence of the gateway, as pure modules without Kafka.

- :mod:`.llm`: Claude for small structured steps (forced tool use), absent without an API key;
- :mod:`.cache`: results cached with a time to live (PostgreSQL ``workflow_cache``, or memory in tests);
- :mod:`.disease`: disease-name normalisation, hit-count check and broadening with a blocklist;
- :mod:`.expansion`: PubMed search-term expansion over five axes with per-axis caps;
- :mod:`.classify`: question classification and drug-pair extraction;
- :mod:`.language`: language detection;
- :mod:`.enhance`: query rewriting (Claude) or MeSH-based expansion from the stored headings;
- :mod:`.rxnav`: an RxNav-style drug interaction client;
- :mod:`.agent`: the agentic loop and its tools;
- :mod:`.guidelines`: the condition + findings query and the Assessment & Plan.
"""
