"""An async, polite NCBI E-utilities client (esearch, efetch, elink) on httpx.

Every call carries ``tool``, ``email`` and, when set, ``api_key``; goes through the process-wide
token bucket (3/s, 10/s with a key; :mod:`services.fetcher.ratelimit`); and is retried with
exponential back-off and jitter after 429, 5xx, timeouts and connection errors, honouring
``Retry-After``. NCBI sometimes answers a rate-limit breach with HTTP 200 and an ``API rate limit
exceeded`` body; that counts as a 429. Every call is counted in ``evidentia_ncbi_requests_total``.

A search whose answer carries an ``ErrorList`` (``PhraseNotFound``, ``FieldNotFound``...) or an
``ERROR`` raises :class:`EutilsQueryError` with NCBI's text: NCBI silently drops the part of a query
it does not understand, and a medical search that quietly lost a term is worse than no answer.

PMC full text: PMIDs are mapped to PMC ids with ``elink`` (``pubmed_pmc``; one ``id`` parameter per
PMID so the answer keeps the mapping) and fetched with ``efetch db=pmc``. Whether an article is
open access is decided from the JATS PMC itself returns (see :func:`is_open_access`); only those are
stored in full.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Self

import httpx
from lxml import etree

from services.fetcher.ratelimit import Limiter, Sleep, process_limiter, rate_for
from shared.http_retry import RetryableResponse, RetryWait, retry_async
from shared.kafka.errors import TransientError
from shared.metrics import NCBI_REQUESTS
from shared.settings import NcbiSettings
from shared.xmlsafe import MalformedXmlError, UnsafeXmlError, parse_xml

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


def retryable(status: int) -> bool:
    """429 and every 5xx: the server's trouble (or its rate limit), not the request's."""
    return status in RETRY_STATUSES or 500 <= status < 600


_RATE_LIMIT_BODY = re.compile(rb"API rate limit exceeded", re.IGNORECASE)
_PMID = re.compile(r"^[1-9][0-9]{0,9}$")


# ------------------------------------------------------------------------------------------ errors


class EutilsError(RuntimeError):
    """An E-utilities call failed (after its retries, when the failure was transient)."""

    def __init__(self, message: str, *, utility: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.utility = utility
        self.status = status


class EutilsUnavailable(EutilsError, TransientError):
    """NCBI could not be reached or kept failing (5xx, timeouts, connection errors, a long ``Retry-After``)
    after this call's own retries. Transient: the event that needed it is retried later, never
    dead-lettered (NCBI being down says nothing about the event)."""


class EutilsQueryError(EutilsError, ValueError):
    """NCBI rejected the query or part of it: its ``ErrorList`` / ``ERROR`` text is in the message.

    Also a ``ValueError``: retrying it cannot help, the request itself is wrong.
    """

    def __init__(
        self,
        message: str,
        *,
        utility: str = "esearch",
        term: str = "",
        errors: dict[str, list[str]] | None = None,
        warnings: dict[str, list[str]] | None = None,
        count: int | None = None,
    ) -> None:
        super().__init__(message, utility=utility)
        self.term = term
        self.errors = errors or {}
        self.warnings = warnings or {}
        self.count = count


# ------------------------------------------------------------------------------------------ retries


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 5
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    retry_after_max_s: float = 120.0

    @classmethod
    def from_settings(cls, settings: NcbiSettings) -> RetryPolicy:
        """The retry policy the NCBI settings ask for (retries, backoff base and cap, Retry-After cap)."""
        return cls(
            max_retries=settings.ncbi_max_retries,
            backoff_base_s=settings.ncbi_backoff_base_s,
            backoff_max_s=settings.ncbi_backoff_max_s,
            retry_after_max_s=settings.ncbi_retry_after_max_s,
        )

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Delay before retry ``attempt`` (0-based): ``base * 2**attempt`` capped, "equal jitter"."""
        ceiling = min(self.backoff_max_s, self.backoff_base_s * (2.0**attempt))
        return float(ceiling / 2 + rng.uniform(0, ceiling / 2))

    def wait(self, rng: random.Random) -> RetryWait:
        """The waits between attempts: :meth:`backoff`, or the ``Retry-After`` asked (up to its cap) if longer."""
        return RetryWait(backoff=lambda attempt: self.backoff(attempt, rng), retry_after_max_s=self.retry_after_max_s)


