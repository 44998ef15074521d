"""The CLI's exit statuses, for scripts (the BSD ``sysexits.h`` values, so shells and CI know them).

=====  ==============  ==========================================================================
 0     OK              done
 1     FAILURE         the command ran but its work failed (e.g. an ingestion job with failures)
 2     USAGE           wrong arguments
 65    DATAERR         the gateway rejected the request (4xx other than 401/403/404/429)
 66    NOINPUT         not found (e.g. no such ingestion job)
 69    UNAVAILABLE     the gateway (or Kafka/PostgreSQL) cannot be reached, or answers 502/503/504
 70    SOFTWARE        the gateway failed (500), or an unexpected error in the CLI
 75    TEMPFAIL        rate limited (429) past the retries, or a time-out: trying later may work
 77    NOPERM          the API key is missing or refused (401/403)
 130   INTERRUPTED     Ctrl-C
=====  ==============  ==========================================================================
"""

from __future__ import annotations

OK = 0
FAILURE = 1
USAGE = 2
DATAERR = 65
NOINPUT = 66
UNAVAILABLE = 69
SOFTWARE = 70
TEMPFAIL = 75
NOPERM = 77
INTERRUPTED = 130
