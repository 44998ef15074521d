"""A local fake of NCBI E-utilities on 127.0.0.1 that replays real recorded answers.

    with FakeEutils() as fake:                    # loads tests/fixtures/eutils/
        settings = NcbiSettings(eutils_base_url=fake.url)
        fake.fail_next(429, count=2, retry_after=1)
        ...
        assert fake.requests[-1].params["tool"] == ["evidentia"]

What it serves (paths under ``/entrez/eutils/``, GET or POST, form or query parameters):

- ``esearch.fcgi``: searches registered with :meth:`FakeEutils.add_search` or listed in the records
  directory's ``searches.json`` (``[{"db", "term", "file"}]``, ``file`` a recorded esearch answer).
  A recorded answer with an ``ErrorList`` or ``ERROR`` is replayed byte for byte; otherwise its
  ``IdList`` becomes the whole result set (``Count`` = number of recorded ids, so paging is
  consistent). ``usehistory=y`` gives a WebEnv/QueryKey; a later call with ``WebEnv`` +
  ``query_key`` pages that result by ``retstart``/``retmax``. ``rettype=count`` answers the count.
  An unknown term answers zero hits with NCBI's "No items found." warning.
- ``efetch.fcgi``: ``db=pubmed`` returns the recorded ``PubmedArticle``/``PubmedBookArticle``
  records (and ``DeleteCitation`` entries) for the requested ids, in request order, unknown ids
  left out as NCBI does; ``db=pmc`` returns a ``pmc-articleset`` of the recorded JATS articles.
- ``elink.fcgi``: ``pubmed_pmc`` / ``pmc_pubmed`` links derived from the recorded PMC articles'
  ``article-id`` elements; one ``LinkSet`` per ``id`` parameter, as NCBI does.
- anything added with :meth:`FakeEutils.add_static` (e.g. a Bookshelf ``file_list.csv``) at its path.

Faults: :meth:`fail_next` queues error answers (429 with ``Retry-After``, 500...), ``delay_s``
slows every answer down, and every request is kept in ``requests`` for assertions.
"""

from __future__ import annotations

import html
import itertools
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from lxml import etree

from shared.settings import NcbiSettings
from shared.xmlsafe import iter_pubmed_records

DEFAULT_RECORDS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "eutils"
EUTILS_PATH = "/entrez/eutils/"

