"""The documentation site builds with warnings as errors, and every code
block in it and in the README is run or checked, so an example that stops
working fails here.

Blocks are found with Sybil and judged by their language: ``python`` runs
(in one namespace per page, in page order, with docs/examples importable);
``bash`` and ``console`` commands are checked against what they name — every
pytest option against pytest's own and the plugin's option table, option
values through the plugin's parsers, ``pkg.module:attr`` references
imported, scripts and modules found and their flags read from their
``--help``, extras and tox environments looked up, cheap commands run; ``toml``
and ``ini`` files are parsed and loaded the way the plugin or tox reads them;
the ``yaml`` workflow's ``run`` steps are checked as commands; ``text`` blocks
(outputs) may name only invariants and known bugs that exist. A block of any
other language, or one without a language, fails: add a way to check it.
"""

from __future__ import annotations

import configparser
import functools
import importlib
import importlib.util
import re
import shlex
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
EXAMPLES = DOCS / "examples"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
#: MyST directives the Sphinx build renders (and test_the_site_builds checks)
DIRECTIVES = {"toctree", "literalinclude", "fsdpcheck-options", "fsdpcheck-known-bugs", "fsdpcheck-invariants",
              "fsdpcheck-model-checks"}
#: commands cheap enough to run as written (no torch import, no install)
RUN_AS_WRITTEN = {("pytest_fsdpcheck.known",), ("pytest_fsdpcheck.known", "list"), ("pytest_fsdpcheck.known", "show")}
BUG_ID = re.compile(r"\b(?:trv|ann|spl|exo|fs2)(?:-[a-z0-9]+){2,}\b")
INVARIANT_ID = re.compile(r"\b(?:TRV|ANN|SPL|EXO|FS2|PLN)-\d+\b")


def _missing(*modules: str) -> str | None:
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    return f"{', '.join(absent)} not installed (pip install -e '.[docs]')" if absent else None


# ---------------------------------------------------------------- the build

@pytest.mark.skipif(_missing("sphinx", "myst_parser") is not None, reason=str(_missing("sphinx", "myst_parser")))
def test_the_site_builds_without_warnings(tmp_path):
    """As CI builds it (tox -e docs): any warning — a broken link, a page in
    no toctree, an invariant DESIGN.md does not state — fails."""
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(tmp_path / "html")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    html = {p.stem: unescape(re.sub(r"<[^>]+>", "", p.read_text(encoding="utf-8"))) for p in (tmp_path / "html").glob("*.html")}
    # the generated pages hold what they are generated from
    from pytest_fsdpcheck.core.catalog import INVARIANTS
    from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS
    from pytest_fsdpcheck.plugin.options import OPTIONS

    assert all(o.flag in html["options"] for o in OPTIONS)
    # a flag in an option's help is code, so it can be copied: smart quotes
    # made "--html=PATH" an en dash (issue 42 item 8)
    assert "--html=PATH" in html["options"] and "\u2013html" not in html["options"]
    # the known-bugs table's reproducer column stays on the page (issue 42 item 8)
    page = (tmp_path / "html" / "known-bugs.html").read_text(encoding="utf-8")
    css = (tmp_path / "html" / "_static" / "fsdpcheck.css").read_text(encoding="utf-8")
    assert "_static/fsdpcheck.css" in page and "overflow-x: auto" in css and "white-space: normal" in css
    assert all(f"python -m pytest_fsdpcheck.known show {b.id}" in html["known-bugs"] for b in TORCH_BUGS)
    # each upstream citation as a link to its GitHub page; the uncited listed as not reported upstream
    from pytest_fsdpcheck.core.bugs import upstream_url

    known_page = (tmp_path / "html" / "known-bugs.html").read_text(encoding="utf-8")
    assert all(f'href="{upstream_url(ref)}"' in known_page for b in TORCH_BUGS for ref in b.upstream)
    unreported = html["known-bugs"][html["known-bugs"].index("Not reported upstream:"):].split("\n\n")[0]
    assert all((b.id in unreported) != bool(b.upstream) for b in TORCH_BUGS), unreported
    assert all(re.search(rf"^{i}$", html["catalog"], re.M) for i in INVARIANTS)
    from pytest_fsdpcheck.cases.checks import CHECKS

    assert all(re.search(rf"^{name}$", html["models"], re.M) for name in CHECKS)


