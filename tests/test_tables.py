"""`minirl.table`: a lesson's rows as an HTML table in Jupyter and as aligned text elsewhere."""
import pytest
import torch

import minirl
from minirl.core.tables import Table

ROWS = [("on-policy", 5e-4, [0.745, 0.7]), ("stale-1-none", 2.5e-4, [0.693, 0.65612])]
COLUMNS = ["run", "rate", "pass@1 by seed"]


def test_text_aligns_names_left_and_numbers_right_in_each_columns_format(capsys):
    minirl.table(ROWS, COLUMNS, title="held-out pass@1", formats={"rate": ".2g"})
    assert capsys.readouterr().out.splitlines() == [
        "held-out pass@1",
        "run" + " " * 14 + "rate  pass@1 by seed",
        "------------  -------  --------------",
        "on-policy" + " " * 6 + "0.0005    0.745  0.700",
        "stale-1-none  0.00025    0.693  0.656"]


def test_html_has_the_caption_the_header_and_every_cell_escaped():
    shown = Table(ROWS + [("a < b & c", None, torch.tensor(2.0))], COLUMNS, title="x < y", digits=2)
    page = shown._repr_html_()
    assert page.startswith('<table><caption style="text-align: left">x &lt; y</caption><thead><tr>')
    assert page.count("<tr>") == 4 and page.count("</th>") == 3 and page.count("</td>") == 9
    assert "<td>0.74  0.70</td>" in page and "a &lt; b &amp; c" in page and "<td>-</td>" in page
    assert "<td>2.00</td>" in page  # a 0-d tensor reads as its number
    assert repr(shown) == shown.text()


def test_ints_and_bools_keep_no_decimals():
    assert Table([(3, True, 2.5)], ["n", "ok", "x"], digits=1).text().splitlines()[-1] == "3  True  2.5"


@pytest.mark.parametrize("rows, columns, formats, match", [
    ([("a", 1.0)], ["run"], None, "row 0 has 2 cells for 1 columns"),
    ([("a", 1.0)], ["run", "x"], {"y": ".2f"}, r"formats names \['y'\], which are not columns"),
    ([("a", {1: 2})], ["run", "x"], None, "a cell holds text, a number, a list of them or None; got dict")])
def test_a_malformed_table_is_refused_with_the_reason(rows, columns, formats, match):
    with pytest.raises((ValueError, TypeError), match=match):
        Table(rows, columns, formats=formats)
