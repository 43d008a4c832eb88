"""The course's figure style and `runs_band`, against plain computations; the stored figures keep it."""
import base64
import json
import struct

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import minirl  # noqa: E402
from minirl.core import figures  # noqa: E402
from minirl.course import commands  # noqa: E402


def quartiles_by_sorting(column):
    """Median and quartiles of a few values, by hand: linear interpolation between order statistics."""
    values = sorted(v for v in column if v == v)

    def at(q):
        position = q * (len(values) - 1)
        low = int(position)
        high = min(low + 1, len(values) - 1)
        return values[low] + (position - low) * (values[high] - values[low])
    return at(0.25), at(0.5), at(0.75)


def test_runs_band_draws_every_run_the_median_and_the_quartile_band():
    x = [0, 1, 2, 3]
    runs = [[0.0, 1.0, 2.0, 3.0], [0.0, 2.0, 2.5, -2.0], [0.0, 0.5, 9.0, 3.5], [0.0, 1.5, float("nan"), 3.2],
            [0.0, 1.2, 2.2, 3.1]]
    fig, ax = plt.subplots()
    figures.runs_band(ax, x, runs, color="C1", label="five seeds")
    median_line = next(line for line in ax.lines if line.get_label() == "five seeds")
    by_hand = [quartiles_by_sorting(column) for column in zip(*runs)]
    assert median_line.get_ydata() == pytest.approx([m for _, m, _ in by_hand])  # the median, not the mean (-2.0 would drag it)
    assert len(ax.lines) == 1 + len(runs)
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert min(band) == pytest.approx(min(q1 for q1, _, _ in by_hand))
    assert max(band) == pytest.approx(max(q3 for _, _, q3 in by_hand))
    assert all(line.get_color() == median_line.get_color() for line in ax.lines)
    plt.close(fig)


def test_runs_band_refuses_runs_that_do_not_match_x():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="each as long as x"):
        figures.runs_band(ax, [0, 1, 2], [[1, 2], [3, 4]])
    plt.close(fig)


def test_setup_applies_the_palette_and_resolution():
    minirl.setup()
    assert matplotlib.rcParams["figure.dpi"] == 110
    assert [c.lower() for c in matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]] == [c.lower() for c in figures.PALETTE]


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("path", commands.lesson_paths([]), ids=lambda p: p.name)
def test_stored_figures_are_legible(path):
    """Every stored figure is drawn at the course's resolution (about 300 pixels or more tall, so a
    label is about 15 pixels) and is no wider than about three panels in a row."""
    for cell in json.loads(path.read_text())["cells"]:
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                width, height = png_size(base64.b64decode(output["data"]["image/png"]))
                assert height >= 280, f"{path.name}: a figure {width}x{height} px, drawn below the course's resolution"
                assert width / height <= 4.5, f"{path.name}: a figure {width}x{height} px, more than three panels in a row"