@pytest.mark.skipif(_missing("sphinx", "myst_parser") is not None, reason=str(_missing("sphinx", "myst_parser")))
def test_the_catalog_page_fails_the_build_when_it_drifts_from_design(tmp_path):
    """A copy of the site beside a DESIGN.md that no longer states TRV-3 and
    a catalog page that no longer shows the PLN family: both are warnings."""
    import shutil

    shutil.copytree(DOCS, tmp_path / "docs", ignore=shutil.ignore_patterns("_build", "__pycache__"))
    design = (REPO / "DESIGN.md").read_text(encoding="utf-8")
    (tmp_path / "DESIGN.md").write_text(re.sub(r"(?m)^- TRV-3 .*\n", "", design), encoding="utf-8")
    catalog = tmp_path / "docs" / "catalog.md"
    catalog.write_text(catalog.read_text(encoding="utf-8").replace("{fsdpcheck-invariants} PLN", "text"), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(tmp_path / "docs"), str(tmp_path / "html")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert done.returncode != 0
    assert "DESIGN.md does not state TRV-3" in done.stderr, done.stderr
    assert "the invariant catalog page shows no family PLN" in done.stderr, done.stderr


# ------------------------------------------------------ what blocks may name

@functools.cache
def _pytest_flags() -> frozenset[str]:
    """Every option pytest accepts here, its plugins' included."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True, text=True, cwd=REPO, timeout=120)
    return frozenset(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", done.stdout))


@functools.cache
def _help(*command: str) -> str:
    done = subprocess.run([sys.executable, *command, "--help"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, f"{' '.join(command)} --help: {done.stderr[-2000:]}"
    return done.stdout


@functools.cache
def _torchrun_flags() -> frozenset[str]:
    """torchrun's own parser, in this process (torch is imported here anyway)."""
    from torch.distributed.run import get_args_parser

    return frozenset(flag for action in get_args_parser()._actions for flag in action.option_strings)


def _fsdpcheck_options() -> dict:
    from pytest_fsdpcheck.plugin.options import OPTIONS

    return {o.flag: o for o in OPTIONS}


def _check_ref(ref: str) -> None:
    """An implementation or model as a user names it resolves."""
    if ref in ("torch", "reference"):
        return
    module, sep, attr = ref.partition(":")
    assert sep and attr, f"{ref!r}: expected package.module:attr"
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)


def _check_option_value(option, value: str) -> None:
    from pytest_fsdpcheck.plugin import options

    choices = dict(option.kwargs).get("choices")
    if choices:
        assert value in choices, f"{option.flag} {value}: not one of {choices}"
    parse = {"--fsdpcheck-impl": _check_ref, "--fsdpcheck-model": _check_ref,
             "--fsdpcheck-seed": options._seed, "--fsdpcheck-timeout": options._timeout,
             "--fsdpcheck-world-size": options._world_size, "--fsdpcheck-fuzz-time": options._duration,
             "--fsdpcheck-shard": options._shard}.get(option.flag)
    if parse is not None:
        parse(value)


