"""The static site (python -m minirl.course.site), checked in Chromium: built once into a temporary
folder and served from 127.0.0.1, every page loads nothing from anywhere else, typesets its math
with no TeX errors and no raw TeX left over, shows every plot, and has no broken link; one lesson
opened from disk (file://) typesets too; the index lists every lesson and prev/next chain them.

Each page is opened once (MathJax takes seconds per lesson on a small CPU) and what the checks
need is read from it then; the tests below look at those readings."""
import functools
import html
import http.server
import json
import re
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import unquote, urldefrag, urljoin, urlparse

import nbformat
import pytest
from browser import browser  # noqa: F401

from minirl.course import commands, site as course_site, written

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("site")]  # one worker builds and reads the site

LESSONS = course_site.lesson_paths()
PAGES = [course_site.page_name(lesson) for lesson in LESSONS]
GUIDES = [doc.stem + ".html" for doc in course_site.doc_paths()]

# Set before the page's own scripts run. MathJax 2 reads a `window.MathJax` object as its first
# configuration and calls AuthorInit before anything else. noErrors and noUndefined are turned off
# so that every bad formula is a parse error (with them, an unknown macro only turns red), and the
# parse errors are collected; `__mathjaxDone` is set once the startup typeset (and anything queued
# after it, like nbconvert's own Typeset call) has finished.
MATHJAX_PROBE = """
window.__texErrors = []; window.__mathjaxDone = false;
window.MathJax = {TeX: {noErrors: {disabled: true}, noUndefined: {disabled: true}}, AuthorInit: function () {
  MathJax.Hub.Register.MessageHook("TeX Jax - parse error", function (m) { window.__texErrors.push(m[1] + " in: " + m[2]); });
  MathJax.Hub.Register.MessageHook("Math Processing Error", function (m) { window.__texErrors.push("processing error: " + m[2]); });
  MathJax.Hub.Register.StartupHook("End", function () { MathJax.Hub.Queue(function () { window.__mathjaxDone = true; }); });
}};
"""
# MathJax finished, or never loaded at all (then `window.MathJax` is still the probe's plain object)
MATHJAX_SETTLED = "window.__mathjaxDone === true || !(window.MathJax && window.MathJax.Hub)"

READ_PAGE = r"""() => {
  const prose = [...document.querySelectorAll('.jp-MarkdownCell .jp-RenderedMarkdown')].map(cell => {
    const copy = cell.cloneNode(true);
    copy.querySelectorAll('code, pre, script, .MathJax, .MathJax_Display, .MathJax_Preview, .MJX_Assistive_MathML')
        .forEach(e => e.remove());
    return copy.textContent;
  });
  return {
    typeset: document.querySelectorAll('span.MathJax').length,
    texErrors: window.__texErrors.concat([...document.querySelectorAll('.merror')].map(e => 'merror: ' + e.textContent)),
    rawTex: prose.flatMap(t => [...t.matchAll(/\$[^$]*\$|\\[A-Za-z]+/g)].map(m => m[0].slice(0, 80))),
    outputImages: document.querySelectorAll('.jp-OutputArea-output img').length,
    images: [...document.images].map(i => ({src: i.src.slice(0, 60), loaded: i.complete && i.naturalWidth > 0})),
    fonts: [...document.fonts].map(f => ({family: f.family, status: f.status})),
    links: [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href')),
    ids: [...document.querySelectorAll('[id]')].map(e => e.id).concat([...document.querySelectorAll('a[name]')].map(a => a.name)),
    navs: [...document.querySelectorAll('nav.site-nav')].map(n => [...n.querySelectorAll('a')].map(a => [a.rel, a.getAttribute('href')])),
  };
}"""


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def report(request, line: str) -> None:
    """Print a line past pytest's output capture (the build and page times, even under -q)."""
    with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        print(f"\n{line}", flush=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory, request):
    """The site, built once into a temporary folder by minirl.course.site.build, and the student-safe one in
    its student/ folder; reports their build times."""
    out = tmp_path_factory.mktemp("site")
    seconds = course_site.build(out)
    student = course_site.build(out / "student", student=True)
    report(request, f"minirl.course.site.build: {len(PAGES) + len(GUIDES) + 1} pages in {seconds:.1f} s, the student site's in {student:.1f} s")
    return out