_PUBMED_HEAD = (
    b'<?xml version="1.0" ?>\n'
    b'<!DOCTYPE PubmedArticleSet PUBLIC "-//NLM//DTD PubMedArticle, 1st January 2025//EN" '
    b'"https://dtd.nlm.nih.gov/ncbi/pubmed/out/pubmed_250101.dtd">\n<PubmedArticleSet>\n'
)
_PMC_HEAD = (
    b'<?xml version="1.0" ?>\n'
    b'<!DOCTYPE pmc-articleset PUBLIC "-//NLM//DTD ARTICLE SET 2.0//EN" '
    b'"https://dtd.nlm.nih.gov/ncbi/pmc/articleset/nlm-articleset-2.0.dtd">\n<pmc-articleset>'
)
_ESEARCH_HEAD = (
    '<?xml version="1.0" encoding="UTF-8" ?>\n'
    '<!DOCTYPE eSearchResult PUBLIC "-//NLM//DTD esearch 20060628//EN" '
    '"https://eutils.ncbi.nlm.nih.gov/eutils/dtd/20060628/esearch.dtd">\n'
)
_KEEP_PIS = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, remove_pis=False)


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake received (``params`` merges the query string and the form body)."""

    method: str
    path: str
    utility: str | None
    params: dict[str, list[str]]
    at: float  # time.monotonic() when it arrived
    status: int

    def param(self, name: str) -> str | None:
        values = self.params.get(name)
        return values[0] if values else None


@dataclass
class _Search:
    ids: list[str]
    translation: str | None = None
    replay: bytes | None = None  # an error answer replayed as recorded


@dataclass
class _Failure:
    status: int
    retry_after: str | None
    utility: str | None
    body: bytes


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    searches: dict[tuple[str, str], _Search] = field(default_factory=dict)
    histories: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)
    pubmed: dict[str, bytes] = field(default_factory=dict)
    deleted: dict[str, bytes] = field(default_factory=dict)
    pmc: dict[str, bytes] = field(default_factory=dict)  # numeric PMC id -> article XML
    pmc_to_pmid: dict[str, str] = field(default_factory=dict)
    static: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    failures: list[_Failure] = field(default_factory=list)
    requests: list[RecordedRequest] = field(default_factory=list)
    webenv_counter: Iterator[int] = field(default_factory=lambda: itertools.count(1))


def _norm_term(term: str) -> str:
    return " ".join(term.split())


class FakeEutils:
    """The fake server. Start with ``start()`` or ``with``; ``url`` is the E-utilities base URL."""

    def __init__(self, records_dir: Path | str | None = DEFAULT_RECORDS_DIR, *, host: str = "127.0.0.1") -> None:
        self._state = _State()
        self.delay_s: float = 0.0
        self.rate_limit_per_s: float | None = None
        """Enforce NCBI's limit like NCBI: over this many E-utilities calls within any one second, HTTP 429."""
        self._arrivals: list[float] = []
        self._host = host
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        if records_dir is not None:
            self.load_records(Path(records_dir))

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FakeEutils:
        if self._server is not None:
            return self
        handler = _make_handler(self)
        server = ThreadingHTTPServer((self._host, 0), handler)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-eutils", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeEutils:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeEutils is not started")
        return int(self._server.server_address[1])

    @property
    def root_url(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def url(self) -> str:
        """The E-utilities base URL, for ``EVIDENTIA_EUTILS_BASE_URL``."""
        return f"{self.root_url}{EUTILS_PATH}"

    def static_url(self, path: str) -> str:
        return f"{self.root_url}/{path.lstrip('/')}"

    # ------------------------------------------------------------------ content
    def load_records(self, directory: Path) -> None:
        """Load every recorded PubMed set and PMC article in ``directory`` plus its ``searches.json``."""
        for path in sorted(directory.iterdir()):
            if path.suffix not in (".xml", ".nxml"):
                continue
            root_tag = _root_tag(path)
            if root_tag == "PubmedArticleSet":
                self.add_pubmed_records(path.read_bytes())
            elif root_tag in ("pmc-articleset", "article"):
                self.add_pmc_records(path.read_bytes())
        manifest = directory / "searches.json"
        if manifest.exists():
            for entry in json.loads(manifest.read_text("utf-8")):
                self.add_recorded_search(entry["term"], (directory / entry["file"]).read_bytes(), db=entry["db"])

    def add_pubmed_records(self, xml_bytes: bytes) -> list[str]:
        """Add the records of a ``PubmedArticleSet`` (later ones replace earlier); return their PMIDs."""
        added: list[str] = []
        with self._state.lock:
            for record in iter_pubmed_records(xml_bytes):
                if record.kind == "delete":
                    for pmid in record.pmids:
                        self._state.deleted[pmid] = b'<DeleteCitation><PMID Version="1">%s</PMID></DeleteCitation>' % (
                            pmid.encode()
                        )
                        added.append(pmid)
                else:
                    self._state.pubmed[record.pmids[0]] = record.xml
                    added.extend(record.pmids)
        return added

    def add_pmc_records(self, xml_bytes: bytes) -> list[str]:
        """Add JATS articles (a ``pmc-articleset`` or one ``article``); return their PMC ids ('PMC1')."""
        root = etree.fromstring(xml_bytes, parser=_KEEP_PIS)
        articles = [root] if root.tag == "article" else list(root.iterfind("article"))
        added: list[str] = []
        with self._state.lock:
            for article in articles:
                ids = {
                    n.get("pub-id-type"): (n.text or "").strip()
                    for n in article.iterfind("front/article-meta/article-id")
                }
                pmc = (ids.get("pmc") or ids.get("pmcid") or "").upper().removeprefix("PMC")
                if not pmc:
                    continue
                self._state.pmc[pmc] = etree.tostring(article, encoding="utf-8")
                if ids.get("pmid"):
                    self._state.pmc_to_pmid[pmc] = ids["pmid"]
                added.append(f"PMC{pmc}")
        return added

    def add_search(self, term: str, pmids: list[str], *, db: str = "pubmed", translation: str | None = None) -> None:
        with self._state.lock:
            self._state.searches[(db, _norm_term(term))] = _Search(list(pmids), translation)

    def add_recorded_search(self, term: str, recorded: bytes, *, db: str = "pubmed") -> None:
        """Serve a recorded esearch answer for ``term`` (errors replayed; ids become the result set)."""
        root = etree.fromstring(recorded, parser=_KEEP_PIS)
        if root.find("ErrorList") is not None or root.find("ERROR") is not None:
            search = _Search([], replay=recorded)
        else:
            ids = [(e.text or "").strip() for e in root.iterfind("IdList/Id")]
            search = _Search(ids, root.findtext("QueryTranslation"))
        with self._state.lock:
            self._state.searches[(db, _norm_term(term))] = search

    def add_static(self, path: str, content: bytes, content_type: str = "application/octet-stream") -> str:
        """Serve ``content`` at ``path``; return its full URL."""
        with self._state.lock:
            self._state.static["/" + path.lstrip("/")] = (content, content_type)
        return self.static_url(path) if self._server is not None else path

    # ------------------------------------------------------------------ faults and inspection
    def fail_next(
        self,
        status: int,
        count: int = 1,
        retry_after: float | str | None = None,
        *,
        utility: str | None = None,
        body: bytes | None = None,
    ) -> None:
        """Answer the next ``count`` requests (of ``utility`` if given) with ``status``."""
        text = (
            None
            if retry_after is None
            else (str(retry_after) if not isinstance(retry_after, float) else f"{retry_after:g}")
        )
        payload = body if body is not None else f"fake failure {status}\n".encode()
        with self._state.lock:
            self._state.failures.extend(_Failure(status, text, utility, payload) for _ in range(count))

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._state.lock:
            return list(self._state.requests)

    def requests_to(self, utility: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.utility == utility]

    def clear_requests(self) -> None:
        with self._state.lock:
            self._state.requests.clear()

    @property
    def pubmed_ids(self) -> list[str]:
        with self._state.lock:
            return list(self._state.pubmed)

    # ------------------------------------------------------------------ answering
    def _take_failure(self, utility: str | None) -> _Failure | None:
        with self._state.lock:
            for index, failure in enumerate(self._state.failures):
                if failure.utility is None or failure.utility == utility:
                    return self._state.failures.pop(index)
        return None

    def _over_rate(self) -> bool:
        """Whether this E-utilities call is one too many in the last second (every arrival counts)."""
        limit = self.rate_limit_per_s
        if limit is None:
            return False
        now = time.monotonic()
        with self._state.lock:
            self._arrivals = [t for t in self._arrivals if now - t < 1.0]
            self._arrivals.append(now)
            return len(self._arrivals) > limit

    def _record(self, method: str, path: str, utility: str | None, params: dict[str, list[str]], status: int) -> None:
        with self._state.lock:
            self._state.requests.append(RecordedRequest(method, path, utility, params, time.monotonic(), status))

    def handle(self, method: str, path: str, params: dict[str, list[str]]) -> tuple[int, dict[str, str], bytes]:
        utility: str | None = None
        if path.startswith(EUTILS_PATH) and path.endswith(".fcgi"):
            utility = path[len(EUTILS_PATH) : -len(".fcgi")]
        over = utility is not None and self._over_rate()
        failure = None if over else self._take_failure(utility)
        if over:
            result = (429, {"Content-Type": "application/json"}, b'{"error":"API rate limit exceeded","count":"4"}')
        elif failure is not None:
            headers = {"Content-Type": "text/plain"}
            if failure.retry_after is not None:
                headers["Retry-After"] = failure.retry_after
            result = (failure.status, headers, failure.body)
        elif utility == "esearch":
            result = self._esearch(params)
        elif utility == "efetch":
            result = self._efetch(params)
        elif utility == "elink":
            result = self._elink(params)
        else:
            with self._state.lock:
                static = self._state.static.get(path)
            if static is None:
                result = (404, {"Content-Type": "text/plain"}, b"not found\n")
            else:
                result = (200, {"Content-Type": static[1]}, static[0])
        self._record(method, path, utility, params, result[0])
        return result

    def _esearch(self, params: dict[str, list[str]]) -> tuple[int, dict[str, str], bytes]:
        first = {k: v[0] for k, v in params.items() if v}
        db = first.get("db", "pubmed")
        webenv, query_key = first.get("WebEnv"), first.get("query_key")
        term = _norm_term(first.get("term", ""))
        with self._state.lock:
            if webenv:
                history = self._state.histories.get(webenv)
                if history is None or (query_key and query_key not in history):
                    error = f"<ERROR>Unable to obtain query #{query_key}</ERROR>"
                    return _xml(200, f"{_ESEARCH_HEAD}<eSearchResult>{error}</eSearchResult>".encode())
                if query_key:
                    db, term = history[query_key]
            search = self._state.searches.get((db, term))
            if first.get("usehistory") == "y":
                if webenv is None:
                    webenv = f"MCID_fake_{next(self._state.webenv_counter):06d}"
                    self._state.histories[webenv] = {}
                history = self._state.histories[webenv]
                if not query_key:
                    query_key = str(len(history) + 1)
                    history[query_key] = (db, term)
        if search is not None and search.replay is not None:
            return _xml(200, search.replay)
        ids = search.ids if search is not None else []
        count = len(ids)
        if first.get("rettype") == "count":
            return _xml(200, f"{_ESEARCH_HEAD}<eSearchResult><Count>{count}</Count></eSearchResult>".encode())
        retstart = int(first.get("retstart", "0"))
        retmax = int(first.get("retmax", "20"))
        page = ids[retstart : retstart + retmax]
        parts = [f"{_ESEARCH_HEAD}<eSearchResult><Count>{count}</Count><RetMax>{len(page)}</RetMax>"]
        parts.append(f"<RetStart>{retstart}</RetStart>")
        if webenv and first.get("usehistory") == "y":
            parts.append(f"<QueryKey>{query_key}</QueryKey><WebEnv>{webenv}</WebEnv>")
        parts.append("<IdList>\n" + "".join(f"<Id>{i}</Id>\n" for i in page) + "</IdList><TranslationSet/>")
        translation = (search.translation if search else None) or f"{term}[All Fields]"
        parts.append(f"<QueryTranslation>{html.escape(translation, quote=False)}</QueryTranslation>")
        if search is None:
            parts.append("<WarningList><OutputMessage>No items found.</OutputMessage></WarningList>")
        parts.append("</eSearchResult>")
        return _xml(200, "".join(parts).encode())

    def _efetch(self, params: dict[str, list[str]]) -> tuple[int, dict[str, str], bytes]:
        db = (params.get("db") or ["pubmed"])[0]
        ids = [i.strip() for value in params.get("id", []) for i in value.split(",") if i.strip()]
        if not ids:
            return _xml(400, b"<eFetchResult>\n\t<ERROR>Empty id list - nothing todo</ERROR>\n</eFetchResult>\n")
        with self._state.lock:
            if db == "pmc":
                articles = [
                    self._state.pmc[i] for i in (x.upper().removeprefix("PMC") for x in ids) if i in self._state.pmc
                ]
                return _xml(200, _PMC_HEAD + b"".join(articles) + b"</pmc-articleset>\n")
            records: list[bytes] = []
            for pmid in ids:
                if pmid in self._state.pubmed:
                    records.append(self._state.pubmed[pmid])
                elif pmid in self._state.deleted:
                    records.append(self._state.deleted[pmid])
        return _xml(200, _PUBMED_HEAD + b"\n".join(records) + b"\n</PubmedArticleSet>\n")

    def _elink(self, params: dict[str, list[str]]) -> tuple[int, dict[str, str], bytes]:
        dbfrom = (params.get("dbfrom") or ["pubmed"])[0]
        db = (params.get("db") or ["pmc"])[0]
        with self._state.lock:
            if dbfrom == "pubmed" and db == "pmc":
                mapping: dict[str, list[str]] = {}
                for pmc, pmid in self._state.pmc_to_pmid.items():
                    mapping.setdefault(pmid, []).append(pmc)
                linkname = "pubmed_pmc"
            elif dbfrom == "pmc" and db == "pubmed":
                mapping = {pmc: [pmid] for pmc, pmid in self._state.pmc_to_pmid.items()}
                linkname = "pmc_pubmed"
            else:
                return _xml(200, b"<eLinkResult><ERROR>fake: unsupported link</ERROR></eLinkResult>")
        sets: list[str] = []
        for value in params.get("id", []):
            ids = [i.strip().upper().removeprefix("PMC") for i in value.split(",") if i.strip()]
            links = [t for i in ids for t in mapping.get(i, [])]
            linkset = f"<LinkSet><DbFrom>{dbfrom}</DbFrom><IdList>" + "".join(f"<Id>{i}</Id>" for i in ids)
            linkset += "</IdList>"
            if links:
                linkset += f"<LinkSetDb><DbTo>{db}</DbTo><LinkName>{linkname}</LinkName>"
                linkset += "".join(f"<Link><Id>{t}</Id></Link>" for t in links) + "</LinkSetDb>"
            sets.append(linkset + "</LinkSet>")
        body = '<?xml version="1.0" encoding="UTF-8" ?>\n<eLinkResult>' + "".join(sets) + "</eLinkResult>\n"
        return _xml(200, body.encode())


def _xml(status: int, body: bytes) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "text/xml; charset=UTF-8"}, body