def _check_pytest_args(args: list[str], enabled_by_caller: bool = False) -> None:
    known = _fsdpcheck_options()
    flags = _pytest_flags()
    i = 0
    while i < len(args):
        word = args[i]
        if word.startswith("-"):
            flag, eq, value = word.partition("=")
            assert flag in flags or flag in known, f"pytest has no option {flag}"
            option = known.get(flag)
            takes_value = option is not None and dict(option.kwargs).get("action") != "store_true"
            if option is not None and takes_value:
                if not eq:
                    i += 1
                    value = args[i]
                _check_option_value(option, value)
            elif option is None and not eq and i + 1 < len(args) and not args[i + 1].startswith("-"):
                i += 1  # pytest's own option and its value (-n 2, -k EXPR)
        else:
            path = word.split("::")[0]
            assert (REPO / path).exists() or (REPO / "conformance" / path).exists(), f"no test path {word!r}"
        i += 1
    if any(a.startswith("--fsdpcheck-") for a in args) and not enabled_by_caller:
        assert "--fsdpcheck" in args, f"fsdpcheck options without --fsdpcheck do nothing: {args}"


def _names_flag(help_text: str, flag: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text) is not None


def _check_script_args(command: tuple[str, ...], args: list[str]) -> None:
    """A script's or module's flags are ones its --help names."""
    text = _help(*command)
    for word in args:
        if word.startswith("--"):
            assert _names_flag(text, word.split("=")[0]), f"{' '.join(command)} has no option {word}"
    for flag, value in zip(args, args[1:], strict=False):
        if flag == "--model":
            _check_ref(value)


def _check_pip(args: list[str]) -> None:
    from packaging.requirements import Requirement

    assert args[:1] == ["install"], args
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    words = iter(args[1:])
    for word in words:
        if word == "-e":
            target = next(words)
            path, _, wanted = target.partition("[")
            assert path == ".", target
            unknown = set(filter(None, wanted.rstrip("]").split(","))) - set(extras)
            assert not unknown, f"pyproject.toml has no extra {unknown}"
        elif re.fullmatch(r"(\S*/)?pytest_fsdpcheck-[^/]+\.whl", word):
            pass  # the wheel a job built (docs/ci.md)
        elif not word.startswith("-") and word != ".":
            requirement = Requirement(word)
            # this project publishes to no index: a bare name installs nothing of it
            assert requirement.name != "pytest-fsdpcheck" or requirement.url, (
                f"{word}: pytest-fsdpcheck is on no index; install it from its git repository "
                "(pytest-fsdpcheck @ git+https://...) or a wheel (docs/ci.md)")
            unknown = requirement.extras - set(extras) if requirement.name == "pytest-fsdpcheck" else set()
            assert not unknown, f"pyproject.toml has no extra {unknown}"
            if requirement.name == "torch":
                assert str(requirement.specifier).startswith("=="), f"torch must be installed pinned: {word}"


def _check_command(words: list[str]) -> None:
    """One shell command of a page, as a user types it."""
    if not words:
        return
    head, args = words[0], words[1:]
    if head in (".", "source"):
        assert args == [".venv/bin/activate"], words
    elif head == "pip":
        _check_pip(args)
    elif head == "pytest":
        _check_pytest_args(args)
    elif head == "srun":
        _check_command(args)
    elif head == "hypothesis":
        assert args[:2] == ["fuzz", "--"], words
        _check_pytest_args(args[2:])
    elif head == "tox":
        envs = configparser.ConfigParser(interpolation=None)
        envs.read(REPO / "tox.ini")
        assert args[0] == "-e", words
        for env in args[1].split(","):
            listed = [e.strip() for e in envs["tox"]["env_list"].split(",")]
            assert env in listed or f"testenv:{env}" in envs, f"tox.ini has no environment {env}"
    elif head == "twine":
        assert args[:2] == ["check", "--strict"], words
    elif head == "torchrun":
        at = args.index("-m")
        for word in args[:at]:
            if word.startswith("--"):
                assert word in _torchrun_flags(), f"torchrun has no option {word}"
        assert args[at + 1] == "pytest_fsdpcheck.distributed", words
        _check_pytest_args(args[at + 2:], enabled_by_caller=True)
    elif head == "python" and args[:2] == ["-m", "venv"]:
        pass
    elif head == "python" and args[:2] == ["-m", "pip"]:
        _check_pip(args[2:])
    elif head == "python" and args[:1] == ["-m"]:
        module, rest = args[1], args[2:]
        assert importlib.util.find_spec(module) is not None, f"no module {module}"
        sub = tuple(rest[:1]) if rest and not rest[0].startswith("-") and module == "pytest_fsdpcheck.known" else ()
        if (module, *sub) in RUN_AS_WRITTEN:
            done = subprocess.run([sys.executable, "-m", module, *rest], capture_output=True, text=True, cwd=REPO, timeout=120)
            assert done.returncode == 0, f"{' '.join(words)}: exit {done.returncode}\n{done.stderr[-2000:]}"
        else:
            _check_script_args(("-m", module, *sub), rest[len(sub):])
    elif head == "bash" and args[:1] == ["benchmarks/gpu/check.sh"]:
        # the device check: its flags are the ones its header documents
        text = (REPO / args[0]).read_text(encoding="utf-8")
        for flag in args[1:]:
            assert f'"{flag}"' in text, f"{args[0]} takes no {flag}"
    elif head == "python":
        script = REPO / args[0]
        assert script.is_file(), f"no script {args[0]}"
        _check_script_args((args[0],), args[1:])
    else:
        raise AssertionError(f"no check for the command {head!r}: add one to tests/test_docs.py")


