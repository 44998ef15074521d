"""FDA drug labels' identity: a record is a label set, its SPL set id (a UUID, its ``source_id``; a new version of
the label keeps the set id and replaces the stored document), cited ``[FDA:<set id>]`` and linked to its
DailyMed page."""

from __future__ import annotations

from shared.sources.base import SourceRule

FDA_LABEL = SourceRule(
    name="fda_label",
    citation_kind="FDA",
    record_url="https://dailymed.nlm.nih.gov/dailymed/lookup.cfm?setid={id}",
    id_pattern=r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    lowercase_ids=True,
    example_id="1f3b4c2e-9a1d-4e8f-b2c7-5d6e7f8a9b0c",
    url_patterns=(
        r"dailymed\.nlm\.nih\.gov/dailymed/lookup\.cfm\?setid=",
        r"dailymed\.nlm\.nih\.gov/dailymed/drugInfo\.cfm\?setid=",
    ),
    cites_source_id=True,
)
