"""The page in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``), served
by ``celery -A web_browser_app jobs web`` with a token, beside a real ``celery worker`` and
``celery beat`` on the real Redis (broker, scheduled jobs' stores) and PostgreSQL (the
background jobs): an operator signs in, watches an occurrence's outcome appear, finds a dead
job, retries it and sees it run, pauses a job and sees beat skip it. Each step's screenshot
goes to ``docs/images/web-*.png``, which docs/web.md shows.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from redis import Redis
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from services import DATABASE_URL, REDIS_URL
from sqlalchemy import create_engine
from web_browser_jobs import HEARTBEAT, QUEUE, ChargeJob

from ddd_celery.background import JobStatus, StoredJobQueue
from ddd_celery.celery.background import CeleryJobPublisher
from ddd_celery.kernel import FixedExecutionScope, SystemClock, UuidGenerator
from ddd_celery.redis import connect
from ddd_celery.sql import SqlJobStore, create_tables, drop_tables

pytestmark = [pytest.mark.browser, pytest.mark.processes]

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
IMAGES = ROOT / "docs" / "images"
TOKEN = "browser-test-token"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
STOP_S = 10.0


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout}s for {what}")
        time.sleep(0.2)


class Process:
    """One ``celery -A web_browser_app ...`` subprocess, its output in a file of the test's."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        with log.open("ab") as out:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "web_browser_app", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=log.parent,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self._process.poll() is not None:
            return
        self._process.terminate()
        try:
            self._process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(STOP_S)


@dataclass
class Deployment:
    """The processes, the stores the test reads, the queue it enqueues on, the page's URL."""

    url: str
    records: Redis
    prefix: str
    store: SqlJobStore
    queue: StoredJobQueue
    processes: list[Process] = field(default_factory=list)

    def logs(self) -> str:
        return "\n".join(f"----- {p.name}\n{p.output()[-3000:]}" for p in self.processes)

    def status(self, job_id: str) -> JobStatus | None:
        job = self.store.find(job_id, tenant_id=None)
        return None if job is None else job.status


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    directory = tmp_path_factory.mktemp("web-browser")
    prefix = f"test:webbrowser:{uuid.uuid4().hex}:"
    tables = f"test_webbr_{uuid.uuid4().hex[:10]}_"
    engine = create_engine(DATABASE_URL, connect_args={"connect_timeout": 2})
    create_tables(engine, tables)
    records = connect(REDIS_URL)
    store = SqlJobStore(engine, prefix=tables)
    from celery import Celery  # noqa: PLC0415

    sender = Celery("sender", broker=REDIS_URL, set_as_current=False)
    sender.conf.update(broker_transport_options={"global_keyprefix": prefix})
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "DDD_TEST_BROKER_URL": REDIS_URL,
        "DDD_TEST_PREFIX": prefix,
        "DDD_TEST_DATABASE_URL": DATABASE_URL,
        "DDD_TEST_TABLES": tables,
    }
    running = Deployment(
        url=f"http://127.0.0.1:{port}",
        records=records,
        prefix=prefix,
        store=store,
        queue=StoredJobQueue(
            store=store,
            clock=SystemClock(),
            ids=UuidGenerator(),
            scope=FixedExecutionScope(),
            publisher=CeleryJobPublisher(sender),
            declarations=[ChargeJob],
        ),
    )
    spawn = [
        ("beat", ["beat", "-l", "INFO"]),
        (
            "worker",
            [
                "worker",
                "-l",
                "INFO",
                "-P",
                "solo",
                "-Q",
                QUEUE,
                "-n",
                f"web-{uuid.uuid4().hex[:6]}@%h",
                "--without-mingle",
                "--without-gossip",
                "--without-heartbeat",
            ],
        ),
        ("web", ["jobs", "web", "--port", str(port), "--token", TOKEN, "--refresh", "1"]),
    ]
    try:
        for name, args in spawn:
            running.processes.append(Process(name, args, env, directory / f"{name}.log"))
        wait_until(lambda: _answers(port), 30, f"the page on port {port}\n{running.logs()}")
        yield running
    finally:
        for process in running.processes:
            process.stop()
        sender.close()
        for key in records.scan_iter(match=f"{prefix}*"):
            records.delete(key)
        records.close()
        drop_tables(engine, tables)
        engine.dispose()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def browser(deployed: Deployment) -> Iterator[WebDriver]:
    """Chromium, signed in on the page as ``ada``."""
    assert shutil.which(CHROMIUM), "scripts/test.sh installs Debian's chromium"
    assert shutil.which(CHROMEDRIVER), "scripts/test.sh installs Debian's chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    try:
        driver.get(f"{deployed.url}/")
        assert "/signin" in driver.current_url
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "name").send_keys("ada")
        driver.find_element(By.ID, "sign-in").click()
        wait_until(lambda: driver.title.startswith("Dashboard"), 10, "the dashboard")
        yield driver
    finally:
        driver.quit()