def _commands(text: str):
    """The page's commands: continuation lines joined, comments dropped,
    `&&` chains split; a variable set from a command substitution is shell
    plumbing, not a command of ours."""
    for line in text.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
        if words and re.fullmatch(r"\w+=.*", words[0]):
            continue
        # punctuation_chars splits off what the shell would read unquoted
        redirects = [w for w in words if set(w) <= set("<>|()&;") and w not in ("&&", "||", ";")]
        assert not redirects, f"{line!r}: the shell reads {redirects} as redirections or pipes: quote them"
        chain: list[str] = []
        for word in [*words, "&&"]:
            if word in ("&&", "||", ";"):
                yield chain
                chain = []
            else:
                chain.append(word)


# -------------------------------------------------------- block by language

def _bash(source: str, namespace: dict) -> None:
    for words in _commands(source):
        _check_command(words)


def _console(source: str, namespace: dict) -> None:
    _bash("\n".join(line[2:] for line in source.splitlines() if line.startswith("$ ")), namespace)


class _FakeNoxSession:
    def __init__(self):
        self.posargs, self.installed = [], []

    def install(self, *args):
        self.installed.append(args)

    def run(self, *args):
        assert self.installed, "the session runs before installing anything"
        _check_pip(["install", *self.installed[0]])  # torch first, pinned
        for step in self.installed[1:]:
            _check_pip(["install", *step])
        _check_command(list(args))


def _python(source: str, namespace: dict) -> None:
    code = compile(source, namespace["__file__"], "exec")
    if "import nox" not in source:
        exec(code, namespace)
        return
    # a noxfile: run it with a stand-in nox, then each session on a recording session
    sessions = []
    nox = type(sys)("nox")
    nox.session = lambda fn: sessions.append(fn) or fn
    nox.parametrize = lambda name, values: lambda fn: setattr(fn, "parameters", (name, values)) or fn
    saved = sys.modules.get("nox")
    sys.modules["nox"] = nox
    try:
        exec(code, namespace)
    finally:
        if saved is None:
            sys.modules.pop("nox")
        else:
            sys.modules["nox"] = saved
    assert sessions, "the noxfile declares no session"
    for session in sessions:
        name, values = getattr(session, "parameters", (None, [None]))
        for value in values:
            session(_FakeNoxSession(), **({name: value} if name else {}))


def _toml(source: str, namespace: dict) -> None:
    data = tomllib.loads(source)
    if "divergence" in data:
        from pytest_fsdpcheck.known import divergences

        path = Path(namespace["__tmp__"]) / "divergences.toml"
        path.write_text(source, encoding="utf-8")
        for entry in divergences.load(path):
            if not entry.is_invariant:
                file = entry.match.split("::")[0]
                assert (REPO / "conformance" / file).is_file(), f"no suite file {file}"
    for group, entries in data.get("project", {}).get("entry-points", {}).items():
        assert group in ("pytest_fsdpcheck.implementations", "pytest_fsdpcheck.models"), group
        for ref in entries.values():
            _check_ref(ref)
    assert "divergence" in data or "project" in data, "a TOML block with nothing checked"


