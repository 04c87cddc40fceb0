"""The dask-fluid dashboard page in a real headless Chromium while a pserver job runs (issue 17).

Needs Debian's ``chromium`` (``apt-get install chromium``) and the ``playwright`` package
(the ``test`` extra), pointed at the system browser: no browser is ever downloaded. Skipped,
saying which is missing, elsewhere.
"""

from __future__ import annotations

import re
import shutil
import threading

import dask.array as da
import numpy as np
import pytest

from dask_fluid.datasets import reference_blobs
from dask_fluid.distributed import train_pserver
from dask_fluid.distributed.launch.dashboard.plugin import ensure_dashboard
from dask_fluid.models import mlp

pytestmark = pytest.mark.slow

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
#: generous: every wait below is for a condition, never a measured duration
WAIT_MS = 120_000


def _browser():
    if CHROMIUM is None:
        pytest.skip("no Chromium: apt-get install chromium (Debian) to run the browser test")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed (pip install playwright)")
    return sync_api


# the page's Bokeh models, read in the browser (the data the browser received)
_JOBS = """() => {
  const doc = window.Bokeh && Bokeh.documents[0];
  const src = doc && doc.get_model_by_name('jobs-source');
  return src ? {job: Array.from(src.data.job), status: Array.from(src.data.status)} : null;
}"""
_NEW_RUNNING = """(old) => {
  const src = Bokeh.documents[0].get_model_by_name('jobs-source');
  const job = Array.from(src.data.job), status = Array.from(src.data.status);
  return job.some((j, i) => !old.includes(j) && status[i] === 'running');
}"""
_LAST_STEP = """() => {
  const src = Bokeh.documents[0].get_model_by_name('loss-source');
  const xs = Array.from(src.data.xs, x => Array.from(x));
  return xs.length ? Math.max(...xs.map(x => x.length ? x[x.length - 1] : -1)) : -1;
}"""


def test_page_follows_a_running_pserver_job(dist_client, workers, tmp_path):
    sync_api = _browser()
    ensure_dashboard(dist_client)  # the page exists from the first job on; open it before
    url = dist_client.dashboard_link.rsplit("/", 1)[0] + "/individual-fluid-training"
    X, Y = reference_blobs(4_000)
    data = {"x": da.from_array(X, chunks=(2_000, 64)),
            "y": da.from_array(Y[:, None].astype(np.int64), chunks=(2_000, 1))}
    spec = mlp(hidden=(64,))
    outcome: dict = {}

    def train() -> None:  # long enough (~2,000 steps) for the page to watch it run
        try:
            outcome["result"] = train_pserver(
                dist_client, spec.main, spec.startup, data, pservers=workers[:2],
                trainers=workers[:2], epochs=60, batch_size=64, fetch_list=[spec.loss],
                callbacks=[lambda e: outcome.setdefault("job", e.get("job"))])
        except BaseException as exc:  # reported by the test thread
            outcome["error"] = exc

    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu",
                                           "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1100})
            page.goto(url, wait_until="load", timeout=WAIT_MS)
            page.wait_for_function(f"() => ({_JOBS})() !== null", timeout=WAIT_MS)
            before = set(page.evaluate(_JOBS)["job"])
            thread = threading.Thread(target=train, daemon=True)
            thread.start()
            # the page lists the new job, running
            page.wait_for_function(_NEW_RUNNING, arg=sorted(before), timeout=WAIT_MS)
            # its loss curve gains points while it runs
            page.wait_for_function(f"() => ({_LAST_STEP})() >= 0", timeout=WAIT_MS)
            first = page.evaluate(_LAST_STEP)
            page.wait_for_function(f"(first) => ({_LAST_STEP})() > first", arg=first,
                                   timeout=WAIT_MS)
            # the per-pserver table shows non-zero bytes
            page.wait_for_function(
                """() => { const s = Bokeh.documents[0].get_model_by_name('pservers-source');
                  return s.data.bytes_in.length === 2 &&
                         Array.from(s.data.bytes_in).every(b => !b.startsWith('0 B')); }""",
                timeout=WAIT_MS)
            # ... in the table the browser drew, too
            bytes_cell = page.locator(".slick-cell").filter(has_text=re.compile(r"\d [kMG]B"))
            bytes_cell.first.wait_for(timeout=WAIT_MS)
            page.screenshot(path=str(tmp_path / "fluid-dashboard.png"), full_page=True)
        finally:
            browser.close()
    thread.join(timeout=600)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"].steps > first
    assert (tmp_path / "fluid-dashboard.png").stat().st_size > 10_000
