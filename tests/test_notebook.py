"""What a student's saved notebook keeps: a progress bar, once its loop ends, leaves no widget (which
would read "model not found" on reopening) and no text behind; refreshed lessons store the
kernelspec JupyterLab would write."""
import nbformat
import pytest

from minirl.core import notebook
from minirl.course import commands

LOOP = """import time
from minirl.core.notebook import progress
total = 0
for i in progress(range(4), desc="steps"):
    time.sleep(0.3)
    total += i
print(total)"""


@pytest.mark.slow
def test_a_progress_bar_in_jupyter_leaves_nothing_behind(monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("MINIRL_PROGRESS", "1")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(LOOP)])
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    outputs = nb.cells[0].outputs
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    bars = [o for o in outputs if o.output_type == "display_data"]
    assert len(bars) == 1 and bars[0].data == {"text/plain": ""}  # shown while running, emptied at the end
    assert [o.text for o in outputs if o.output_type == "stream"] == ["6\n"]


def test_the_bar_says_how_far_and_how_long():
    html = notebook.bar_html("GRPO", 12, 40, 3.0)
    assert '<progress value="12" max="40"' in html and "GRPO 12/40, 3 s so far, about 7 s left" in html


def test_progress_off_and_outside_jupyter_yields_every_item(monkeypatch):
    for flag in ("0", "1"):  # off, and on in a plain Python process (tqdm's text bar)
        monkeypatch.setenv("MINIRL_PROGRESS", flag)
        assert list(notebook.progress(range(5), desc="x")) == [0, 1, 2, 3, 4]


def test_refresh_stores_the_kernelspec_jupyterlab_writes():
    spec = commands.kernelspec()
    assert spec["name"] == "python3" and spec["language"] == "python"
    assert spec["display_name"] == "Python 3 (ipykernel)"


@pytest.mark.parametrize("path", commands.lesson_paths([]), ids=lambda p: p.name)
def test_stored_lessons_hold_no_widget_state_or_views(path):
    """JupyterLab saves widget state with a notebook here (jupyterlab/overrides.json); a lesson saved
    from JupyterLab must go through `refresh` (which strips it) before it is committed."""
    nb = nbformat.read(path, as_version=4)
    assert "widgets" not in nb.metadata
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {})
                   for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs)


def test_setup_in_a_plain_script_keeps_main():
    """minirl.setup outside IPython must not replace sys.modules['__main__'] (an IPython shell started
    by the figure settings did, and a script's process pool then lost its functions)."""
    import subprocess
    import sys
    code = "import sys, minirl\ndef marker(): pass\nminirl.setup(0)\nassert hasattr(sys.modules['__main__'], 'marker')\n"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0