def _ini(source: str, namespace: dict) -> None:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(source)
    if parser.has_section("pytest"):
        ini_keys = {o.dest: o.ini_type for o in _fsdpcheck_options().values() if o.ini_type}
        for key in parser["pytest"]:
            assert key in ini_keys, f"the plugin has no ini key {key}"
    elif parser.has_section("testenv"):
        commands = parser["testenv"]["commands"]
        _bash(re.sub(r"\{[^}]*\}", "x", commands.replace("{posargs}", "")), namespace)
        for dep in parser["testenv"]["deps"].split("\n"):
            if dep.strip():
                # a factor prefix ("torch23: ") is tox's; a URL's colon is the requirement's
                _check_pip(["install", re.sub(r"^[\w,-]+:\s*", "", dep.strip())])
    else:
        raise AssertionError("an ini block that is neither a pytest nor a tox file")


def _yaml(source: str, namespace: dict) -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow block")
    workflow = yaml.safe_load(source)
    for job in workflow["jobs"].values():
        matrix = job.get("strategy", {}).get("matrix", {})
        first = {k: v[0] for k, v in matrix.items() if isinstance(v, list) and k != "include"}
        for extra in matrix.get("include", []):
            if all(first.get(k) == v for k, v in extra.items() if k in first):
                first.update(extra)
        def value(match, first=first):
            return str(first.get(match[1], ""))

        for step in job["steps"]:
            if "run" in step:
                _bash(re.sub(r"\$\{\{ *matrix\.(\w+) *\}\}", value, step["run"]), namespace)


def _text(source: str, namespace: dict) -> None:
    """An output: it may name only invariants and known bugs that exist."""
    from pytest_fsdpcheck.core.catalog import INVARIANTS
    from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS

    bugs = {b.id for b in TORCH_BUGS}
    assert not set(INVARIANT_ID.findall(source)) - set(INVARIANTS), "names invariants the catalog lacks"
    assert not set(BUG_ID.findall(source)) - bugs, "names known bugs torch_bugs.py lacks"


def _directive(name: str, argument: str) -> None:
    assert name in DIRECTIVES, f"unknown directive {{{name}}}"
    if name == "literalinclude":
        # the file itself is imported where a command names it (mypkg.models:make)
        assert (DOCS / argument).is_file(), f"literalinclude of a missing file {argument}"


LANGUAGES = {"python": _python, "bash": _bash, "console": _console, "toml": _toml, "ini": _ini,
             "yaml": _yaml, "text": _text}


# ------------------------------------------------------------------ the pages

def _fences(text: str) -> list[tuple[int, str]]:
    """(line, info string) of every fenced block, found without Sybil."""
    found, open_fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        match = re.match(r"^(`{3,}|~{3,})(.*)$", line)
        if match and open_fence is None:
            open_fence = match[1]
            found.append((number, match[2].strip()))
        elif match and line.strip() == open_fence:
            open_fence = None
    return found


@pytest.fixture
def example_package():
    """docs/examples importable as a user's own package, and no other
    `mypkg` (tests write their own) seen before or left after."""
    def ours():
        return {name: mod for name, mod in sys.modules.items() if name == "mypkg" or name.startswith("mypkg.")}

    before = ours()
    for name in before:
        del sys.modules[name]
    sys.path.insert(0, str(EXAMPLES))
    yield
    sys.path.remove(str(EXAMPLES))
    for name in ours():
        del sys.modules[name]
    sys.modules.update(before)


