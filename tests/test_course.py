"""Course tooling: student versions stub every solution; with outputs kept, they expect every checker's FAIL."""
import nbformat
import pytest

from minirl import course

SOURCE = '''def f(x):
    """doc"""
    ### BEGIN SOLUTION
    y = x + 1
    return y
    ### END SOLUTION

check(f)
'''


def test_strip_solutions_keeps_indentation_and_the_rest():
    out = course.strip_solutions(SOURCE)
    assert "y = x + 1" not in out and "BEGIN SOLUTION" not in out
    assert f"    {course.STUB}\n" in out
    assert out.startswith('def f(x):\n    """doc"""\n') and out.endswith("\ncheck(f)\n")


def test_unbalanced_markers_are_an_error():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("### BEGIN SOLUTION\nx = 1")])
    with pytest.raises(ValueError, match="unbalanced"):
        course.student_version(nb)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"{course.BEGIN_ANSWER} the bug")])
    with pytest.raises(ValueError, match="unbalanced"):
        course.student_version(nb)


def test_hunt_the_bug_answers_are_left_out_of_student_versions():
    text = f"Find the bug.\n\n{course.BEGIN_ANSWER}\n*Answer:* the view is transposed.\n{course.END_ANSWER}\n\nNext."
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])
    out = course.student_version(nb).cells[0].source
    assert "transposed" not in out and course.ANSWER_STUB in out
    assert out.startswith("Find the bug.") and out.endswith("Next.")


def test_every_lesson_has_solutions_to_strip():
    for path in course.lesson_paths([]):
        nb = nbformat.read(path, as_version=4)
        assert any(course.BEGIN in c.source for c in nb.cells if c.cell_type == "code"), path.name


@pytest.mark.parametrize("path", course.lesson_paths([]), ids=lambda p: p.name)
def test_student_versions_with_outputs_expect_every_checker_to_fail(path):
    """`make lessons-other-cpu` runs these copies under nbval: each must expect exactly one FAIL line
    per stubbed exercise, no PASS, and every other output as stored."""
    solved = nbformat.read(path, as_version=4)
    student = course.student_version(nbformat.read(path, as_version=4), with_outputs=True)
    stubs = text = ""
    for before, after in zip(solved.cells, student.cells):
        if after.cell_type != "code":
            continue
        if course.BEGIN in before.source:
            stubs += after.source
            text += "".join(o.get("text", "") for o in after.outputs)
        else:
            assert after.outputs == before.outputs
    assert text.count("not implemented yet") == stubs.count(course.STUB) >= 1
    assert "PASS" not in text and course.BEGIN not in stubs
    handed_out = course.student_version(nbformat.read(path, as_version=4))  # what `make student` writes
    assert not any(c.outputs for c in handed_out.cells if c.cell_type == "code")
