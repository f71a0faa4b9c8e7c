"""How real processes stop: refusing to start, a beat stopped mid-send, a worker's grace."""

from __future__ import annotations

import json

import pytest
from process_support import Deployment, wait_until

pytestmark = pytest.mark.processes

EVERY_SECOND = "proc.every-second"


def test_a_worker_and_a_beat_refuse_to_start_once_the_configuration_allows_pickle(
    deploy: Deployment,
) -> None:
    """``install_jobs`` refused pickle; a ``conf.update`` after it turns it on anyway."""
    env = deploy.environment({EVERY_SECOND: {"enabled": True}})
    env["DDD_TEST_CONF_AFTER"] = json.dumps({"accept_content": ["json", "pickle"]})
    env["C_FORCE_ROOT"] = "1"  # as root, Celery's own refusal of pickle would come first
    worker = deploy.worker(env, pool="solo")
    beat = deploy.beat(env)

    wait_until(lambda: not worker.alive and not beat.alive, 40, "both processes to refuse")

    for process in (worker, beat):
        assert process.returncode not in (None, 0), deploy.logs()
        output = process.output()
        assert "ddd_celery refuses to start" in output, deploy.logs()
        assert "accept_content" in output, deploy.logs()
    assert deploy.ran(EVERY_SECOND) == []