def _run_page(page: Path, tmp_path: Path) -> None:
    """Every block of one page, in page order, in one namespace."""
    from sybil import Document
    from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

    lexer = FencedCodeBlockLexer(language=r".+", mapping={"language": "language", "source": "source"})

    def parser(document):
        for region in lexer(document):
            language = region.lexemes["language"].strip()
            directive = re.fullmatch(r"\{([\w-]+)\} *(.*)", language)
            if directive:
                region.evaluator = lambda example, d=directive: _directive(d[1], d[2])
            else:
                assert language in LANGUAGES, f"{page.name}: a {language!r} block: no check for it in tests/test_docs.py"
                region.evaluator = lambda example, run=LANGUAGES[language]: run(str(example.parsed), example.namespace)
            region.parsed = region.lexemes["source"]
            yield region

    document = Document.parse(str(page), parser)
    document.namespace.update(__file__=str(page), __name__="__docs__", __tmp__=str(tmp_path))
    examples = list(document)
    fences = _fences(page.read_text(encoding="utf-8"))
    untagged = [line for line, info in fences if not info]
    assert not untagged, f"{page.name}: code blocks without a language at lines {untagged}"
    assert len(examples) == len(fences), f"{page.name}: Sybil found {len(examples)} of {len(fences)} blocks"
    for example in examples:
        try:
            example.evaluate()
        except pytest.skip.Exception:
            raise
        except Exception as exc:
            raise AssertionError(f"{page.name}, the block at line {example.line}: {type(exc).__name__}: {exc}") from exc


needs_sybil = pytest.mark.skipif(_missing("sybil") is not None, reason=str(_missing("sybil")))


@needs_sybil
@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_every_code_block_runs_or_is_checked(page, example_package, tmp_path):
    _run_page(page, tmp_path)


BROKEN = {  # case: (language, block, what the failure says)
    "a python block that raises": ("python", "from pytest_fsdpcheck.known import KnownBug\n"
                                   "KnownBug(id='x', invariants=('TRV-99',), reason='r', reference={'traversal': {}})",
                                   "line 3: ValueError: known bug 'x': unknown or missing invariants"),
    "an option the plugin lacks": ("bash", "pytest --fsdpcheck --fsdpcheck-implementation torch",
                                   "pytest has no option --fsdpcheck-implementation"),
    "an option value it refuses": ("bash", "pytest --fsdpcheck --fsdpcheck-shard 5/4", "--fsdpcheck-shard must be I/M"),
    "a model that does not import": ("bash", "pytest --fsdpcheck --fsdpcheck-model mypkg.models:make_everything",
                                     "has no attribute 'make_everything'"),
    "an option without --fsdpcheck": ("bash", "pytest --fsdpcheck-strict tests", "without --fsdpcheck do nothing"),
    "a test path that does not exist": ("bash", "pytest --fsdpcheck test_travesal.py", "no test path"),
    "a script flag": ("bash", "python benchmarks/run.py --fast", "benchmarks/run.py has no option --fast"),
    "a module flag": ("bash", "python -m pytest_fsdpcheck.commands.history --keep 2.13.0", "has no option --keep"),
    "a known-bug command that fails": ("console", "$ python -m pytest_fsdpcheck.known show spl-no-such-bug", "exit 2"),
    "an extra pyproject.toml lacks": ("bash", 'pip install -e ".[test,gpu]"', "pyproject.toml has no extra"),
    "torch unpinned": ("bash", "pip install torch", "torch must be installed pinned"),
    "the package from an index": ("bash", "pip install pytest-fsdpcheck", "pytest-fsdpcheck is on no index"),
    "the package from an index, in tox": ("ini", "[testenv]\ndeps =\n    torch==2.13.0\n    pytest-fsdpcheck\n"
                                          "commands = pytest --fsdpcheck", "pytest-fsdpcheck is on no index"),
    "an unquoted version range": ("bash", "pip install torch==2.3.1 numpy<2", "redirections or pipes"),
    "a command nobody checks": ("bash", "make docs", "no check for the command 'make'"),
    "a torchrun flag": ("bash", "torchrun --nprocs 2 -m pytest_fsdpcheck.distributed", "torchrun has no option --nprocs"),
    "a tox environment tox.ini lacks": ("bash", "tox -e docs2", "tox.ini has no environment docs2"),
    "a known bug that does not exist": ("text", "[1] known bug trv-root-states-walk-everything [torch]",
                                        "names known bugs torch_bugs.py lacks"),
    "an ini key the plugin lacks": ("ini", "[pytest]\nfsdpcheck_profiles = dev", "no ini key fsdpcheck_profiles"),
    "a divergence of an unknown invariant": ("toml", '[[divergence]]\nmatch = "TRV-99"\nreason = "r"',
                                             "unknown invariant 'TRV-99'"),
    "a workflow step with a bad option": ("yaml", "jobs:\n  a:\n    steps:\n      - run: pytest --fsdpcheck -n 2 --fsdpcheck-stric",
                                          "no option --fsdpcheck-stric"),
    "a language nothing checks": ("rust", "fn main() {}", "a 'rust' block: no check for it"),
    "a noxfile running a bad option": ("python", "import nox\n@nox.session\ndef s(session):\n"
                                      "    session.install('torch==2.13.0')\n    session.run('pytest', '--fsdpcheck', '--fsdpcheck-x')",
                                      "no option --fsdpcheck-x"),
    "a missing literalinclude": ("{literalinclude} examples/mypkg/model.py", "", "missing file examples/mypkg/model.py"),
}