async def send_with_retries(
    http: httpx.AsyncClient,
    method: Literal["GET", "POST"],
    url: str,
    *,
    utility: str,
    policy: RetryPolicy,
    limiter: Limiter | None,
    sleep: Sleep,
    rng: random.Random,
    params: dict[str, str | list[str]] | None = None,
    data: dict[str, str | list[str]] | None = None,
    rate_limited_body: bool = False,
) -> httpx.Response:
    """One request with retries (:mod:`shared.http_retry`); returns a 2xx response or raises :class:`EutilsError`."""

    async def attempt() -> httpx.Response:
        if limiter is not None:
            await limiter.acquire()
        try:
            response = await http.request(method, url, params=params, data=data)
        except httpx.TimeoutException as exc:
            NCBI_REQUESTS.labels(utility=utility, status="timeout").inc()
            raise RetryableResponse(f"timed out ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            NCBI_REQUESTS.labels(utility=utility, status="error").inc()
            raise RetryableResponse(f"connection failed: {exc}") from exc
        status = response.status_code
        if (
            status == 200
            and rate_limited_body
            and len(response.content) < 1024  # the error body is tiny; records are not
            and _RATE_LIMIT_BODY.search(response.content)
        ):
            status = 429  # NCBI's "API rate limit exceeded" with a 200
        NCBI_REQUESTS.labels(utility=utility, status=str(status)).inc()
        if 200 <= status < 300:
            return response
        if not retryable(status):
            snippet = response.text[:300].strip()
            raise EutilsError(f"{utility}: HTTP {status}: {snippet}", utility=utility, status=status)
        failure = RetryableResponse.from_headers(f"HTTP {status}", response.headers, status=status)
        if failure.retry_after is not None and failure.retry_after > policy.retry_after_max_s:
            raise EutilsUnavailable(
                f"{utility}: HTTP {status} with Retry-After {failure.retry_after:.0f}s "
                f"(over the {policy.retry_after_max_s:.0f}s we wait)",
                utility=utility,
                status=status,
            )
        raise failure

    def before_wait(retry: int, failure: RetryableResponse, delay: float) -> None:
        log.warning(
            "E-utilities call failed, retrying",
            extra={"utility": utility, "problem": failure.problem, "attempt": retry, "delay_s": delay},
        )

    try:
        return await retry_async(
            attempt, wait=policy.wait(rng), sleep=sleep, max_attempts=policy.max_retries + 1, before_wait=before_wait
        )
    except RetryableResponse as failure:
        raise EutilsUnavailable(
            f"{utility}: gave up after {policy.max_retries + 1} attempts: {failure.problem}", utility=utility
        ) from None


# ------------------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class SearchResult:
    """What an esearch found: ``count`` is NCBI's total; ``pmids`` the ids taken (up to the cap)."""

    count: int
    pmids: list[str]
    webenv: str | None = None
    query_key: str | None = None
    query_translation: str | None = None
    warnings: dict[str, list[str]] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class PmcArticle:
    """One JATS ``article`` from ``efetch db=pmc``."""

    pmcid: str  # 'PMC1790863'
    pmid: str | None
    open_access: bool
    license: str | None
    xml: bytes


def _texts(node: etree._Element | None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if node is None:
        return out
    for child in node:
        if isinstance(child.tag, str):
            out.setdefault(child.tag, []).append((child.text or "").strip())
    return out


def _describe(errors: dict[str, list[str]]) -> str:
    parts = [f"{tag}: {', '.join(v for v in values if v) or '(empty)'}" for tag, values in errors.items()]
    return "; ".join(parts)


@dataclass(frozen=True)
class _Page:
    count: int
    ids: list[str]
    webenv: str | None
    query_key: str | None
    translation: str | None
    errors: dict[str, list[str]]
    warnings: dict[str, list[str]]


def parse_esearch(content: bytes, term: str = "") -> _Page:
    """Parse one esearch XML answer; raise :class:`EutilsQueryError` on an ``ERROR`` element."""
    try:
        root = parse_xml(content)
    except (MalformedXmlError, UnsafeXmlError, ValueError) as exc:
        raise EutilsError(f"esearch: unreadable answer: {exc}", utility="esearch") from exc
    if root.tag != "eSearchResult":
        raise EutilsError(f"esearch: unexpected answer <{root.tag}>", utility="esearch")
    error = root.findtext("ERROR")
    if error is not None:
        message = f"esearch refused {term!r}: {error.strip()}"
        raise EutilsQueryError(message, term=term, errors={"ERROR": [error]})
    count_text = root.findtext("Count")
    try:
        count = int(count_text or "")
    except ValueError as exc:
        raise EutilsError(f"esearch: no Count in the answer for {term!r}", utility="esearch") from exc
    ids = [(e.text or "").strip() for e in root.findall("IdList/Id")]
    return _Page(
        count=count,
        ids=[i for i in ids if i],
        webenv=root.findtext("WebEnv"),
        query_key=root.findtext("QueryKey"),
        translation=root.findtext("QueryTranslation"),
        errors=_texts(root.find("ErrorList")),
        warnings=_texts(root.find("WarningList")),
    )


def _check_efetch(content: bytes, utility: str = "efetch") -> None:
    head = content[:4096]
    if b"<eFetchResult" in head or b"<ERROR>" in head:
        match = re.search(rb"<ERROR>(.*?)</ERROR>", content[:65536], re.S)
        message = match.group(1).decode("utf-8", "replace").strip() if match else "error answer"
        raise EutilsError(f"{utility}: {message}", utility=utility)


def normalise_pmcid(value: str) -> str:
    """'PMC123', 'pmc123' or '123' -> 'PMC123'."""
    value = value.strip()
    digits = value[3:] if value[:3].upper() == "PMC" else value
    if not digits.isdigit():
        raise ValueError(f"not a PMC id: {value!r}")
    return f"PMC{int(digits)}"


# ------------------------------------------------------------------------------------------ open access

_XLINK_HREF = "{http://www.w3.org/1999/xlink}href"
_ALI_LICENSE_REF = "{http://www.niso.org/schemas/ali/1.0/}license_ref"
_NOT_ALLOWED = "does not allow downloading of the full text"
_OPEN_LICENSE_TYPES = {"open-access", "open_access", "openaccess", "cc-by", "cc0", "creative-commons"}

_PI_PARSER_OPTS: dict[str, bool] = {
    "resolve_entities": False,
    "no_network": True,
    "load_dtd": False,
    "dtd_validation": False,
    "huge_tree": False,
    "remove_comments": False,
    "remove_pis": False,
}


def is_open_access(article: etree._Element) -> tuple[bool, str | None]:
    """Decide from PMC's own JATS whether an article is in the open-access subset.

    Open access when PMC marked it with ``<?properties open_access?>`` (the mark PMC puts on OA-subset
    articles) or when its ``<license>`` is an open licence (``license-type`` open-access/cc-by, or a
    Creative Commons URL in ``xlink:href`` / ``ali:license_ref``). Never open access when PMC left
    its "publisher does not allow downloading of the full text" comment. Returns (open, licence).
    """
    licence: str | None = None
    for lic in article.iter("license"):
        href = lic.get(_XLINK_HREF)
        ref = lic.findtext(f".//{_ALI_LICENSE_REF}")
        licence = (ref or href or lic.get("license-type") or "").strip() or licence
    for node in article.iter(etree.Comment):
        if _NOT_ALLOWED in (node.text or ""):
            return False, licence
    for node in article.iter(etree.ProcessingInstruction):
        if node.target == "properties" and "open_access" in (node.text or ""):
            return True, licence
    for lic in article.iter("license"):
        kind = (lic.get("license-type") or "").strip().lower()
        urls = [lic.get(_XLINK_HREF) or "", lic.findtext(f".//{_ALI_LICENSE_REF}") or ""]
        if kind in _OPEN_LICENSE_TYPES or any("creativecommons.org" in u for u in urls):
            return True, licence
    return False, licence


def _article_id(article: etree._Element, *types: str) -> str | None:
    for node in article.iterfind("front/article-meta/article-id"):
        if node.get("pub-id-type") in types and (node.text or "").strip():
            return (node.text or "").strip()
    return None


def parse_pmc_articles(content: bytes) -> list[PmcArticle]:
    """Split a ``pmc-articleset`` (or a lone ``article``) into :class:`PmcArticle` records."""
    try:
        parse_xml(content)  # the safety checks: no DTD entities, no entity references, size limits
        root = etree.fromstring(content, parser=etree.XMLParser(**_PI_PARSER_OPTS))
    except (MalformedXmlError, UnsafeXmlError, ValueError, etree.XMLSyntaxError) as exc:
        raise EutilsError(f"efetch db=pmc: unreadable answer: {exc}", utility="efetch") from exc
    articles = [root] if root.tag == "article" else list(root.iterfind("article"))
    out: list[PmcArticle] = []
    for article in articles:
        raw_pmcid = _article_id(article, "pmc", "pmcid", "pmcaid")
        if raw_pmcid is None:
            log.warning("PMC article without a PMC id skipped")
            continue
        try:
            pmcid = normalise_pmcid(raw_pmcid)
        except ValueError:
            log.warning("PMC article with a bad PMC id skipped", extra={"pmcid": raw_pmcid})
            continue
        open_access, licence = is_open_access(article)
        out.append(
            PmcArticle(
                pmcid=pmcid,
                pmid=_article_id(article, "pmid"),
                open_access=open_access,
                license=licence,
                xml=etree.tostring(article, encoding="utf-8"),
            )
        )
    return out


def parse_elink(content: bytes) -> dict[str, list[str]]:
    """``eLinkResult`` -> {from id: [linked ids]} (one ``LinkSet`` per ``id`` parameter)."""
    try:
        root = parse_xml(content)
    except (MalformedXmlError, UnsafeXmlError, ValueError) as exc:
        raise EutilsError(f"elink: unreadable answer: {exc}", utility="elink") from exc
    error = root.findtext("ERROR") or root.findtext("LinkSet/ERROR")
    if error:
        raise EutilsError(f"elink: {error.strip()}", utility="elink")
    out: dict[str, list[str]] = {}
    for linkset in root.iterfind("LinkSet"):
        sources = [(e.text or "").strip() for e in linkset.iterfind("IdList/Id")]
        targets = [(e.text or "").strip() for e in linkset.iterfind("LinkSetDb/Link/Id")]
        for source in sources:
            out.setdefault(source, []).extend(t for t in targets if t)
    return out


def _chunks(items: Sequence[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


# ------------------------------------------------------------------------------------------ client


class NcbiHttpClient:
    """What the NCBI clients share: one ``httpx.AsyncClient`` (closed by :meth:`aclose` only if made here),
    the retry policy, and the sleep and randomness of its back-off. Use ``async with`` or call :meth:`aclose`."""

    follow_redirects: ClassVar[bool] = False
    """Whether the client made here follows redirects."""

    def __init__(
        self,
        settings: NcbiSettings,
        *,
        http: httpx.AsyncClient | None = None,
        policy: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self._own_http = http is None
        timeout = httpx.Timeout(settings.ncbi_timeout_s)
        self.http = http or httpx.AsyncClient(timeout=timeout, follow_redirects=self.follow_redirects)
        self.policy = policy or RetryPolicy.from_settings(settings)
        self._sleep = sleep
        self._rng = rng or random.Random()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it (a client passed in is left open)."""
        if self._own_http:
            await self.http.aclose()


class EutilsClient(NcbiHttpClient):
    """E-utilities over one ``httpx.AsyncClient``; use ``async with`` or call :meth:`aclose`."""

    def __init__(
        self,
        settings: NcbiSettings,
        *,
        http: httpx.AsyncClient | None = None,
        limiter: Limiter | None = None,
        policy: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(settings, http=http, policy=policy, sleep=sleep, rng=rng)
        self.base_url = settings.eutils_base_url.rstrip("/") + "/"
        self._api_key = settings.ncbi_api_key.get_secret_value() if settings.ncbi_api_key else None
        self.limiter = limiter or process_limiter(rate_for(self._api_key, settings.ncbi_rate_per_s))

    # ------------------------------------------------------------------ plumbing
    def _identity(self) -> dict[str, str | list[str]]:
        params: dict[str, str | list[str]] = {
            "tool": self.settings.ncbi_tool,
            "email": self.settings.ncbi_email,
        }
        if self._api_key:
            params["api_key"] = self._api_key
        return params

    async def call(
        self, utility: str, params: dict[str, str | list[str]], *, method: Literal["GET", "POST"] = "GET"
    ) -> bytes:
        """Call ``<base>/<utility>.fcgi`` with ``params`` plus the identity; return the body."""
        payload = {**params, **self._identity()}
        response = await send_with_retries(
            self.http,
            method,
            f"{self.base_url}{utility}.fcgi",
            utility=utility,
            policy=self.policy,
            limiter=self.limiter,
            sleep=self._sleep,
            rng=self._rng,
            params=payload if method == "GET" else None,
            data=payload if method == "POST" else None,
            rate_limited_body=True,
        )
        return response.content

    # ------------------------------------------------------------------ esearch
    async def _esearch_page(
        self,
        term: str,
        db: str,
        retstart: int,
        retmax: int,
        webenv: str | None = None,
        query_key: str | None = None,
        sort: str | None = None,
    ) -> _Page:
        params: dict[str, str | list[str]] = {
            "db": db,
            "term": term,
            "usehistory": "y",
            "retstart": str(retstart),
            "retmax": str(retmax),
        }
        if sort:
            params["sort"] = sort
        if webenv:
            params["WebEnv"] = webenv
            if query_key:
                params["query_key"] = query_key
        # POST: long queries (hundreds of OR'ed terms) do not fit in a URL.
        return parse_esearch(await self.call("esearch", params, method="POST"), term)

    async def esearch(
        self,
        term: str,
        db: str = "pubmed",
        max_results: int | None = None,
        *,
        strict: bool = True,
        sort: str | None = None,
    ) -> SearchResult:
        """Run ``term`` with ``usehistory=y`` and page its WebEnv by retstart/retmax up to the cap; ``sort``
        (e.g. ``relevance``) is E-utilities' order of the ids, NCBI's default when None.

        ``strict`` (default): an ``ErrorList`` raises :class:`EutilsQueryError`; otherwise it is kept
        in ``SearchResult.errors``. A ``WarningList`` alone never raises; a search with no hits and
        no error is an honest empty result.
        """
        term = term.strip()
        if not term:
            raise EutilsQueryError("esearch: empty query", term=term)
        cap = max_results if max_results is not None else self.settings.search_max_results
        if cap < 1:
            raise ValueError("max_results must be at least 1")
        page_size = min(self.settings.esearch_page_size, cap)
        first = await self._esearch_page(term, db, 0, page_size, sort=sort)
        if first.errors and strict:
            raise EutilsQueryError(
                f"esearch could not run {term!r} as written: {_describe(first.errors)}",
                term=term,
                errors=first.errors,
                warnings=first.warnings,
                count=first.count,
            )
        if first.warnings:
            log.warning("esearch warnings", extra={"term": term, "warnings": first.warnings})
        pmids: list[str] = []
        seen: set[str] = set()

        def take(ids: list[str]) -> None:
            for pmid in ids:
                if pmid not in seen and len(pmids) < cap:
                    seen.add(pmid)
                    pmids.append(pmid)

        take(first.ids)
        target = min(cap, first.count)
        retstart = len(first.ids)
        while len(pmids) < target and retstart < first.count:
            page = await self._esearch_page(
                term, db, retstart, min(page_size, target - len(pmids)), first.webenv, first.query_key, sort
            )
            before = len(pmids)
            take(page.ids)
            if len(pmids) == before:  # an empty page, or the same ids again: paging is not advancing
                log.warning(
                    "esearch paging stopped: a page brought no new ids before the count was reached",
                    extra={"term": term, "retstart": retstart, "count": first.count},
                )
                break
            retstart += len(page.ids)
        return SearchResult(
            count=first.count,
            pmids=pmids,
            webenv=first.webenv,
            query_key=first.query_key,
            query_translation=first.translation,
            warnings=first.warnings,
            errors=first.errors,
        )

    async def count(self, term: str, db: str = "pubmed") -> int:
        """How many records ``term`` matches (``esearch rettype=count``); errors raise as in esearch."""
        params: dict[str, str | list[str]] = {"db": db, "term": term.strip(), "rettype": "count"}
        page = parse_esearch(await self.call("esearch", params, method="POST"), term)
        if page.errors:
            raise EutilsQueryError(
                f"esearch could not count {term!r}: {_describe(page.errors)}",
                term=term,
                errors=page.errors,
                warnings=page.warnings,
                count=page.count,
            )
        return page.count

    # ------------------------------------------------------------------ efetch
    async def efetch(self, ids: Sequence[str], db: str = "pubmed", *, retmode: str = "xml") -> bytes:
        """One efetch POST of exactly ``ids``; the raw XML (records NCBI does not know are absent)."""
        if not ids:
            raise ValueError("efetch needs at least one id")
        params: dict[str, str | list[str]] = {"db": db, "id": ",".join(ids), "retmode": retmode}
        content = await self.call("efetch", params, method="POST")
        _check_efetch(content)
        return content

    async def efetch_batches(
        self, ids: Sequence[str], db: str = "pubmed", batch_size: int | None = None
    ) -> AsyncIterator[tuple[list[str], bytes]]:
        """efetch ``ids`` in POSTs of ``batch_size`` (default ``efetch_batch``): (batch ids, XML)."""
        size = batch_size or self.settings.efetch_batch
        for batch in _chunks(list(ids), size):
            yield batch, await self.efetch(batch, db)

    # ------------------------------------------------------------------ elink / PMC
    async def elink(self, ids: Sequence[str], dbfrom: str, db: str, linkname: str) -> dict[str, list[str]]:
        """{id: [linked ids]} for each of ``ids`` (one POST per ``efetch_batch`` ids)."""
        out: dict[str, list[str]] = {}
        for batch in _chunks(list(ids), self.settings.efetch_batch):
            params: dict[str, str | list[str]] = {
                "dbfrom": dbfrom,
                "db": db,
                "linkname": linkname,
                "id": batch,  # repeated id= keeps one LinkSet per id
            }
            out.update(parse_elink(await self.call("elink", params, method="POST")))
        return out

    async def pmids_to_pmcids(self, pmids: Sequence[str]) -> dict[str, str]:
        """{PMID: 'PMC123'} for the PMIDs that have a PMC record (open access or not)."""
        links = await self.elink(pmids, "pubmed", "pmc", "pubmed_pmc")
        return {pmid: normalise_pmcid(found[0]) for pmid, found in links.items() if found}

    async def pmcids_to_pmids(self, pmcids: Sequence[str]) -> dict[str, str]:
        """{'PMC123': PMID} for the PMC records that have a PubMed record."""
        numeric = [normalise_pmcid(p)[3:] for p in pmcids]
        links = await self.elink(numeric, "pmc", "pubmed", "pmc_pubmed")
        return {normalise_pmcid(pmc): found[0] for pmc, found in links.items() if found}

    async def fetch_pmc_articles(
        self, pmcids: Sequence[str], batch_size: int | None = None
    ) -> AsyncIterator[PmcArticle]:
        """efetch db=pmc in batches; every article returned, each with its ``open_access`` verdict."""
        numeric = [normalise_pmcid(p)[3:] for p in pmcids]
        async for _batch, content in self.efetch_batches(numeric, "pmc", batch_size):
            for article in parse_pmc_articles(content):
                yield article


def valid_pmid(value: str) -> bool:
    """Whether ``value`` is a PMID as NCBI writes it: 1 to 10 digits, no leading zero, nothing else."""
    return bool(_PMID.match(value))