def shot(driver: WebDriver, name: str) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(IMAGES / f"web-{name}.png"))


def text_of(driver: WebDriver, element_id: str) -> str:
    """The element's text, or '' while the page reloads itself."""
    try:
        return str(driver.find_element(By.ID, element_id).text)
    except Exception:
        return ""


def test_the_scheduled_jobs_page_shows_an_occurrences_outcome_as_it_comes(
    deployed: Deployment, browser: WebDriver
) -> None:
    browser.get(f"{deployed.url}/scheduled")

    def outcome_shown() -> bool:
        for row in browser.find_elements(By.CSS_SELECTOR, f'tr[data-job="{HEARTBEAT}"]'):
            try:
                return "succeeded" in row.find_element(By.CLASS_NAME, "last-outcome").text
            except Exception:
                return False
        return False

    wait_until(outcome_shown, 60, f"the heartbeat's outcome on the page\n{deployed.logs()}")
    shot(browser, "scheduled")


def test_a_dead_job_is_found_retried_and_seen_running(
    deployed: Deployment, browser: WebDriver
) -> None:
    deployed.records.set(f"{deployed.prefix}failing", "1")
    job_id = deployed.queue.enqueue(ChargeJob, {"order": "o-1", "card": "4242-SECRET"})
    wait_until(
        lambda: deployed.status(job_id) is JobStatus.DEAD, 60, f"the dead job\n{deployed.logs()}"
    )

    def counted_dead() -> bool:  # the counts are read again every few seconds
        browser.get(f"{deployed.url}/background?state=dead")
        return text_of(browser, "state-dead").split() == ["dead", "1"]

    wait_until(counted_dead, 20, "the dead job counted")
    shot(browser, "background")
    browser.find_element(By.LINK_TEXT, job_id).click()
    wait_until(lambda: "UNEXPECTED_ERROR" in text_of(browser, "job-fields"), 10, "its story")
    assert "4242-SECRET" not in browser.page_source
    shot(browser, "dead-job")
    deployed.records.delete(f"{deployed.prefix}failing")
    browser.find_element(By.ID, "retry").click()
    wait_until(lambda: browser.title.startswith("Confirm"), 10, "the confirmation")
    shot(browser, "confirm")
    browser.find_element(By.ID, "confirm").click()

    def succeeded() -> bool:
        return "succeeded" in text_of(browser, "attempts") and "Queued again" not in browser.title

    wait_until(succeeded, 60, f"the retried job's attempt on the page\n{deployed.logs()}")
    assert deployed.status(job_id) is JobStatus.SUCCEEDED
    assert deployed.records.lrange(f"{deployed.prefix}charged", 0, -1) == [job_id.encode()]
    shot(browser, "retried-job")
    web_log = next(p for p in deployed.processes if p.name == "web").output()
    assert f"Operator action retry-dead on {job_id} by ada: queued 1 of 1" in web_log


def test_a_paused_job_is_skipped_by_beat_until_resumed(
    deployed: Deployment, browser: WebDriver
) -> None:
    browser.get(f"{deployed.url}/scheduled/job?name={HEARTBEAT}")
    browser.find_element(By.ID, "reason").send_keys("invoices wrong")
    browser.find_element(By.ID, "pause").click()
    wait_until(lambda: browser.title.startswith("Confirm"), 10, "the confirmation")
    browser.find_element(By.ID, "confirm").click()

    def skipped() -> bool:
        return "skipped-paused" in text_of(browser, "history")

    wait_until(skipped, 30, f"beat's skipped-paused in the history\n{deployed.logs()}")
    assert "paused by ada" in text_of(browser, "paused")
    shot(browser, "paused")
    beat = next(p for p in deployed.processes if p.name == "beat").output()
    assert f"Scheduled job skipped: paused by an operator job={HEARTBEAT}" in beat
    web_log = next(p for p in deployed.processes if p.name == "web").output()
    assert f"Operator action pause on {HEARTBEAT} by ada: paused" in web_log
    assert 'reason="invoices wrong"' in web_log

    browser.find_element(By.ID, "resume").click()
    wait_until(lambda: browser.title.startswith("Confirm"), 10, "the confirmation")
    browser.find_element(By.ID, "confirm").click()
    wait_until(lambda: text_of(browser, "paused") == "no", 10, "the job resumed")


def test_the_dashboard_counts_what_the_operator_did(
    deployed: Deployment, browser: WebDriver
) -> None:
    browser.get(f"{deployed.url}/")

    def counted() -> bool:  # the counts are read again every few seconds
        return text_of(browser, "count-succeeded").split() == ["succeeded", "1"]

    wait_until(lambda: "skipped-paused" in browser.page_source, 20, "the dashboard")
    wait_until(counted, 20, "the succeeded job counted")
    assert "browser.charge" in browser.page_source
    shot(browser, "dashboard")
