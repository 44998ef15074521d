"""The web page in a real browser (headless Chromium driven by Selenium) against the running services.

Ingest through the page's form and watch the job finish; ask a question with PubMed searched at question time
(the fake E-utilities) and watch the fetch progress, then the answer stream in; hover a numbered citation and
see the sentence it rests on; click it and see its source with that passage highlighted; see why the sources'
agreement is not labelled offline; save a screenshot (to the test's temporary folder; to the README's
``docs/web.png`` with ``EVIDENTIA_UPDATE_SCREENSHOT=1``: a test run leaves the checkout as it was). Then, with
Claude (the fake Messages API), the agreement bar with its counts, and claims no sentence supports marked.
And a registered trial: the ingest form's ClinicalTrials.gov fields (a wrong id refused with the route's reason,
then a study of the fake registry ingested with the job's progress to the end), asked about with the trial
filters, its citation opening the study's page.

Needs Debian's ``chromium`` and ``chromium-driver`` (``make browser-deps`` installs them; ``make test``
runs it first). Without them the test is skipped locally, and fails where ``CI`` is set.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from services.synthesizer.agreement import OFFLINE
from tests.fakes.anthropic_server import FakeAnthropic
from tests.integration.conftest import Stack, claude_mode
from tests.integration.db import db_fetch
from tests.integration.test_answers import corpus  # noqa: F401  (the ingested sample, a module fixture)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

README_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "web.png"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

# Records the length of the answer text every time it changes while it is still streaming.
WATCH_STREAM = """
window.__seen = [];
new MutationObserver(() => {
  const a = document.getElementById('answer');
  if (a && a.classList.contains('streaming')) window.__seen.push(a.textContent.length);
}).observe(document.getElementById('thread'), {subtree: true, childList: true, characterData: true});
"""

# Records every text the current turn's fetch line shows (progress, then the fetch's report).
WATCH_FETCH = """
window.__fetch = [];
new MutationObserver(() => {
  const f = document.querySelector('#thread .fetch-progress');
  const t = f ? f.textContent : '';
  if (t && window.__fetch[window.__fetch.length - 1] !== t) window.__fetch.push(t);
}).observe(document.getElementById('thread'), {subtree: true, childList: true, characterData: true});
"""
NO_SUPPORT = "No sentence of this source supports the claim."
TWO_SOURCE_QUESTION = "What is known about AIDS treatment in correctional facilities?"  # the sample answers it
TRIAL = "NCT04000001"  # a fixture study of the fake registry with results posted; taken away after the test


def _blank(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not (CHROMIUM and CHROMEDRIVER):
        message = "headless Chromium not installed: run `make browser-deps` (apt: chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1100",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def test_ask_stream_click_a_citation_and_ingest_in_a_real_browser(
    stack: Stack,
    corpus: dict[str, str],  # noqa: F811  (the fixture imported above)
    browser: object,
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = browser
    assert isinstance(driver, WebDriver)
    wait = WebDriverWait(driver, 90, poll_frequency=0.1)
    driver.get(stack.gateway + "/")
    assert "Evidentia" in driver.title

    # Ingest two of the recorded PMIDs through the form; the job's progress is shown until done.
    pmids = stack.fake.pubmed_ids[:2]
    driver.find_element(By.ID, "ingest-pmids").send_keys(" ".join(pmids))
    driver.find_element(By.ID, "ingest").click()
    wait.until(lambda d: d.find_element(By.ID, "ingest-status").get_attribute("data-done") == "true")
    status = driver.find_element(By.ID, "ingest-status").text
    assert "done" in status and "2 of 2" in status, status
    assert "embedded" in driver.find_element(By.ID, "ingest-counts").text

    # Ask: the answer streams in (text grows while the cursor shows), then citations become links.
    clinical = [t for t in corpus.values() if re.search(r"treatment|risk|patients|AIDS", t)]
    title = (clinical or list(corpus.values()))[0].rstrip(".")
    driver.execute_script(WATCH_STREAM)
    driver.execute_script(WATCH_FETCH)
    driver.find_element(By.ID, "question").send_keys(f"What is known about {title.lower()}?")
    driver.find_element(By.ID, "year-from").send_keys("1950")
    Select(driver.find_element(By.ID, "fetch-mode")).select_by_value("always")  # PubMed searched at question time
    driver.find_element(By.ID, "ask").click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#answer a.cite")))
    seen = driver.execute_script("return window.__seen")
    assert isinstance(seen, list) and len(set(seen)) >= 2, seen  # several partial texts were shown
    assert seen == sorted(seen), seen  # and each one extended the previous: in order
    answer = driver.find_element(By.ID, "answer")
    assert "streaming" not in (answer.get_attribute("class") or "")
    assert "Extractive answer" in answer.text and "PMID:" not in answer.text
    fetched = driver.find_element(By.CSS_SELECTOR, "#thread .fetch-progress").text
    assert fetched.startswith("PubMed (always): "), fetched  # the fetch's report, after its progress
    shown = driver.execute_script("return window.__fetch")
    assert isinstance(shown, list) and shown[0].startswith("Searching PubMed: "), shown  # progress while it ran
    assert any(t.startswith("PubMed found ") for t in shown), shown
    assert shown[-1] == fetched and len(shown) >= 3, shown

    # The agreement is not labelled offline, and the page says why.
    agreement = driver.find_element(By.CSS_SELECTOR, "#thread .agreement").text
    assert agreement == "Agreement not labelled: " + OFFLINE, agreement
    assert not driver.find_elements(By.CSS_SELECTOR, "#thread .agreement-bar")

    # Hover the first citation: the sentence its claim rests on is shown (extractive answers quote it).
    cite = answer.find_elements(By.CSS_SELECTOR, "a.cite")[0]
    quote = cite.get_attribute("data-quote") or ""
    assert quote and _blank(quote) in _blank(answer.text), (quote, answer.text)
    tip = driver.find_element(By.ID, "cite-tip")
    assert not tip.is_displayed()
    ActionChains(driver).move_to_element(cite).perform()
    wait.until(lambda d: tip.is_displayed())
    assert _blank(tip.text).startswith(f"“{_blank(quote)}”"), (tip.text, quote)

    # Click it: its source is shown with a PubMed link and the quoted sentence highlighted in the passage.
    number = cite.get_attribute("data-n")
    cite.click()
    card = driver.find_element(By.ID, "source-card")
    wait.until(lambda d: card.is_displayed())
    assert driver.find_element(By.ID, "source-number").text == f"[{number}]"
    source_title = driver.find_element(By.ID, "source-title").text
    link = driver.find_element(By.ID, "source-link").get_attribute("href") or ""
    assert link.startswith("https://pubmed.ncbi.nlm.nih.gov/")
    pmid = link.rstrip("/").rsplit("/", 1)[1]
    assert pmid in stack.fake.pubmed_ids
    assert source_title and source_title == next(t for p, t in _titles(stack).items() if p == pmid)
    meta = driver.find_element(By.ID, "source-meta").text
    assert f"PMID:{pmid}" in meta
    marks = driver.find_elements(By.CSS_SELECTOR, "#source-passage mark")
    assert len(marks) == 1 and _blank(marks[0].text) == _blank(quote), [m.text for m in marks]
    passage = driver.find_element(By.ID, "source-passage").text
    stored = _chunk_texts(stack, pmid)
    assert any(_blank(passage) == _blank(t) for t in stored), (passage, stored)  # the whole stored passage

    # The evidence summary and the reference list are shown too.
    assert driver.find_element(By.CSS_SELECTOR, "#summary .badge").text.endswith("evidence")
    assert driver.find_elements(By.CSS_SELECTOR, "#references li")
    assert "first token" in driver.find_element(By.ID, "metrics").text
    assert "no model call" in driver.find_element(By.ID, "metrics").text  # offline: tokens_used is all 0

    shot = README_SCREENSHOT if os.environ.get("EVIDENTIA_UPDATE_SCREENSHOT") == "1" else tmp_path / "web.png"
    assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 0


def test_agreement_bar_and_unsupported_claims_with_claude_in_a_real_browser(
    stack: Stack,
    corpus: dict[str, str],  # noqa: F811  (the fixture imported above)
    browser: object,
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser
    assert isinstance(driver, WebDriver)
    wait = WebDriverWait(driver, 120, poll_frequency=0.1)
    with FakeAnthropic() as fake, every_passage_relevant_with_claude(stack, fake):
        driver.get(stack.gateway + "/")
        driver.find_element(By.ID, "question").send_keys(TWO_SOURCE_QUESTION)
        driver.find_element(By.ID, "ask").click()
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#thread .agreement")))
        answer = driver.find_element(By.ID, "answer")
        cites = answer.find_elements(By.CSS_SELECTOR, "a.cite")
        numbers = {c.get_attribute("data-n") for c in cites}
        assert len(numbers) >= 2, answer.text  # the fake cites two sources: their agreement is labelled
        # Every source the fake labels supports the main finding: the bar is all "supports", and counted.
        counts = driver.find_element(By.CSS_SELECTOR, "#thread .agreement-counts").text
        assert counts == f"Sources agree: {len(numbers)} supports", counts
        parts = driver.find_elements(By.CSS_SELECTOR, "#thread .agreement-bar span")
        assert [p.get_attribute("class") for p in parts] == ["supports"]
        assert (
            f"{len(numbers)} sources cited"
            in driver.find_element(By.CSS_SELECTOR, "#thread .turn > .meta:not(.fetch-progress)").text
        )
        # The fake's claims are not in its sources (the honest support judge says so): each is marked, and
        # hovering one says that no sentence supports it; opening it shows the claim, nothing highlighted.
        marked = answer.find_elements(By.CSS_SELECTOR, "a.cite.no-support")
        assert marked, answer.text
        ActionChains(driver).move_to_element(marked[0]).perform()
        tip = driver.find_element(By.ID, "cite-tip")
        wait.until(lambda d: tip.is_displayed())
        assert tip.text == NO_SUPPORT
        marked[0].click()
        wait.until(lambda d: d.find_element(By.ID, "source-card").is_displayed())
        passage = driver.find_element(By.ID, "source-passage").text
        assert passage.startswith("No sentence of this source supports: ") and not driver.find_elements(
            By.CSS_SELECTOR, "#source-passage mark"
        )
    assert any(r.uses_tools for r in fake.requests)  # the agreement (and support) calls reached the fake


@pytest.fixture
def trial(stack: Stack) -> Iterator[str]:
    """:data:`TRIAL` served by the session's fake registry, and neither served nor stored afterwards."""
    fake = stack.trials
    assert fake is not None
    fake.add_fixture(TRIAL)
    try:
        yield TRIAL
    finally:
        fake.studies.pop(TRIAL, None)
        url = stack.infra.postgres.url
        rows = db_fetch(
            url, "DELETE FROM documents WHERE document_id = $1 RETURNING document_id", f"clinicaltrials:{TRIAL}"
        )
        db_fetch(
            url, "DELETE FROM document_status WHERE document_id = ANY($1::text[])", [r["document_id"] for r in rows]
        )


