"""The reports of one representative run, as a dashboard and a person see them.

One suite run (module-scoped: about 15 s of pytest) gives every kind of
cell: ``pass`` (reference), ``FAIL`` (a planted splitter that counts frozen
parameters), ``known`` (torch 2.13's splitting bugs), ``n/p`` (the planted
splitter has no fsdp2 area), a user's case error and a model's exposure. It
writes the JSON report, the ``--fsdpcheck-html`` page and pytest-html's
report; the tests read them back, and a real headless Chromium opens the
pages over the DevTools protocol.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
PLANTED = "tests.planted.splitting:CountsFrozen"
CASE_ERROR = "tests.planted.mistakes:plan_raises"
MODEL = "tests.planted.plans:good"
SCREENSHOT = ROOT / "docs" / "_static" / "report.png"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The run's folder, its JSON report and its pytest output."""
    folder = tmp_path_factory.mktemp("report-run")
    args = [
        sys.executable, "-m", "pytest", "--fsdpcheck", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
        f"--rootdir={folder}", "-p", "tests.planted.noshrink",
        "--fsdpcheck-impl", "torch", "--fsdpcheck-impl", "reference", "--fsdpcheck-impl", PLANTED,
        "--fsdpcheck-model", CASE_ERROR, "--fsdpcheck-model", MODEL,
        "-k", "test_sizes_cases or test_counted_once or test_model_case or test_model_fsdp2_walk or test_model_buckets",
        "--fsdpcheck-report", "report.json", "--fsdpcheck-html", "report.html",
    ]
    if _has_pytest_html():
        args += ["--html", "pytest-html.html"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True, timeout=900,
                          preexec_fn=lambda: os.umask(0o022))
    report = folder / "report.json"
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return folder, json.loads(report.read_text()), proc.stdout


def _has_pytest_html() -> bool:
    import importlib.util

    return importlib.util.find_spec("pytest_html") is not None


# --- the JSON report -------------------------------------------------------------------


def test_the_run_has_every_kind_of_cell(run):
    _, report, out = run
    outcomes = {cell["outcome"] for cells in report["matrix"].values() for cell in cells.values()}
    assert {"pass", "fail", "known", "not provided"} <= outcomes, (outcomes, out[-2000:])
    assert report["case_errors"] and report["exposure"][MODEL], out[-2000:]
    # each model's own cells, each implementation's (issue 56, item 4); the case error's checks none judged
    models = report["models"]
    assert set(models) == {MODEL, CASE_ERROR} and set(models[MODEL]) == {"torch", "reference", PLANTED}, models
    assert {cell["outcome"] for cells in models[CASE_ERROR].values() for cell in cells.values()} <= {"skipped", "not provided"}, models


def test_the_report_matches_its_published_schema(run):
    jsonschema = pytest.importorskip("jsonschema")
    from pytest_fsdpcheck.report import SCHEMA_VERSION, schema

    _, report, _ = run
    assert report["schema_version"] == SCHEMA_VERSION
    jsonschema.Draft202012Validator.check_schema(schema())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
              for e in jsonschema.Draft202012Validator(schema()).iter_errors(report)]
    assert not errors, "\n".join(errors)


def test_np_cells_carry_their_reasons(run):
    _, report, _ = run
    np_cells = {inv: cell for inv, cell in report["matrix"][PLANTED].items() if cell["outcome"] == "not provided"}
    assert np_cells, report["matrix"][PLANTED]
    for inv, cell in np_cells.items():
        assert cell["reasons"] == [f"{PLANTED} has no fsdp2 area"], (inv, cell)
    skipped = [t for t in report["tests"].values() if t["outcome"] == "skipped" and t.get("implementation") == PLANTED]
    assert skipped and all(t["reason"] for t in skipped), skipped


def test_a_failure_carries_its_message_and_reproducer(run):
    _, report, _ = run
    failed = [t for t in report["tests"].values() if t["outcome"] == "failed"]
    assert failed and all(t["implementation"] == PLANTED for t in failed), failed
    for test in failed:
        failure = test["failure"]
        assert failure["invariants"] and all(inv in failure["message"] for inv in failure["invariants"]), failure
        assert f"load_implementation({PLANTED!r})" in failure["reproducer"], failure


