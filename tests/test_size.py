"""A lesson's main path, counted: words and code lines outside "(optional)" sections, against the budget."""
import json

import pytest

from minirl.course import commands, size


def notebook(*cells):
    return {"cells": [{"cell_type": kind, "source": source} for kind, source in cells]}


def test_optional_sections_are_counted_apart_until_a_heading_of_their_level_or_above():
    nb = notebook(
        ("markdown", "# Lesson\none two three\n## 1. Main\nfour five"),          # 1 + 3 + 2 + 2 words on the main path
        ("code", "x = 1\n\ny = 2\n"),                                            # 2 lines (the blank one not counted)
        ("markdown", "## 2. A detour (optional)\nsix seven eight\n### 2.1 deeper\nnine"),  # 4 + 3 + 2 + 1 off it
        ("code", "z = 3"),                                                       # 1 line off it
        ("markdown", "## 3. Back\nten"),                                         # 2 + 1 on it again
        ("code", "w = 4"))
    assert size.main_path_size(nb) == size.Size(words=11, code_lines=3, optional_words=10, optional_code_lines=1)


def test_a_heading_inside_an_optional_section_does_not_end_it_and_sources_may_be_line_lists():
    nb = notebook(("markdown", ["### Proof (Optional)\n", "a b\n"]), ("markdown", ["#### Step 1\n", "c\n"]),
                  ("code", ["q = 1\n"]), ("markdown", ["## Next\n", "d\n"]))
    assert size.main_path_size(nb) == size.Size(words=2, code_lines=0, optional_words=7, optional_code_lines=1)


def test_homework_is_counted_apart_and_its_cells_must_fit_a_screen():
    nb = notebook(("markdown", "## 1. Main\none"), ("code", "x = 1"),
                  ("markdown", "## 2. Your turn (homework)\ntwo three"), ("code", "\n".join(["y = 2"] * 31)),
                  ("markdown", "### 2.1 An aside (optional)\nfour"), ("code", "\n".join(["z = 3"] * 31)))
    assert size.main_path_size(nb) == size.Size(words=3, code_lines=1, optional_words=0, optional_code_lines=0,
                                                homework_words=11, homework_code_lines=62)
    assert size.crowded_cells(nb) == [(3, "31 code lines"), (5, "31 code lines")]  # an optional section inside homework is homework
    assert {i for i, kind, _, off in size.lines(nb) if kind == "code" and off} == {3, 5}  # off the main path


def test_comment_lines_in_code_are_not_headings():
    nb = notebook(("code", "# a comment (optional)\nx = 1"), ("markdown", "word"))
    assert size.main_path_size(nb) == size.Size(words=1, code_lines=2, optional_words=0, optional_code_lines=0)


@pytest.mark.parametrize("path", commands.lesson_paths([]), ids=lambda p: p.name)
def test_every_lessons_main_path_fits_a_sitting(path):
    measured = size.main_path_size(json.loads(path.read_text()))
    assert measured.words <= size.WORDS and measured.code_lines <= size.CODE_LINES, (
        f"{path.name}: {measured.words} words and {measured.code_lines} code lines on the main path "
        f"(budget {size.WORDS} and {size.CODE_LINES}); mark sections \"(optional)\" or split the lesson")
    assert measured.homework_words <= size.HOMEWORK_WORDS and measured.homework_code_lines <= size.HOMEWORK_CODE_LINES, (
        f"{path.name}: {measured.homework_words} words and {measured.homework_code_lines} code lines of homework "
        f"(budget {size.HOMEWORK_WORDS} and {size.HOMEWORK_CODE_LINES})")


@pytest.mark.parametrize("path", commands.lesson_paths([]), ids=lambda p: p.name)
def test_every_code_line_fits_88_characters(path):
    nb = json.loads(path.read_text())
    wide = [(i, line) for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code"
            for line in "".join(cell["source"]).splitlines() if len(line) > size.WIDTH]
    assert not wide, f"{path.name}: {len(wide)} code lines over {size.WIDTH} characters, first in cell {wide[0][0]}"


def test_a_crowded_cell_is_named_with_why_and_a_slider_cell_may_be_long():
    long_code = "\n".join(f"x{k} = {k}" for k in range(31))
    nb = {"cells": [
        {"cell_type": "code", "source": long_code, "outputs": []},                         # 31 lines: crowded
        {"cell_type": "code", "source": long_code + "\ninteract(f)", "outputs": []},       # a slider: allowed
        {"cell_type": "code", "source": "print(1)", "outputs": [{"output_type": "stream", "text": "a\n" * 11}]},
        {"cell_type": "code", "source": "print(1)", "outputs": [{"output_type": "stream", "text": ["a\n"] * 10}]},
        {"cell_type": "markdown", "source": "## Aside (optional)"},
        {"cell_type": "code", "source": long_code, "outputs": []}]}                        # off the main path
    assert size.crowded_cells(nb) == [(0, "31 code lines"), (2, "11 printed lines")]


@pytest.mark.parametrize("path", commands.lesson_paths([]), ids=lambda p: p.name)
def test_every_main_path_cell_fits_a_screen(path):
    crowded = size.crowded_cells(json.loads(path.read_text()))
    assert not crowded, (f"{path.name}: cells over {size.CELL_LINES} code lines or {size.PRINTED_LINES} printed "
                         f"lines (a table or a figure instead): {crowded}")


def names_bound_and_read(source: str) -> tuple[set[str], set[str]]:
    """The names a cell binds anywhere (assignments, loop, comprehension and `with` targets, arguments,
    imports, defs, classes), and every name it reads (magics and shell lines left out)."""
    import ast

    tree = ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    bound |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments)
              for a in [*n.posonlyargs, *n.args, *n.kwonlyargs, *filter(None, [n.vararg, n.kwarg])]}
    bound |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    bound |= {n.name for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.name}
    bound |= {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
              for a in n.names}
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return bound, read


def optional_cells(nb: dict) -> set[int]:
    """The code cells that lie in an optional section (a code cell has no heading: its lines share one flag)."""
    return {i for i, kind, _, optional in size.lines(nb) if kind == "code" and optional}


@pytest.mark.parametrize("path", commands.lesson_paths([]), ids=lambda p: p.name)
def test_the_main_path_never_reads_what_an_optional_section_defines(path):
    """A student may skip a section headed "(optional)": no later cell on the main path reads a name that
    only an optional cell binds (a name the main path binds before it is fine)."""
    nb = json.loads(path.read_text())
    main_bound, optional_only = set(), set()
    optional_code = optional_cells(nb)
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        optional = i in optional_code
        bound, read = names_bound_and_read("".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"])
        if optional:
            optional_only |= bound - main_bound
        else:
            leaked = (read - bound) & optional_only
            assert not leaked, f"{path.name}: the main path reads {sorted(leaked)}, defined only in an optional section"
            main_bound |= bound
            optional_only -= bound


def test_a_main_path_cell_reading_an_optional_name_is_caught(tmp_path):
    nb = notebook(("markdown", "## 1. Main"), ("code", "a = 1"), ("markdown", "## 2. Aside (optional)"),
                  ("code", "b = a + 1"), ("markdown", "## 3. Back"), ("code", "print(a)"))
    path = tmp_path / "ok.ipynb"
    path.write_text(json.dumps(nb))
    test_the_main_path_never_reads_what_an_optional_section_defines(path)
    nb["cells"][-1]["source"] = "print(a + b)"
    path.write_text(json.dumps(nb))
    with pytest.raises(AssertionError, match=r"reads \['b'\]"):
        test_the_main_path_never_reads_what_an_optional_section_defines(path)