def test_ingest_a_trial_through_the_form_and_ask_with_the_trial_filters_in_a_real_browser(
    stack: Stack, trial: str, browser: object
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = browser
    assert isinstance(driver, WebDriver)
    wait = WebDriverWait(driver, 120, poll_frequency=0.1)
    driver.get(stack.gateway + "/")

    # The source decides the fields: PubMed's PMIDs give way to NCT numbers, a search, a condition, an intervention.
    assert driver.find_element(By.ID, "ingest-pmids").is_displayed()
    assert not driver.find_element(By.ID, "ingest-condition").is_displayed()
    Select(driver.find_element(By.ID, "ingest-source")).select_by_value("clinicaltrials")
    assert not driver.find_element(By.ID, "ingest-pmids").is_displayed()
    for field in ("ingest-ids", "ingest-query", "ingest-condition", "ingest-intervention"):
        assert driver.find_element(By.ID, field).is_displayed(), field
    assert driver.find_element(By.ID, "ingest-ids-label").text == "NCT numbers"
    assert not driver.find_element(By.ID, "ingest-publisher").is_displayed()

    # A number too short is no NCT number: the route's reason is shown, as an error.
    ids = driver.find_element(By.ID, "ingest-ids")
    ids.send_keys("NCT123")
    driver.find_element(By.ID, "ingest").click()
    status = driver.find_element(By.ID, "ingest-status")
    wait.until(lambda d: "error" in (status.get_attribute("class") or ""))
    assert status.text.startswith("HTTP 422: ") and "not clinicaltrials ids (e.g. NCT01234567)" in status.text, (
        status.text
    )

    # The study, by its NCT number: the job's progress is shown until it is done.
    ids.clear()
    ids.send_keys(trial)
    driver.find_element(By.ID, "ingest").click()
    wait.until(lambda d: status.get_attribute("data-done") == "true")
    assert "done" in status.text and "1 of 1" in status.text, status.text
    assert "error" not in (status.get_attribute("class") or "")
    assert "embedded" in driver.find_element(By.ID, "ingest-counts").text

    # Asked with the trial filters (registered trials with results posted): the answer cites the study, whose
    # source card links to its registry page.
    driver.find_element(By.ID, "question").send_keys(
        "Does metformin lower HbA1c compared with placebo in early type 2 diabetes?"
    )
    Select(driver.find_element(By.ID, "source-filter")).select_by_value("clinicaltrials")
    Select(driver.find_element(By.ID, "has-results")).select_by_value("true")
    Select(driver.find_element(By.ID, "trial-phase")).select_by_value("PHASE3")
    driver.find_element(By.ID, "ask").click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#answer a.cite")))
    driver.find_element(By.CSS_SELECTOR, "#answer a.cite").click()
    wait.until(lambda d: d.find_element(By.ID, "source-card").is_displayed())
    assert (
        driver.find_element(By.ID, "source-link").get_attribute("href") == f"https://clinicaltrials.gov/study/{trial}"
    )
    assert driver.find_element(By.ID, "source-link").text == "Open source"
    assert f"NCT:{trial}" in driver.find_element(By.ID, "source-meta").text


@contextmanager
def every_passage_relevant_with_claude(stack: Stack, fake: FakeAnthropic) -> Iterator[None]:
    """The synthesizer and gateway in Claude mode (:func:`claude_mode`), the synthesizer with no relevance floor
    (an answer needs two sources to compare, and the sample's other records are off-topic); then as they were."""
    proc = stack.services.processes["synthesizer"]
    before = dict(proc.env)
    proc.env = {**before, "EVIDENTIA_RETRIEVAL_MIN_SCORE": "-1"}
    try:
        with claude_mode(stack, fake):
            try:
                yield
            finally:  # claude_mode's closing restart then brings the synthesizer back as it was
                proc.env = {k: v for k, v in proc.env.items() if k != "EVIDENTIA_RETRIEVAL_MIN_SCORE"}
    finally:
        proc.env = {k: v for k, v in proc.env.items() if k != "EVIDENTIA_RETRIEVAL_MIN_SCORE"}


def _chunk_texts(stack: Stack, pmid: str) -> list[str]:
    from tests.integration.test_pipeline import db_fetch

    rows = db_fetch(
        stack.infra.postgres.url,
        "SELECT c.content AS text FROM chunks c JOIN documents d USING (document_id) WHERE d.pmid = $1",
        pmid,
    )
    return [r["text"] for r in rows]


def _titles(stack: Stack) -> dict[str, str]:
    from tests.integration.test_pipeline import db_fetch

    rows = db_fetch(
        stack.infra.postgres.url,
        "SELECT pmid, title FROM documents WHERE pmid = ANY($1::text[])",
        stack.fake.pubmed_ids,
    )
    return {r["pmid"]: r["title"] for r in rows}
