"""FDA drug labels' identity: a record is a label set (an SPL set id, its ``source_id``), cited
``[FDA:<set id>]`` and linked to its DailyMed page, which always shows the set's current version. The document
made of one label is :mod:`shared.sources.fdalabel_document`."""

from __future__ import annotations

from shared.sources.base import SourceRule

FDA_LABEL = SourceRule(
    name="fda_label",
    citation_kind="FDA",
    record_url="https://dailymed.nlm.nih.gov/dailymed/lookup.cfm?setid={id}",
    url_patterns=(r"dailymed\.nlm\.nih\.gov/dailymed/lookup\.cfm\?setid=",),
    cites_source_id=True,
)
