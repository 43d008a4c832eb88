"""The course in JupyterLab, in a real browser: Playwright drives Debian's Chromium against
JupyterLab started from the course's own environment on 127.0.0.1, in a temporary copy of the
lessons holding the exercise versions students open (`make course`: solutions stubbed, no
outputs), and stopped by its process id at the end.

- Every lesson, freshly opened, is not marked modified (the tab has no unsaved-changes dot).
- Every lesson with a slider, as a student uses it: its first cell and each slider cell run with
  no error output (the slider cells need only the first cell) and each slider, moved, redraws its
  plot (the pixels differ); in one lesson (RUN_ALL) Run All (the Run menu's command) then runs
  every cell with no error output (an unfinished exercise prints its checker's TODO and breaks no
  later cell, a training run's progress bar leaves no widget behind), and each slider, moved
  again, still redraws with no traceback; the saved file holds no widget but the sliders, and
  after a page reload with the kernel still running, and after reopening the lesson once the
  kernel is gone, every slider shows and no widget error does (a page showing one is reloaded
  once: `check_widgets_after_reopening` says why).

The other lessons' Run All is covered without running them (with each slider lesson run in full,
these tests took about twice as long: docs/measurements.md): in tests/test_course.py, no cell but an exercise's own reads what an
exercise defines, no cell but the first and the slider's own binds a name a slider reads, and
`make lessons` runs every lesson top to bottom under nbval.

Every wait is for a state (a cell's execution count, no cell queued, the kernel idle, an image
replaced or an error shown), never a fixed time, so a slow machine only makes it slower; a plot's
picture is retaken until the image was not replaced while it was taken (the output widget may swap
it after the kernel reports idle). The one timed window, 3 s in which a freshly opened lesson must
stay unmodified, can only let a late mark through, never fail a good lesson. The kernels run at one
thread, as the lessons are stored and checked. Under pytest-xdist each worker starts its own
JupyterLab and Chromium; `make browser` runs one worker (see the Makefile).
"""
import io
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import matplotlib.image
import nbformat
import numpy as np
import pytest

from browser import browser  # noqa: F401  (the fixture)
from minirl.course import commands

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is missing: make install")
expect, PlaywrightError = sync_api.expect, sync_api.Error
pytestmark = pytest.mark.browser

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
NOTEBOOKS = sorted(p.name for p in LESSONS.glob("[0-9][0-9]_*.ipynb"))
WAIT_MS = 300_000  # the longest any one state may take to arrive (a lesson's Run All included)
expect.set_options(timeout=WAIT_MS)


def cells(name: str) -> list[dict]:
    return json.loads((LESSONS / name).read_text())["cells"]


def slider_cells(name: str) -> list[int]:
    """Indices of the cells that show a slider."""
    return [i for i, c in enumerate(cells(name)) if c["cell_type"] == "code" and "widgets.interact" in "".join(c["source"])]


WIDGET_LESSONS = [n for n in NOTEBOOKS if slider_cells(n)]
PLAIN_LESSONS = [n for n in NOTEBOOKS if n not in WIDGET_LESSONS]
RUN_ALL = "12_imitation_irl_gail.ipynb"  # the cheapest slider lesson with a training run (and so a progress bar)