def test_the_report_files_have_the_umask_mode(run):
    folder, _, _ = run
    for name in ("report.json", "report.html"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o644, name


# --- the pages ----------------------------------------------------------------------------


def test_the_page_is_self_contained(run):
    folder, _, out = run
    assert "fsdpcheck: HTML report written to report.html" in out
    page = (folder / "report.html").read_text()
    # nothing fetched: no script, stylesheet link, image, frame or remote URL
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b", page, re.I)
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:|//|file:)", page, re.I)
    assert "url(" not in page


def test_pytest_html_carries_the_suites_sections(run):
    if not _has_pytest_html():
        pytest.skip("pytest-html is not installed")
    folder, _, _ = run
    page = (folder / "pytest-html.html").read_text()
    assert '<table class="matrix">' in page and 'id="known"' in page and 'id="not-provided"' in page
    assert 'id="exposure"' in page and 'id="case-errors"' in page


# --- in a browser ---------------------------------------------------------------------------


def _chromium() -> str | None:
    return next(filter(None, (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome"))), None)


@pytest.fixture(scope="module")
def browser():
    binary = _chromium()
    if binary is None:
        pytest.skip("no chromium on PATH: the pages are not opened in a browser")
    page = Page(binary)
    yield page
    page.close()


def _open(page, path: Path) -> None:
    page.events.clear()
    page.call("Page.navigate", url=path.as_uri())
    page.wait_for("Page.loadEventFired")


def _matrix_as_seen(page) -> list[list[str]]:
    """The matrix's rows as rendered text, where the table is on screen."""
    return page.evaluate("""(() => {
        const table = document.querySelector('table.matrix');
        const box = table && table.getBoundingClientRect();
        if (!box || box.width === 0 || box.height === 0) return null;
        return [...table.rows].map(r => [...r.cells].map(c => c.innerText.trim()));
    })()""")


def _expected_rows(report) -> list[list[str]]:
    from pytest_fsdpcheck.core.catalog import INVARIANTS, sort_key
    from pytest_fsdpcheck.report.html import CELL

    numbers = {(b["implementation"], b["id"]): b["number"] for b in report["known_bugs"] if b["number"]}
    impls = report["header"]["implementations"]
    rows = [["invariant", *impls, "statement"]]
    for inv in sorted({i for cells in report["matrix"].values() for i in cells}, key=sort_key):
        row = [inv]
        for impl in impls:
            cell = report["matrix"][impl].get(inv)
            text = "-" if cell is None else CELL[cell["outcome"]][0]
            if cell is not None and cell["outcome"] == "known":
                text += " " + ",".join(f"[{n}]" for n in sorted(numbers[(impl, b)] for b in cell["known"]))
            row.append(text)
        rows.append([*row, INVARIANTS[inv]])
    return rows


def test_a_person_sees_the_matrix_and_reaches_the_reproducer(run, browser):
    folder, report, _ = run
    _open(browser, folder / "report.html")
    assert _matrix_as_seen(browser) == _expected_rows(report)
    column = report["header"]["implementations"].index(PLANTED) + 1
    link = browser.evaluate(f"""(() => {{
        const cell = [...document.querySelectorAll('table.matrix tbody tr')]
            .map(r => r.cells[{column}]).find(c => c.innerText.trim() === 'FAIL');
        const a = cell && cell.querySelector('a');
        if (!a) return null;
        const box = a.getBoundingClientRect();
        return {{href: a.getAttribute('href'), x: box.x + box.width / 2, y: box.y + box.height / 2}};
    }})()""")
    assert link is not None, "no FAIL cell with a link in the planted implementation's column"
    _write_screenshot(browser)
    for kind in ("mousePressed", "mouseReleased"):
        browser.call("Input.dispatchMouseEvent", type=kind, x=link["x"], y=link["y"], button="left", clickCount=1)
    seen = _poll(browser, """(() => {
        const target = document.querySelector(':target');
        if (!target) return null;
        const box = target.getBoundingClientRect();
        return {hash: location.hash, top: box.top, height: innerHeight, text: target.innerText};
    })()""")
    assert seen is not None and seen["hash"] == link["href"], seen
    # the browser scrolls the anchor to the top in fractional pixels: -1/64 px is on screen
    assert -1 < seen["top"] < seen["height"], f"the reproducer is off screen after the click: {seen}"
    assert "Reproducer" in seen["text"] and f"load_implementation('{PLANTED}')" in seen["text"], seen["text"][:500]
    assert browser.console_errors() == []


def test_pytest_html_page_shows_the_matrix_without_script_errors(run, browser):
    if not _has_pytest_html():
        pytest.skip("pytest-html is not installed")
    folder, report, _ = run
    _open(browser, folder / "pytest-html.html")
    # pytest-html's own script builds its results table: it ran next to the sections
    assert _poll(browser, "document.querySelectorAll('#results-table tbody').length") > 0
    assert _matrix_as_seen(browser) == _expected_rows(report)
    assert browser.console_errors() == []


def test_the_history_grid_page_shows_each_release(run, browser, tmp_path):
    from pytest_fsdpcheck.commands.history import main
    from pytest_fsdpcheck.core.catalog import sort_key

    folder, report, _ = run
    reports = tmp_path / "reports"
    reports.mkdir()
    for version in ("2.12.0", "2.13.0"):  # the same run, as if on two releases
        (reports / f"torch-{version}.json").write_text(json.dumps({**report, "header": {**report["header"], "torch": version}}))
    grid = tmp_path / "grid.html"
    main(["--table-from", str(reports), "--html", str(grid)])
    _open(browser, grid)
    rows = _matrix_as_seen(browser)
    # a column per release x implementation (torch's first), as the report's header names them
    impls = ["torch", *sorted(set(report["matrix"]) - {"torch"})]
    devices = report["header"]["devices"]
    suffix = "" if devices == ["cpu"] else f" ({'+'.join(devices)})"
    heads = [(v if i == "torch" else f"{v} {i}") + suffix for v in ("2.12.0", "2.13.0") for i in impls]
    assert rows is not None and rows[0][:1 + len(heads)] == ["invariant", *heads], rows
    assert [r[0] for r in rows[1:]] == sorted({inv for m in report["matrix"].values() for inv in m}, key=sort_key)
    later = 1 + len(impls)  # torch's column of the second release
    for row in rows[1:]:
        cell = report["matrix"]["torch"].get(row[0])
        assert row[1] == row[later], row
        assert cell is None or row[1].startswith(CELL_TEXT[cell["outcome"]]), (row, cell)
    assert any(r[1].startswith("known") for r in rows[1:]), rows
    assert browser.console_errors() == []


CELL_TEXT = {"pass": "pass", "known": "known", "fail": "FAIL", "not provided": "n/p", "skipped": "skipped"}


def _poll(page, expression, timeout=5.0):
    deadline = time.monotonic() + timeout
    while True:
        value = page.evaluate(expression)
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def _write_screenshot(page) -> None:
    """The matrix as the docs show it (docs/report.md), written only where it
    changed: the page of a derandomized run draws the same pixels each time."""
    shot = base64.b64decode(page.call("Page.captureScreenshot", format="png",
                                      clip={"x": 0, "y": 0, "width": 1400, "height": 900, "scale": 1})["data"])
    assert shot.startswith(b"\x89PNG")
    # the docs' picture of the page is refreshed only when asked: a test run
    # never changes the checkout it runs in
    if os.environ.get("FSDPCHECK_UPDATE_SCREENSHOT") == "1" and SCREENSHOT.read_bytes() != shot:
        SCREENSHOT.write_bytes(shot)


class Page:
    """One headless Chromium tab over the DevTools protocol, spoken with the
    standard library (a websocket needs a handshake and masked frames)."""

    def __init__(self, binary: str, timeout: float = 30.0):
        self.timeout = timeout
        self.events: list[dict] = []
        self.next_id = 0
        self.profile = tempfile.mkdtemp(prefix="fsdpcheck-chromium-")
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "--window-size=1400,900", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            port = self._port()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as fh:
                target = next(t for t in json.load(fh) if t["type"] == "page")
            self.sock = self._connect(port, target["webSocketDebuggerUrl"].split(f":{port}", 1)[1])
            for domain in ("Runtime", "Log", "Page"):
                self.call(f"{domain}.enable")
            # the viewport itself (the window size leaves room for a window's frame)
            self.call("Emulation.setDeviceMetricsOverride", width=1400, height=900, deviceScaleFactor=1, mobile=False)
        except BaseException:
            self.close()
            raise

    def _port(self) -> int:
        said = []
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            said.append(line)
            found = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if found:
                return int(found.group(1))
        raise RuntimeError("chromium did not start: " + "".join(said[-5:]))

    def _connect(self, port: int, path: str) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port), timeout=self.timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"chromium refused the websocket: {head[:200]!r}")
        return sock

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise RuntimeError("chromium closed the DevTools connection")
            data += chunk
        return data

    def _send(self, text: str) -> None:
        data, mask = text.encode(), os.urandom(4)
        n = len(data)
        size = bytes([0x80 | n]) if n < 126 else struct.pack(">BH", 0x80 | 126, n) if n < 1 << 16 else struct.pack(">BQ", 0x80 | 127, n)
        self.sock.sendall(b"\x81" + size + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _receive(self) -> dict:
        message = b""
        while True:
            first, second = self._exactly(2)
            n = second & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exactly(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exactly(8))[0]
            message += self._exactly(n)
            if first & 0x80:  # the frame that ends the message
                return json.loads(message)

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = self._receive()
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, event: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == event for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"chromium sent no {event}")
            self.events.append(self._receive())

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def console_errors(self) -> list[str]:
        """Uncaught exceptions, console.error calls and error log entries
        since the page was opened."""
        errors = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                errors.append(details.get("exception", {}).get("description") or details.get("text"))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                errors.append(params["entry"].get("text"))
        return errors

    def close(self) -> None:
        sock = getattr(self, "sock", None)
        if sock is not None:
            sock.close()
        self.proc.kill()
        self.proc.wait()
        self.proc.stderr.close()
        shutil.rmtree(self.profile, ignore_errors=True)
