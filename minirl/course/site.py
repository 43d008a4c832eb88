"""The course as a static site: every stored lesson as an HTML page, the guides in docs/, an index.

    python -m minirl.course.site [--out site/]              # the solved lessons (instructors, readers)
    python -m minirl.course.site --student [--out site/]    # student-safe: solutions and hunt answers left out
    python -m minirl.course.site --leaderboard leaderboard.csv   # with the capstone's board (minirl.course.capstone)

Each lesson `lessons/NN_name.ipynb` becomes `NN_name.html` with its stored outputs (nothing is
re-executed; plots are inline PNGs), links to the previous and next lesson and to the index at
top and bottom, and its links to other lessons pointing at their pages. Each guide `docs/x.md`
becomes `x.html`. `index.html` is the README's title, opening paragraph and lesson table, read at
build time, and a list of the guides. The student-safe site shows each lesson as a student's copy
would look after a first run (`minirl.course.commands.student_version` with outputs: solutions stubbed,
hunt-the-bug answers left out, each checker's line the TODO of an unfinished exercise), with
every figure of the solved run. The folder needs no
network: copy it to any web server or open it from disk (file://).

nbconvert's lab template loads require.js, the widget manager, Mermaid and MathJax from CDNs;
the small template below drops the first three (no lesson needs them) and loads MathJax 2.7 from
`mathjax/` in the site, copied from the pip package `jupyter-server-mathjax`. A pip package
installs offline from the same index as everything else, under the constraints file, where a
CDN or a download script would not. That package ships only the STIX-Web fonts, so the template
points MathJax's HTML-CSS output at them (its default, the TeX fonts, would be missing).
"""
from __future__ import annotations

import argparse
import re
import shutil
import time
from functools import partial
from pathlib import Path
from typing import Callable

import jinja2
import nbformat
try:
    from nbconvert import HTMLExporter
except ImportError:
    raise ImportError("the site is rendered by nbconvert, one of an instructor's tools: make install-instructor "
                      "(or pip install -c constraints.txt -e '.[instructor]')") from None

__all__ = ["lesson_paths", "page_name", "lesson_title", "link_lessons", "index_markdown", "doc_paths", "leaderboard_page", "build"]

ROOT = Path(__file__).resolve().parents[2]
LESSONS, README, DOCS = ROOT / "lessons", ROOT / "README.md", ROOT / "docs"
MATHJAX_URL = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
LESSON_HREF = re.compile(r'href="(?:\./|\.\./)?(?:lessons/)?(\d\d_[^"/#]+)\.ipynb(#[^"]*)?"')
DOC_HREF = re.compile(r'href="(?:\./)?(?:docs/)?([a-z_-]+)\.md(#[^"]*)?"')
README_HREF = re.compile(r'href="(?:\.\./)?README\.md(#[^"]*)?"')

TEMPLATE = r"""{%- extends 'lab/index.html.j2' -%}
{% block html_head_js_requirejs %}{% endblock html_head_js_requirejs %}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{% block html_head_js_mermaidjs %}{% endblock html_head_js_mermaidjs %}
{% block html_head_js_mathjax %}
{{ super() }}
<script type="text/x-mathjax-config">
MathJax.Hub.Config({"HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null,
                                 linebreaks: {automatic: true}}});
</script>
{% endblock html_head_js_mathjax %}
{% block extra_css %}
<style type="text/css">
.site-nav { display: grid; grid-template-columns: 1fr auto 1fr; gap: 1.5em; max-width: 1200px;
            margin: 0.5em auto; padding: 0.5em 1em; font-family: var(--jp-content-font-family);
            font-size: var(--jp-content-font-size1); }
.site-nav a { text-decoration: none; }
.site-nav a[rel="prev"] { grid-column: 1; justify-self: start; }
.site-nav a[rel="index"] { grid-column: 2; }
.site-nav a[rel="next"] { grid-column: 3; justify-self: end; }
/* MathJax's hidden copy of each formula for screen readers (AssistiveMML) would otherwise ask for
   TeX fonts that jupyter-server-mathjax does not ship (through the NativeMML output's styles) */
.MJX_Assistive_MathML [mathvariant] { font-family: inherit; }
</style>
{% endblock extra_css %}
{% macro site_nav(links) -%}
{% if links %}<nav class="site-nav">
{%- for rel, href, text in links %}<a rel="{{ rel }}" href="{{ href }}">{{ text | escape_html }}</a>{% endfor -%}
</nav>{% endif %}
{%- endmacro %}
{% block body_header %}{{ super() }}{{ site_nav(resources.site_nav) }}{% endblock body_header %}
{% block body_footer %}{{ site_nav(resources.site_nav) }}{{ super() }}{% endblock body_footer %}
"""