@dataclass
class Lab:
    url: str
    token: str
    folder: Path

    def api(self, method: str, path: str) -> object:
        request = urllib.request.Request(f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            body = reply.read()
        return json.loads(body) if body else None

    def shut_down_kernels(self) -> None:
        for session in self.api("GET", "/api/sessions"):
            self.api("DELETE", f"/api/sessions/{session['id']}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lab_settings(folder: Path) -> None:
    """User settings for this run only: every cell in the DOM (no virtual scrolling, so a cell can be
    found by its index), no autosave (it would clear the modified mark this test looks for), and no
    news or update checks (the machine is offline)."""
    for plugin, settings in {"notebook-extension/tracker": {"windowingMode": "none"},
                             "docmanager-extension/plugin": {"autosave": False},
                             "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False}}.items():
        path = folder / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))


@pytest.fixture(scope="module")
def lab(tmp_path_factory, browser):  # noqa: F811  (after the browser fixture, so no browser means no server)
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(LESSONS, root / "lessons", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    for name in NOTEBOOKS:  # the exercise versions, as `make course` writes them (same cells, solutions stubbed)
        path = root / "lessons" / name
        nbformat.write(commands.student_version(nbformat.read(path, as_version=4)), path)
    lab_settings(root / "settings")
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(root / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(root / "workspaces"))
    env.pop("MINIRL_PROGRESS", None)  # progress bars on, as students see them
    # kernels at one thread, as the lessons are stored and checked: a two-thread kernel beside
    # Chromium and the server oversubscribes a 2-core machine, and OpenMP's spinning then slows a
    # lesson's Run All several-fold
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root / 'lessons'}"]
    if os.getuid() == 0:
        command.append("--allow-root")
    log = open(root / "lab.log", "w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    lab = Lab(f"http://127.0.0.1:{port}", token, root / "lessons")
    try:
        wait_for_server(lab, server, root / "lab.log")
        yield lab
    finally:
        server.terminate()  # the server shuts its kernels down on SIGTERM
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def wait_for_server(lab: Lab, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            lab.api("GET", "/api/status")
            return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"JupyterLab did not answer within {WAIT_MS / 1000:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def context(browser):  # noqa: F811  (one context for the module: JupyterLab's scripts load once, then from cache)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(WAIT_MS)
    yield context
    context.close()


@pytest.fixture
def page(context, lab):
    page = context.new_page()
    yield page
    page.close()
    lab.shut_down_kernels()


def open_lesson(page, lab: Lab, name: str):
    """Open a lesson alone in a fresh workspace; return its cells once all are shown and the kernel is idle."""
    page.goto(f"{lab.url}/lab/workspaces/{uuid.uuid4().hex}/tree/{name}?token={lab.token}")
    notebook_cells = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")
    expect(notebook_cells).to_have_count(len(cells(name)))
    wait_idle(page)
    return notebook_cells


def wait_idle(page) -> None:
    """Wait for the status bar's "<kernel name> | Idle": the kernel exists and is idle. (The notebook
    toolbar's execution indicator already says idle while the status bar says "No Kernel".)"""
    expect(page.locator('.jp-StatusBar-TextItem[title^="Change kernel"]')).to_have_text(re.compile(r"^Python 3 \(ipykernel\) \| Idle$"))


def modified_tabs(page):
    return page.locator(".lm-TabBar-tab.jp-mod-dirty")


def stays_unmodified(page, seconds: float = 3.0) -> None:
    """No modified mark now or for a few seconds more. JupyterLab marks a lesson modified, if at all,
    when the kernel's spec and language info arrive, around its first idle; waiting longer than
    that can only let a late mark through (it cannot make a good lesson fail)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert modified_tabs(page).count() == 0, "JupyterLab marked the freshly opened lesson modified"
        time.sleep(0.1)


def run_cell(page, cell, count: int) -> None:
    """Run one cell (select it, Ctrl+Enter) and wait until the kernel has given it `count`."""
    cell.locator(".jp-InputPrompt").click()
    page.keyboard.press("Control+Enter")
    expect(cell.locator(".jp-InputPrompt")).to_have_text(f"[{count}]:")
    wait_idle(page)


def code_cells(name: str) -> list[int]:
    return [i for i, c in enumerate(cells(name)) if c["cell_type"] == "code"]


def run_all(page, notebook_cells, name: str, count: int) -> None:
    """Run > Run All Cells, in a kernel that has given out `count` execution counts so far; return
    once no cell is queued and the kernel is idle, every code cell having run with no error output."""
    last = notebook_cells.nth(code_cells(name)[-1]).locator(".jp-InputPrompt")
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel:text-is('Run All Cells')").click()
    expect(last).to_have_text("[*]:")  # queued: the run has begun
    expect(page.locator(".jp-InputPrompt", has_text="[*]:")).to_have_count(0)  # finished, or stopped by an error
    wait_idle(page)
    for i in code_cells(name):
        errors = error_outputs(notebook_cells.nth(i))
        assert errors.count() == 0, f"Run All: cell {i} of {name} wrote an error:\n" + "\n".join(errors.all_inner_texts())[-2000:]
    expect(last).to_have_text(f"[{count + len(code_cells(name))}]:", timeout=5_000)  # every cell ran, in order


def error_outputs(cell):
    return cell.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')


def pixels(png: bytes) -> np.ndarray:
    return matplotlib.image.imread(io.BytesIO(png), format="png")


def settled_plot(plot, tries: int = 40) -> tuple[np.ndarray, str]:
    """The plot's pixels and its source, taken while it is not being replaced: the widget's output
    can swap its image after the kernel reports idle, detaching the element mid-screenshot."""
    for _ in range(tries):
        source = plot.get_attribute("src")
        try:
            png = plot.screenshot()
        except PlaywrightError:  # replaced between finding the image and taking its picture
            png = None
        if png is not None and plot.get_attribute("src") == source:
            return pixels(png), source
        time.sleep(0.25)
    raise AssertionError(f"the plot was still being replaced after {tries} tries")


# in a slider's output: a plot other than `source`, or an error (a failing function's traceback)
REDRAWN_OR_FAILED = """([output, source]) => {
    const img = output.querySelector("img");
    return (img !== null && img.src !== source)
        || output.querySelector('[data-mime-type="application/vnd.jupyter.stderr"]') !== null;
}"""


def move_and_check_redraw(page, cell, slider, where: str) -> None:
    """Move one slider a step with the keyboard; the plot must be replaced by one whose pixels differ,
    and the cell's output must show no traceback (a slider's function that fails writes one there)."""
    output = cell.locator(".widget-output")
    plot = output.locator("img").first
    before, source = settled_plot(plot)
    readout, handle = slider.locator(".widget-readout"), slider.locator(".noUi-handle")
    value = readout.inner_text()
    at_max = float(handle.get_attribute("aria-valuenow")) >= float(handle.get_attribute("aria-valuemax"))
    handle.focus()
    page.keyboard.press("ArrowLeft" if at_max else "ArrowRight")
    expect(readout).not_to_have_text(value)
    page.wait_for_function(REDRAWN_OR_FAILED, arg=[output.element_handle(), source])
    wait_idle(page)
    moved = f"{where}: slider {slider.locator('.widget-label').inner_text()!r} moved from {value} to {readout.inner_text()}"
    text = cell.locator(".jp-Cell-outputArea").inner_text()
    assert "Traceback" not in text and "Error" not in text, f"{moved}, its output shows an error:\n{text[-3000:]}"
    after, _ = settled_plot(plot)
    assert before.shape != after.shape or np.abs(before - after).max() > 0, f"{moved}, the plot did not change"


def move_every_slider(page, notebook_cells, name: str, when: str) -> None:
    for i in slider_cells(name):
        cell = notebook_cells.nth(i)
        sliders = cell.locator(".widget-slider")
        expect(sliders.first).to_be_visible()
        for k in range(sliders.count()):
            move_and_check_redraw(page, cell, sliders.nth(k), f"{name} cell {i} {when}")


@pytest.mark.parametrize("name", PLAIN_LESSONS)
def test_a_freshly_opened_lesson_is_not_marked_modified(page, lab, name):
    open_lesson(page, lab, name)
    stays_unmodified(page)


@pytest.mark.parametrize("name", WIDGET_LESSONS)
def test_sliders_redraw_and_survive_save_and_reload(page, lab, name):
    notebook_cells = open_lesson(page, lab, name)
    stays_unmodified(page)  # freshly opened, as every lesson
    ran = code_cells(name)[:1] + slider_cells(name)  # the slider cells need only the first cell
    for count, i in enumerate(ran, start=1):
        run_cell(page, notebook_cells.nth(i), count)
    for i in ran:  # each has finished (its execution count is set and the kernel is idle)
        errors = error_outputs(notebook_cells.nth(i))
        assert errors.count() == 0, f"cell {i} of {name} wrote an error:\n" + "\n".join(errors.all_inner_texts())[-2000:]
    expect(modified_tabs(page)).to_have_count(1)  # the check above sees a modified lesson when there is one
    move_every_slider(page, notebook_cells, name, "after its first cell and slider cells")

    if name == RUN_ALL:  # what a student does: every cell, later ones included
        run_all(page, notebook_cells, name, count=len(ran))
        move_every_slider(page, notebook_cells, name, "after Run All")

    page.keyboard.press("Control+s")
    expect(modified_tabs(page)).to_have_count(0)
    saved = json.loads((lab.folder / name).read_text())
    widget_views = [i for i, c in enumerate(saved["cells"]) if any(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in c.get("outputs", []))]
    assert widget_views == slider_cells(name)  # no progress bar or other widget left in the saved lesson
    missing = models_missing_from_saved_state(saved)
    assert not missing, f"{name} saved without the state of the widget models {missing}: reopened, they would not show"

    page.reload()  # the kernel still runs: the sliders come back from it
    check_widgets_after_reopening(page, name)
    lab.shut_down_kernels()  # a new day: the kernel is gone, the saved lesson is opened again
    open_lesson(page, lab, name)
    check_widgets_after_reopening(page, name)


PREDICTING = "01_token_mdp.ipynb"  # the cheapest lesson with a prediction (Run All in seconds; lesson 00 takes 40 s)


def test_a_prediction_reads_not_done_until_the_student_makes_one(page, lab):
    """What a student does with a prediction: Run All says none was made; one typed into the
    prediction cell, that cell and the reveal run again, prints WRONG (or RIGHT) with the answer."""
    notebook_cells = open_lesson(page, lab, PREDICTING)
    run_all(page, notebook_cells, PREDICTING, count=0)
    sources = ["".join(c["source"]) if c["cell_type"] == "code" else "" for c in cells(PREDICTING)]
    guess = next(i for i, s in enumerate(sources) if "### BEGIN PREDICTION" in s)
    reveal = notebook_cells.nth(next(i for i, s in enumerate(sources) if "check.prediction(" in s))
    expect(reveal.locator(".jp-OutputArea-output")).to_contain_text("TODO sft_mask_response_gain: no prediction yet")
    notebook_cells.nth(guess).locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.type("predicted_mask_gain = 'a'")
    ran = len(code_cells(PREDICTING))
    run_cell(page, notebook_cells.nth(guess), ran + 1)
    run_cell(page, reveal, ran + 2)
    expect(reveal.locator(".jp-OutputArea-output")).to_contain_text(
        'WRONG sft_mask_response_gain: you predicted "a"; the runs say "c"')


def models_missing_from_saved_state(saved: dict) -> list[str]:
    """The widget models a saved notebook's widget views need, directly or through another model's
    "IPY_MODEL_<id>" reference (a box's children, a slider's layout), that its saved widget state lacks."""
    state = saved["metadata"].get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    todo = [o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
            for c in saved["cells"] for o in c.get("outputs", []) if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    seen, missing = set(), []
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        if model not in state:
            missing.append(model)
        else:
            todo += re.findall(r"IPY_MODEL_([0-9a-f]+)", json.dumps(state[model]["state"]))
    return missing


def check_widgets_after_reopening(page, name: str) -> None:
    """No widget error anywhere, and each slider shown: live from a running kernel, else from the
    widget state saved with the notebook (jupyterlab/overrides.json). Every output the lesson
    holds was produced here, so JupyterLab trusts them all (one it has not seen produced would
    show a slider's text form until its cell runs again: such outputs are not trusted to run code).

    A page that shows a widget error is reloaded once and checked again. JupyterLab's widget
    manager (jupyterlab_widgets 3.0) restores a reopened notebook's widgets twice over: from the
    kernel and the saved state, and, when the new kernel's connection comes up first, from the
    kernel alone. If the second finishes first it declares the widgets restored before the saved
    state is read, and a slider drawn in between shows "model not found" for good. That happened
    in 2 of about 90 reopenings in our CI runs, both on a loaded machine; the saved state was
    complete both times (`models_missing_from_saved_state`, asserted before this). A reload,
    with the kernel already up, reads the saved state; a state really missing fails again."""
    if widget_errors(page, name):
        page.reload()
    errors = widget_errors(page, name)
    assert not errors, f"a widget error in {name} after reopening it and reloading once: {errors}"
    notebook_cells = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")
    for i in slider_cells(name):
        expect(notebook_cells.nth(i).locator(".widget-slider").first).to_be_visible()


def widget_errors(page, name: str) -> list[str]:
    """The texts of the widget errors shown once every cell is shown, the kernel is idle and no
    widget is still loading."""
    expect(page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")).to_have_count(len(cells(name)))
    wait_idle(page)
    expect(page.get_by_text("Loading widget...")).to_have_count(0)  # every widget output rendered or failed
    return page.get_by_text("Error displaying widget").all_inner_texts()