def _root_tag(path: Path) -> str | None:
    try:
        for _, elem in etree.iterparse(str(path), events=("start",), resolve_entities=False, no_network=True):
            return str(elem.tag)
    except etree.XMLSyntaxError:
        return None
    return None


def _make_handler(fake: FakeEutils) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "FakeEutils/1.0"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return None

        def _serve(self, method: str) -> None:
            parsed = urllib.parse.urlsplit(self.path)
            params = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
            if method == "POST":
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode("utf-8", "replace")
                for key, values in urllib.parse.parse_qs(body, keep_blank_values=True).items():
                    params.setdefault(key, []).extend(values)
            status, headers, content = fake.handle(method, parsed.path, params)
            if fake.delay_s > 0:
                time.sleep(fake.delay_s)
            try:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                pass

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler


class SleepRecorder:
    """An injectable ``sleep`` for clients: records the delays asked for and does not wait."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def fake_ncbi_settings(fake: FakeEutils, **overrides: Any) -> NcbiSettings:
    """``NcbiSettings`` pointed at ``fake`` (E-utilities and Bookshelf), with quick retries."""
    values: dict[str, Any] = {
        "eutils_base_url": fake.url,
        "ncbi_email": "tests@example.org",
        "ncbi_tool": "evidentia-tests",
        "ncbi_timeout_s": 2.0,
        "ncbi_backoff_base_s": 0.01,
        "ncbi_backoff_max_s": 0.05,
        "bookshelf_file_list_url": fake.static_url("/pub/litarch/file_list.csv"),
        "bookshelf_base_url": fake.static_url("/pub/litarch/"),
    }
    values.update(overrides)
    return NcbiSettings(**values)


@pytest.fixture
def fake_eutils() -> Iterator[FakeEutils]:
    """A started :class:`FakeEutils` with the recorded fixtures loaded."""
    with FakeEutils() as fake:
        yield fake