@pytest.fixture(scope="module")
def server(built):
    """The built site over HTTP on 127.0.0.1 (any free port); yields its base URL."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(built)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def start(chrome, url: str, base: str) -> tuple:
    """Load url in a fresh page of chrome, aborting (and recording) every request outside base."""
    page = chrome.new_page()
    blocked, failed = [], []

    def only_local(route):
        if route.request.url.startswith(base):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    page.route("**/*", only_local)
    # MathJax's font-load probe, the face MathJax_Blank, has src about:blank: no network request
    page.on("requestfailed", lambda r: r.url.startswith(base) and failed.append(f"{r.url}: {r.failure}"))
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.url}: HTTP {r.status}"))
    page.add_init_script(MATHJAX_PROBE)
    page.goto(url)
    return page, blocked, failed


def read(page, blocked: list, failed: list) -> dict:
    """Once MathJax has settled, what the checks need from the page; closes it."""
    page.wait_for_function(MATHJAX_SETTLED, timeout=60_000)
    reading = page.evaluate(READ_PAGE)
    page.close()
    return {**reading, "blocked": blocked, "failed": failed}


@pytest.fixture(scope="module")
def pages(browser, server, request):  # noqa: F811
    """Every page of the site over HTTP, read once. All are loaded before any is read, so their
    MathJax runs side by side (each page has a renderer process of its own)."""
    begin = time.time()
    opened = {name: start(browser, server + name, server) for name in [*PAGES, *GUIDES, "index.html"]}
    readings = {name: read(*page) for name, page in opened.items()}
    report(request, f"{len(readings)} pages loaded and typeset in Chromium in {time.time() - begin:.1f} s")
    return readings


@functools.cache
def notebook(lesson) -> nbformat.NotebookNode:
    return nbformat.read(lesson, as_version=4)


def dollars(lesson) -> int:
    return sum(cell.source.count("$") for cell in notebook(lesson).cells if cell.cell_type == "markdown")


def math_fonts_loaded(page: dict) -> bool:
    """At least one of MathJax's STIX-Web fonts loaded, and none failed."""
    statuses = [f["status"] for f in page["fonts"] if f["family"].startswith("STIXMathJax")]
    return "loaded" in statuses and "error" not in statuses


def image_outputs(lesson) -> int:
    return sum(any(k in o.get("data", {}) for k in ("image/png", "image/jpeg", "image/gif"))
               for cell in notebook(lesson).cells if cell.cell_type == "code" for o in cell.outputs)


@pytest.mark.parametrize("name", [*PAGES, *GUIDES, "index.html"])
def test_page_loads_nothing_from_elsewhere(pages, name):
    page = pages[name]
    assert page["blocked"] == [], f"{name} asked for non-local URLs (blocked):\n" + "\n".join(page["blocked"])
    assert page["failed"] == [], f"{name}: local requests failed:\n" + "\n".join(page["failed"])


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_math_is_typeset_without_tex_errors(pages, lesson):
    page = pages[course_site.page_name(lesson)]
    assert page["rawTex"] == [], f"{lesson.name}: raw TeX left in the prose: {page['rawTex'][:10]}"
    assert page["texErrors"] == [], f"{lesson.name}: TeX errors:\n" + "\n".join(page["texErrors"])
    assert page["typeset"] > 0 or not dollars(lesson), f"{lesson.name}: no math typeset"
    assert math_fonts_loaded(page) or not dollars(lesson), f"{lesson.name}: math fonts: {page['fonts']}"


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_every_plot_is_shown(pages, lesson):
    page = pages[course_site.page_name(lesson)]
    assert page["outputImages"] == image_outputs(lesson), f"{lesson.name}: an image output is missing from the page"
    assert all(image["loaded"] for image in page["images"]), f"{lesson.name}: images not loaded: {page['images']}"


def resolves(base: str, name: str, href: str, ids: list[str]) -> bool:
    """A link from page name resolves: `#id` to an element of the page, else a local 200 (with the id).
    An id matches a fragment as browsers match them: as written, else percent-decoded (nbconvert's
    heading ids are percent-encoded, `00-%C2%B7-Welcome`, and so are its links to them)."""
    target, anchor = urldefrag(urljoin(base + name, href))
    if target != base + name:
        try:
            with urllib.request.urlopen(target) as response:
                ids = re.findall(r'\bid="([^"]*)"', response.read().decode("utf-8", "replace"))
        except urllib.error.URLError:
            return False
    return not anchor or anchor in ids or unquote(anchor) in ids


@pytest.mark.parametrize("name", [*PAGES, *GUIDES, "index.html"])
def test_every_link_resolves(pages, server, name):
    page = pages[name]
    local = [href for href in page["links"] if urlparse(href).scheme in ("", "http", "https")
             and urljoin(server + name, href).startswith(server)]
    assert local, f"{name} has no links (not even the navigation)"
    broken = [href for href in local if not resolves(server, name, href, page["ids"])]
    assert broken == [], f"{name}: broken links {broken} (of {len(local)})"


