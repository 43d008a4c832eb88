"""What an instructor installs and hands out: lesson 00 checks what the lessons need and nothing
else; each `make` command installs what it needs and no more; `make grade` names a missing
submissions folder; a lesson copied out of the repository (an nbgrader release) finds its
recorded sweeps, or says in one line how to include them."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from minirl.course import commands
from minirl.course.sweeps import REPOSITORY_SWEEPS, load_sweep, sweep_path, sweep_rows

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def make(*args: str) -> subprocess.CompletedProcess:
    """Run make in the course folder, free of the flags of a make that runs these tests (`make test`
    passes -k, which would go on to install after a failed check)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    return subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), *args], capture_output=True, text=True, env=env)


# ---------------------------------------------------------------- lesson 00's environment check
def checked_packages(nb: nbformat.NotebookNode) -> list[str]:
    """The packages lesson 00's environment check imports: the list its loop runs over."""
    cell = next(c for c in nb.cells if c.cell_type == "code" and "importlib.import_module(package)" in c.source)
    return re.findall(r'"([\w-]+)"', re.search(r"for package in \[(.*?)\]", cell.source, re.S).group(1))


def base_dependencies() -> list[str]:
    """pyproject's dependencies, the lessons' own install (`make course`), by name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [re.match(r"[\w-]+", d).group(0) for d in project["dependencies"]]


def test_lesson_00_checks_what_the_lessons_install_and_nothing_else():
    """A student's install (`make course`) has the base dependencies only: a package the check
    imports beyond them prints FAIL for every student (it did for nbval), one it leaves out is unchecked."""
    nb = nbformat.read(ROOT / "lessons" / "00_welcome.ipynb", as_version=4)
    assert sorted(checked_packages(nb)) == sorted(base_dependencies())
    stored = "".join(o.get("text", "") for c in nb.cells if "importlib.import_module(package)" in c.source
                     for o in c.outputs)
    assert stored.split() == [w for p in checked_packages(nb) for w in ("OK", p)]
    planted = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        'for package in ["torch", "numpy", "matplotlib", "jupyterlab", "tiktoken", "ipywidgets",\n'
        '                "nbformat", "tqdm", "scipy", "nbval"]:\n    importlib.import_module(package)')])
    assert sorted(checked_packages(planted)) != sorted(base_dependencies())  # an instructor's tool, caught


# ---------------------------------------------------------------- what each make command installs
def installs(target: str, makefile: Path = ROOT / "Makefile", **variables: str) -> list[str]:
    """The extras `make <target>` would pip-install into a fresh venv (a dry run: nothing runs)."""
    result = make("-n", "-f", str(makefile), target, "VENV=/nonexistent/venv", *(f"{k}={v}" for k, v in variables.items()))
    assert result.returncode == 0, result.stderr
    return re.findall(r'pip install -q -c constraints\.txt -e "\.(?:\[(\w+)\])?"', result.stdout)


@needs_make
@pytest.mark.parametrize("target, extras", [("course", [""]), ("trl", ["trl"]), ("student", ["instructor"]),
                                            ("site", ["instructor"]), ("grade", ["instructor", "trl"]),
                                            ("unit", ["dev"]), ("lessons", ["dev"])])
def test_each_make_command_installs_what_it_needs_and_no_more(target, extras):
    """The students' and the instructor's commands never pull the tests' stack ([dev]: Playwright,
    pytest, verl's wheel); `make test`'s stages do (`make test` itself is not dry-run here: its
    recipe starts a make in the background even under -n)."""
    assert installs(target, SUBMISSIONS=str(ROOT)) == extras
    assert re.search(r"^test: install$", (ROOT / "Makefile").read_text(), re.M)


@needs_make
def test_the_install_check_catches_a_command_that_installs_the_test_stack(tmp_path):
    planted = tmp_path / "Makefile"
    planted.write_text((ROOT / "Makefile").read_text().replace("student: install-instructor", "student: install"))
    assert installs("student", planted) == ["dev"]


@needs_make
def test_make_course_opens_the_lesson_named():
    args = make("-n", "course", "solutions", "LESSON=04", "VENV=/nonexistent/venv").stdout
    assert args.count("minirl.course start") == 2 and args.count("--lesson 04") == 2


@needs_make
@pytest.mark.parametrize("folder, said", [(None, "make grade needs the folder of submitted notebooks"),
                                          ("no/such/folder", "make grade: there is no folder no/such/folder")])
def test_make_grade_names_a_missing_submissions_folder_before_installing(folder, said, tmp_path):
    result = make("grade", f"VENV={tmp_path / 'venv'}", *([f"SUBMISSIONS={folder}"] if folder else []))
    assert result.returncode != 0 and result.stdout.splitlines()[0].startswith(said)
    assert not (tmp_path / "venv").exists()  # stopped before creating the venv
    ok = make("-s", "check-submissions", f"SUBMISSIONS={tmp_path}")
    assert ok.returncode == 0 and ok.stdout == ""


# ---------------------------------------------------------------- recorded sweeps, wherever a lesson is
def test_a_sweep_is_found_beside_the_notebook_first_then_in_the_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert sweep_path("rlhf.py") == REPOSITORY_SWEEPS / "rlhf.py"  # a copy outside the repository
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "rlhf.py").write_text("")
    assert sweep_path("rlhf.py") == Path("sweeps") / "rlhf.py"  # one shipped beside it wins


def test_a_lesson_outside_the_repository_loads_a_sweep_and_reads_its_csvs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = load_sweep("rlhf")
    assert sweep.__name__ == "rlhf_sweep" and Path(sweep.__file__) == REPOSITORY_SWEEPS / "rlhf.py"
    assert sweep.read_rows("rlhf_tuning")  # its CSVs, read beside its own file
    rows = sweep_rows("stale.csv")
    assert rows and set(rows[0]) >= {"run", "seed", "lr", "pass1"}


def test_no_sweeps_anywhere_says_in_one_line_how_to_include_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as caught:
        sweep_path("rlhf.py", repository=tmp_path / "not-installed-from-a-clone")
    message = str(caught.value)
    assert "\n" not in message and "copy the course's lessons/sweeps/ folder beside this notebook" in message
    assert "source/<assignment>/" in message


SWEEP_BY_LITERAL_PATH = re.compile(r"""["']sweeps/|Path\(\s*["']sweeps["']\s*\)""")


@pytest.mark.parametrize("path", commands.lesson_paths([]), ids=lambda p: p.name)
def test_lessons_open_recorded_sweeps_through_sweep_path(path):
    """A literal `sweeps/...` opens only beside the notebook: a released copy without the folder
    failed (FileNotFoundError on sweeps/rlhf.py)."""
    code = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert not [s for s in code if SWEEP_BY_LITERAL_PATH.search(s)]


def test_the_literal_path_check_catches_the_old_way():
    for planted in ('spec_from_file_location("rlhf_sweep", "sweeps/rlhf.py")', 'open(Path("sweeps") / "stale.csv")',
                    'f"sweeps/{name}.py"'):
        assert SWEEP_BY_LITERAL_PATH.search(planted)
    assert not SWEEP_BY_LITERAL_PATH.search('load_sweep("rlhf"); sweep_rows("stale.csv")')


@pytest.mark.slow
def test_a_lesson_released_by_nbgrader_reads_its_sweep(tmp_path):
    """docs/instructors.md's release: the lesson and lessons/sweeps/ in source/<assignment>/, then
    nbgrader generate_assignment; the released lesson's first code cell (lesson 09's, which loads
    the recorded sweep) runs in the release folder, outside the repository."""
    source = tmp_path / "source" / "ps1"
    source.mkdir(parents=True)
    lesson = commands.LESSONS / "09_rlhf.ipynb"
    shutil.copy(lesson, source)
    shutil.copytree(commands.LESSONS / "sweeps", source / "sweeps", ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", "ps1", "--force",
                             f"--CourseDirectory.root={tmp_path}", f"--CourseDirectory.db_url=sqlite:///{tmp_path}/gradebook.db"],
                            capture_output=True, text=True, timeout=300,  # nbgrader runs alembic from PATH
                            env=dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"))
    assert result.returncode == 0, result.stdout + result.stderr
    release = tmp_path / "release" / "ps1"
    assert (release / "sweeps" / "rlhf.py").is_file()
    from nbclient import NotebookClient

    nb = nbformat.read(release / lesson.name, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert 'load_sweep("rlhf")' in first.source
    nb.cells = [first]
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(release)}}).execute()
    printed = "".join(o.get("text", "") for o in first.outputs)
    assert "learning rates the sweep's tuning chose" in printed, first.outputs
