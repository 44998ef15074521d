"""Doc values: chunks' filter columns held in memory (``columns``), kept current by a change feed (``follower``)."""