def test_index_lists_every_lesson(pages):
    lesson_links = [href for href in pages["index.html"]["links"] if re.fullmatch(r"\d\d_[^/]+\.html", href)]
    assert sorted(set(lesson_links)) == PAGES, "the README's lesson table and lessons/ disagree"


def test_index_lists_every_guide(pages):
    assert sorted(h for h in pages["index.html"]["links"] if h in GUIDES) == sorted(GUIDES)
    assert all(pages[g]["navs"] == [[["index", "index.html"]]] * 2 for g in GUIDES)


def solution_blocks(lesson) -> list[str]:
    """The text inside each of the lesson's code solution blocks."""
    return [block for cell in notebook(lesson).cells
            for block in re.findall(rf"{re.escape(commands.BEGIN)}.*?\n(.*?){re.escape(commands.END)}", cell.source, re.S)]


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_the_student_site_shows_no_solution(built, lesson):
    """site/student/: every solution line of the solved lesson is gone, the stubs, the left-out
    hunt-the-bug answer and every figure are there, and the solved site does show the solutions."""
    name = course_site.page_name(lesson)
    pages = [(d / name).read_text(encoding="utf-8") for d in (built / "student", built)]
    assert pages[0].count("<img") == pages[1].count("<img")
    student, solved = (html.unescape(re.sub(r"<[^>]+>", "", page)) for page in pages)  # the text, highlighting gone
    blocks = solution_blocks(lesson)
    lines = {line.strip() for block in blocks for line in block.splitlines() if len(line.strip()) > 25}
    # a solution line may also stand elsewhere in the lesson (in a hunt-the-bug's buggy version):
    # the student page has each exactly as often as the solved page has it outside the solutions
    inside = {line: sum(block.count(line) for block in blocks) for line in lines}
    assert lines and all(solved.count(line) >= inside[line] >= 1 for line in lines)
    assert {line: student.count(line) for line in lines} == {line: solved.count(line) - inside[line] for line in lines}
    assert commands.STUB in student
    cells = notebook(lesson).cells
    hunt = any(commands.BEGIN_ANSWER in c.source and not written.written_task(c.source) for c in cells)
    homework = any(written.written_task(c.source) for c in cells if c.cell_type == "markdown")
    assert (commands.ANSWER_STUB.strip("*()") in student) == hunt
    assert (written.STUB.strip("*") in student) == homework


def test_prev_next_chain_through_the_lessons(pages):
    for i, name in enumerate(PAGES):
        navs = pages[name]["navs"]
        expected = ([["prev", PAGES[i - 1]]] if i > 0 else []) + [["index", "index.html"]] + \
                   ([["next", PAGES[i + 1]]] if i + 1 < len(PAGES) else [])
        assert navs == [expected, expected], f"{name}: top and bottom navigation should be {expected}"


def test_a_lesson_opened_from_disk_typesets(browser, built):  # noqa: F811
    lesson = max(LESSONS, key=dollars)
    base = built.as_uri() + "/"
    page = read(*start(browser, base + course_site.page_name(lesson), base))
    assert page["blocked"] == [] and page["failed"] == [], json.dumps(page["blocked"] + page["failed"])
    assert page["rawTex"] == [] and page["texErrors"] == [], f"raw TeX {page['rawTex'][:10]}, errors {page['texErrors']}"
    assert page["typeset"] > 0
    assert math_fonts_loaded(page), page["fonts"]


def test_links_to_lesson_notebooks_point_at_their_pages():
    html = ('<a href="03_reinforce.ipynb">x</a> <a href="lessons/04_baselines_critics.ipynb#GAE">y</a> '
            '<a href="./05_ppo.ipynb">z</a> <a href="notes.ipynb">kept</a> <code>href=&quot;06_grpo.ipynb&quot;</code>')
    assert course_site.link_lessons(html) == (
        '<a href="03_reinforce.html">x</a> <a href="04_baselines_critics.html#GAE">y</a> '
        '<a href="05_ppo.html">z</a> <a href="notes.ipynb">kept</a> <code>href=&quot;06_grpo.ipynb&quot;</code>')


def test_the_index_is_the_readme_table():
    readme = "# Title\n\nOpening.\n\nMore.\n\n## Lessons\n\n| # | lesson |\n|---|---|\n| 00 | [a](lessons/00_a.ipynb) |\n\nAfter.\n"
    assert course_site.index_markdown(readme) == (
        "# Title\n\nOpening.\n\n## Lessons\n\n| # | lesson |\n|---|---|\n| 00 | [a](lessons/00_a.ipynb) |\n")
    with pytest.raises(ValueError, match="## Lessons"):
        course_site.index_markdown("# Title\n\nOpening.\n")
