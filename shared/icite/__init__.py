"""iCite citation metrics: the NIH export parsed (``parse``) and loaded into ``citation_metrics`` (``store``)."""
