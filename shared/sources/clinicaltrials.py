"""ClinicalTrials.gov's identity: a record is a study, its NCT number (``NCT`` and eight digits, its ``source_id``),
cited ``[NCT:NCT01234567]`` and linked to its study page."""

from __future__ import annotations

from shared.sources.base import SourceRule

CLINICALTRIALS = SourceRule(
    name="clinicaltrials",
    citation_kind="NCT",
    record_url="https://clinicaltrials.gov/study/{id}",
    id_prefix="NCT",
    id_pattern=r"\d{8}",
    example_id="NCT01234567",
    url_patterns=(r"clinicaltrials\.gov/study/", r"clinicaltrials\.gov/ct2/show/"),
    cites_source_id=True,
)