def lesson_paths() -> list[Path]:
    return sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))


def page_name(lesson: Path) -> str:
    return lesson.stem + ".html"


def lesson_title(nb: nbformat.NotebookNode, lesson: Path) -> str:
    """The text of the lesson's first `# ` heading, else its file name."""
    for cell in nb.cells:
        match = re.search(r"^# (.+)$", cell.source, re.M) if cell.cell_type == "markdown" else None
        if match:
            return match.group(1).strip()
    return lesson.stem


def link_lessons(html: str) -> str:
    """Point every link to a lesson notebook (`NN_x.ipynb`, `lessons/NN_x.ipynb`), a guide
    (`docs/x.md`) or the README at its page."""
    html = LESSON_HREF.sub(lambda m: f'href="{m.group(1)}.html{m.group(2) or ""}"', html)
    html = DOC_HREF.sub(lambda m: f'href="{m.group(1)}.html{m.group(2) or ""}"', html)
    return README_HREF.sub('href="index.html"', html)


def site_exporter() -> HTMLExporter:
    """nbconvert's lab template with nothing loaded from a CDN and MathJax from the site's folder."""
    return HTMLExporter(template_name="lab", template_file="site.html.j2", mathjax_url=MATHJAX_URL,
                        extra_loaders=[jinja2.DictLoader({"site.html.j2": TEMPLATE})])


def render(exporter: HTMLExporter, nb: nbformat.NotebookNode, title: str, nav: list[tuple[str, str, str]]) -> str:
    html, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}, "site_nav": nav})
    return link_lessons(html)


def lesson_nav(titles: dict[Path, str], lesson: Path) -> list[tuple[str, str, str]]:
    """(rel, href, text) of the links to the previous lesson, the index and the next lesson."""
    order = list(titles)
    i = order.index(lesson)
    prev = [("prev", page_name(order[i - 1]), f"← {titles[order[i - 1]]}")] if i > 0 else []
    after = [("next", page_name(order[i + 1]), f"{titles[order[i + 1]]} →")] if i + 1 < len(order) else []
    return [*prev, ("index", "index.html", "all lessons"), *after]


def index_markdown(readme: str) -> str:
    """The README's title, opening paragraph and the table under `## Lessons`, as Markdown."""
    title, _, rest = readme.partition("\n")
    opening = rest.strip().split("\n\n")[0]
    _, found, lessons = rest.partition("\n## Lessons\n")
    table = re.search(r"^\|.*(?:\n\|.*)*", lessons, re.M)
    if not found or table is None:
        raise ValueError("README.md has no Markdown table under '## Lessons' to build the index from")
    return f"{title}\n\n{opening}\n\n## Lessons\n\n{table.group(0)}\n"


def doc_paths() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def doc_title(text: str, path: Path) -> str:
    return text.partition("\n")[0].removeprefix("# ").strip() if text.startswith("# ") else path.stem


