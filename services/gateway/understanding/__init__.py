"""Query understanding: what a question (or a workflow's query terms) is, and what is searched for it.

Everything here reads the asker's words and decides what retrieval or PubMed is asked; nothing here answers.
Pure modules without Kafka (an LLM step goes through :class:`~services.gateway.intelligence.llm.WorkflowLlm`,
and each has a rule-based fallback used offline):

- :mod:`.classify`: the question's class (and the drugs of an interaction question);
- :mod:`.language`: the question's language;
- :mod:`.enhance`: what is searched: Claude's rewrite and translation, or the stored MeSH headings offline;
- :mod:`.rewrite`: a follow-up rewritten to stand alone (``/v1/ask``);
- :mod:`.analysis`: the three above as one :class:`~.analysis.Analysis`, shared by ``/v1/query`` and ``/v1/ask``;
- :mod:`.routing`: what the class routes to (guideline sources first, the interaction check);
- :mod:`.disease` and :mod:`.expansion`: a disease name normalised for PubMed and a drug-disease pair expanded
  into PubMed searches (``/v1/evidence``).
"""
