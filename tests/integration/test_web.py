"""The web page in a real browser (headless Chromium driven by Selenium) against the running services.

Ingest through the page's form and watch the job finish; ask a question and watch the answer stream in;
click a numbered citation and see its source; save a screenshot (to the test's temporary folder; to the
README's ``docs/web.png`` with ``EVIDENTIA_UPDATE_SCREENSHOT=1``: a test run leaves the checkout as it was).

Needs Debian's ``chromium`` and ``chromium-driver`` (``make browser-deps`` installs them; ``make test``
runs it first). Without them the test is skipped locally, and fails where ``CI`` is set.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Stack
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

    # Click the first citation: its source is shown with a PubMed link.
    cite = answer.find_elements(By.CSS_SELECTOR, "a.cite")[0]
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

    # The evidence summary and the reference list are shown too.
    assert driver.find_element(By.CSS_SELECTOR, "#summary .badge").text.endswith("evidence")
    assert driver.find_elements(By.CSS_SELECTOR, "#references li")
    assert "first token" in driver.find_element(By.ID, "metrics").text
    assert "no model call" in driver.find_element(By.ID, "metrics").text  # offline: tokens_used is all 0

    shot = README_SCREENSHOT if os.environ.get("EVIDENTIA_UPDATE_SCREENSHOT") == "1" else tmp_path / "web.png"
    assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 0


def _titles(stack: Stack) -> dict[str, str]:
    from tests.integration.test_pipeline import db_fetch

    rows = db_fetch(
        stack.infra.postgres.url,
        "SELECT pmid, title FROM documents WHERE pmid = ANY($1::text[])",
        stack.fake.pubmed_ids,
    )
    return {r["pmid"]: r["title"] for r in rows}