def index_page(exporter: HTMLExporter, readme: str, student: bool = False, board: bool = False) -> str:
    """index.html: the README's lesson table (see index_markdown) and the guides (and the capstone's
    leaderboard with `board`), as a one-cell notebook's page."""
    guides = "\n".join(f"- [{doc_title(p.read_text(encoding='utf-8'), p)}]({p.stem}.html)" for p in doc_paths())
    guides += "\n- [Capstone leaderboard](leaderboard.html)" if board else ""
    which = ("These are the exercise versions: solutions and hunt-the-bug answers are left out; the figures are "
             "those of the solved run." if student else "")
    text = f"{index_markdown(readme)}\n{which}\n\n## Guides\n\n{guides}\n"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])
    return render(exporter, nb, readme.partition("\n")[0].removeprefix("# "), [])


def doc_page(exporter: HTMLExporter, path: Path) -> str:
    """A guide from docs/ as a one-cell notebook's page, linked back to the index."""
    text = path.read_text(encoding="utf-8")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])
    return render(exporter, nb, doc_title(text, path), [("index", "index.html", "all lessons")])


def leaderboard_page(path: Path) -> str:
    """The capstone's leaderboard (`minirl.course.capstone`) from its CSV, linked to the index and the capstone's page."""
    from minirl.course import capstone

    nav = '<p><a href="index.html">all lessons</a> &middot; <a href="capstone.html">the capstone</a></p>'
    return capstone.leaderboard_html(capstone.read_leaderboard(path), nav)


def write(out: Path, name: str, page: Callable[[], str]) -> None:
    """Render one page into out/name; print its size and how long it took."""
    start = time.time()
    html = page()
    (out / name).write_text(html, encoding="utf-8")
    print(f"{out / name}: {len(html.encode()) / 1e6:.1f} MB in {time.time() - start:.1f} s", flush=True)


def copy_mathjax(out: Path) -> None:
    """MathJax 2.7 (scripts, configs, STIX-Web fonts) from jupyter-server-mathjax into out/mathjax."""
    import jupyter_server_mathjax

    static = Path(jupyter_server_mathjax.__file__).parent / "static"
    shutil.copytree(static, out / "mathjax", dirs_exist_ok=True)


def build(out: Path, student: bool = False, leaderboard: Path | None = None) -> float:
    """Write every lesson's page (student-safe with `student`), the guides, the capstone's
    leaderboard from its CSV (`leaderboard`, if given), the index and MathJax into out; print a
    line per page; return seconds."""
    from minirl.course.commands import student_version

    start = time.time()
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.html"):  # pages of lessons or guides renamed or removed since the last build
        stale.unlink()
    copy_mathjax(out)
    notebooks = {lesson: nbformat.read(lesson, as_version=4) for lesson in lesson_paths()}
    if student:
        notebooks = {lesson: student_version(nb, with_outputs=True) for lesson, nb in notebooks.items()}
    titles = {lesson: lesson_title(nb, lesson) for lesson, nb in notebooks.items()}
    exporter = site_exporter()
    for lesson, nb in notebooks.items():
        write(out, page_name(lesson), partial(render, exporter, nb, titles[lesson], lesson_nav(titles, lesson)))
    for doc in doc_paths():
        write(out, doc.stem + ".html", partial(doc_page, exporter, doc))
    if leaderboard is not None:
        write(out, "leaderboard.html", partial(leaderboard_page, leaderboard))
    write(out, "index.html", partial(index_page, exporter, README.read_text(encoding="utf-8"), student, leaderboard is not None))
    seconds = time.time() - start
    print(f"built {len(notebooks) + len(doc_paths()) + 1 + (leaderboard is not None)} pages in {out} in {seconds:.1f} s")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m minirl.course.site",
                                     description="Build the course as a static site (no network needed to view it).")
    parser.add_argument("--out", help="folder to write (default: site/ beside lessons/, or site/student/ with --student)")
    parser.add_argument("--student", action="store_true", help="the student-safe site: no solutions, no hunt answers")
    parser.add_argument("--leaderboard", type=Path, help="a capstone leaderboard CSV to show as leaderboard.html")
    args = parser.parse_args()
    build(Path(args.out or ROOT / "site" / ("student" if args.student else "")), args.student, args.leaderboard)


if __name__ == "__main__":
    main()