@needs_sybil
@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_block_fails(case, example_package, tmp_path):
    """Each way a page's example can stop working fails the page's test."""
    language, source, message = BROKEN[case]
    page = tmp_path / "page.md"
    page.write_text(f"# A page\n\n```{language}\n{source}\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match=re.escape(message)):
        _run_page(page, tmp_path)
    page.write_text("# A page\n\n```\npytest --fsdpcheck\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="without a language"):
        _run_page(page, tmp_path)


# ------------------------------------------------------------------ the README

@pytest.mark.unit
def test_the_readme_stays_a_first_page():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines: move material into docs/"


@pytest.mark.process
def test_ci_reads_both_quickstart_commands_from_the_readme():
    """.ci/run's own extraction, on the README as it is now: command 2 runs
    every tier of the project's tests but the end-to-end one, and CI runs
    that one after it, with command 2's words and four workers (its tests
    mostly wait on the processes they start)."""
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    extract = [line for line in lines if line.startswith(("quickstart=", "command2=", "e2e="))]
    assert len(extract) == 3, extract
    script = "set -eu\n" + "\n".join(extract) + "\nprintf '%s\\n--\\n%s' \"$quickstart\" \"$e2e\""
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=REPO, check=True).stdout
    quickstart, _, e2e = done.rpartition("\n--\n")
    first, _, second = quickstart.partition("# 2.")
    assert first.startswith("# 1.") and "pip install -e" in first and "pytest --fsdpcheck" in first, quickstart
    assert second.strip().splitlines()[-1] == 'pytest -n 2 tests -m "not e2e"', quickstart
    assert e2e == "pytest -n 4 tests -m e2e", e2e


@pytest.mark.unit
def test_every_verdict_the_matrix_prints_is_defined_in_the_readme():
    """Issue 42 item 8: a '-' cell appeared that the verdict table did not define."""
    from pytest_fsdpcheck.report.matrix import Matrix
    from pytest_fsdpcheck.report.verdict import SYMBOL

    table = (REPO / "README.md").read_text(encoding="utf-8").split("## What the verdicts mean", 1)[1].split("\n## ", 1)[0]
    defined = set(re.findall(r"^\| `([^`]+)` \|", table, re.M))
    printed = {text for outcome, text in SYMBOL.items() if outcome != "known"} | {"known [n]", Matrix().cell_text("X-1", "x")}
    assert printed <= defined, f"printed but not defined in README's verdict table: {sorted(printed - defined)}"
