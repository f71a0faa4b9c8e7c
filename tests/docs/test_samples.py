"""Every Python sample of the README and of ``docs/`` runs, so the docs cannot drift.

Each page runs in a new interpreter in a folder of its own: samples declare jobs, and two
pages may declare the same job name, which one process's registry would refuse. A page that
talks to Redis reads ``REDIS_URL``: it gets the server of the suite's ``REDIS_URL`` (localhost by
default) but a database of its own, emptied after each page, so what a sample leaves behind
never reaches another test.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from services import REDIS_URL

from tests.docs.samples import SampleMarkerError, SampleSetupError, extract

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])


DOCS_REDIS_DB = 13 + int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
"""The database of the samples on the suite's Redis server, one per pytest worker (13, 14):
no other test uses it, and a page's flush never reaches a page another worker runs."""


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.fixture
def samples_redis_url() -> Iterator[str]:
    suite = urlsplit(REDIS_URL)
    url = urlunsplit(suite._replace(path=f"/{DOCS_REDIS_DB}"))
    yield url
    with contextlib.suppress(redis.ConnectionError):  # no Redis: no sample wrote to it
        redis.Redis.from_url(url, socket_connect_timeout=1).flushdb()


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_python_sample_of_the_page_runs_or_says_why_not(
    page: Path, tmp_path: Path, samples_redis_url: str
) -> None:
    samples = extract(page)
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
        "REDIS_URL": samples_redis_url,
    }

    done = subprocess.run(
        [sys.executable, str(HERE / "run_page.py"), str(page)],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-6000:]
    shown = sum(not sample.hidden for sample in samples.samples)
    ran = f"{shown} ran, {len(samples.skipped)} marked not to run"
    assert done.stdout.splitlines()[-1] == ran


def test_a_page_has_python_samples_to_run() -> None:
    shown = [sample for page in PAGES for sample in extract(page).samples if not sample.hidden]
    assert len(shown) >= 20


PAGE = """\
# A page

```python
first = 1
```

<!-- not-run: needs a Redis broker and a running beat -->

```python
raise SystemExit("never run")
```

1. A step:

   ```python
   # shop/jobs.py
   second = first + 1
   ```

```bash
echo not python
```
"""


def test_samples_are_read_in_order_indented_or_not_and_marked_ones_are_counted(
    tmp_path: Path,
) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)

    read = extract(page)

    assert [(s.line, s.code, s.path) for s in read.samples] == [
        (4, "first = 1\n", None),
        (16, "# shop/jobs.py\nsecond = first + 1\n", "shop/jobs.py"),
    ]
    assert [(s.line, s.reason) for s in read.skipped] == [
        (10, "needs a Redis broker and a running beat")
    ]


@pytest.mark.parametrize("marker", ["<!-- not-run -->", "<!-- not-run: -->", "<!--not-run:  -->"])
def test_a_sample_marked_not_to_run_without_a_reason_is_refused(
    tmp_path: Path, marker: str
) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"{marker}\n```python\nx = 1\n```\n")

    with pytest.raises(SampleMarkerError, match=r"page.md:1: a not-run marker says why"):
        extract(page)


def test_a_failing_sample_fails_its_page_naming_the_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 1\n```\n\n```python\nx = 1\nassert x == 2\n```\n")

    done = subprocess.run(
        [sys.executable, str(HERE / "run_page.py"), str(page)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(HERE)},
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 1
    assert "the sample at page.md:6 failed" in done.stderr
    assert "AssertionError" in done.stderr


def run_page(page: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HERE / "run_page.py"), str(page)],
        cwd=page.parent,
        env={**os.environ, "PYTHONPATH": str(HERE)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_each_sample_runs_alone_files_are_imported_and_await_runs(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- sample-setup\nimport os\n\nos.environ['SHOP_URL'] = 'redis://shop'\n-->\n\n"
        "```python\n# shop/values.py\nVALUE = 41\n```\n\n"
        "```python\nimport asyncio\nimport os\n\nfrom shop.values import VALUE\n\n"
        "await asyncio.sleep(0)\nanswer = VALUE + 1\nassert os.environ['SHOP_URL'] == 'redis://shop'\n```\n\n"
        "```python\n# continues the sample above\nassert answer == 42\n```\n\n"
        "<!-- sample-run -->\n```bash\necho said > said.txt\n```\n\n"
        "```python\nfrom pathlib import Path\n\n"
        "assert Path('said.txt').read_text() == 'said\\n'\n```\n"
    )

    done = run_page(page)

    assert done.returncode == 0, done.stderr
    assert done.stdout == "5 ran, 0 marked not to run\n"


@pytest.mark.parametrize(
    "uses",
    [
        "VALUE",  # a file's names do not leak into the snippets: the reader imports them
        "answer",  # nor a snippet's into the next one, unless it says it continues it
    ],
)
def test_a_sample_that_uses_a_name_it_does_not_show_fails(tmp_path: Path, uses: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\n# shop/values.py\nVALUE = 41\n```\n\n"
        "```python\nfrom shop.values import VALUE\n\nanswer = VALUE + 1\n```\n\n"
        f"```python\nassert {uses}\n```\n"
    )

    done = run_page(page)

    assert done.returncode == 1
    assert "the sample at page.md:13 failed" in done.stderr
    assert f"NameError: name '{uses}' is not defined" in done.stderr


@pytest.mark.parametrize(
    "setup",
    [
        "import os\nos.environ['REDIS_URL'] = 'redis://127.0.0.1:1/0'",
        "import os\nos.environ.setdefault('DATABASE_URL', 'sqlite:///shop.db')",
        "import os\nos.environ['BROKER_URL'] = os.environ.get('REDIS_URL', 'redis://x') + '/1'",
        "import os\nos.environ['BROKER_URL'] = f\"{os.environ['REDIS_URL']}/2\"",
    ],
)
def test_a_sample_setup_may_set_where_a_service_answers(tmp_path: Path, setup: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"<!-- sample-setup\n{setup}\n-->\n")

    assert [sample.hidden for sample in extract(page).samples] == [True]


@pytest.mark.parametrize(
    ("setup", "refused"),
    [
        ("from celery import Celery\napp = Celery('shop')", "from celery import Celery"),
        ("from datetime import timedelta", "from datetime import timedelta"),
        ("import os\nos.environ['RUN_JOBS'] = 'true'", "os.environ['RUN_JOBS'] = 'true'"),
        ("import os\ndel os.environ['RUN_JOBS']", "del os.environ['RUN_JOBS']"),
        ("import os\nos.environ['REDIS_URL'] = make_url()", "os.environ['REDIS_URL'] = make_url()"),
        ("import os\nassert os.environ.get('RUN_JOBS') == 'true'", "assert os.environ.get"),
        ("import pathlib\npathlib.Path('shop').mkdir()", "import pathlib"),
        ("config = object()", "config = object()"),
        ("await scheduler.stop()", "await scheduler.stop()"),
    ],
)
def test_a_sample_setup_that_hides_more_than_a_service_url_is_refused(
    tmp_path: Path, setup: str, refused: str
) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"# A page\n\n<!-- sample-setup\n{setup}\n-->\n")

    with pytest.raises(
        SampleSetupError, match=r"page.md:\d+: a sample-setup only sets the URL"
    ) as error:
        extract(page)

    assert refused in str(error.value)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_no_page_hides_more_than_the_url_of_a_service(page: Path) -> None:
    hidden = [sample for sample in extract(page).samples if sample.hidden]

    assert all("os.environ" in sample.code for sample in hidden)
