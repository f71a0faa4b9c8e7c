"""``from ddd_celery import background`` is the decorator, ``from ddd_celery.background import``
the package's names, whichever of them a program imports first.

Each case runs in a fresh interpreter: the order in which a program first imports the package
is what would rebind the name.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

FIRST_IMPORTS = [
    "import ddd_celery",
    "from ddd_celery.background import JobStore",
    "import ddd_celery.background",
    "from ddd_celery.background.store import JobStore",
    "from ddd_celery.background import store",
]

CHECK = """
import sys
import ddd_celery
from ddd_celery import background
from ddd_celery.background import InMemoryJobStore, JobStore
from ddd_celery.declarations.background import background as decorator

assert background is decorator, background
assert ddd_celery.background is decorator, ddd_celery.background
package = sys.modules["ddd_celery.background"]
assert package.__name__ == "ddd_celery.background", package
assert package.JobStore is JobStore and package.InMemoryJobStore is InMemoryJobStore
"""


@pytest.mark.parametrize("first", FIRST_IMPORTS)
def test_the_decorator_and_the_package_keep_their_import_whatever_is_imported_first(
    first: str,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"{first}\n{CHECK}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
