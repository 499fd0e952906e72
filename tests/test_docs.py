"""The documentation: the README as a front page, and a MkDocs site that builds with --strict and matches the code.

The site is built once (`mkdocs build --strict` into a temporary folder). The reference pages are generated at
build time from the code (docs/hooks/reference.py); these tests check the built pages against the code itself,
walked here independently of the generator: every CLI command and option, every jobs-file field, every function
the design page links to. Example command lines in the docs must parse against the real CLI, and the example
jobs file must load with the real loader.
"""

from __future__ import annotations

import html
import importlib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
SETUP_COMMANDS = ("make demo", "make test")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    # Not `-q`: mkdocs 1.6 then stops counting warnings, and --strict passes whatever they say.
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    assert "WARNING" not in proc.stderr, proc.stderr
    return out


def _page(site: Path, page: str) -> str:
    return (site / page / "index.html").read_text()


def _text(page_html: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page_html))


# ------------------------------------------------------------------------------------------------ README
def test_readme_is_a_front_page_under_20_kb_with_the_two_setup_commands() -> None:
    size = README.stat().st_size
    assert size < 20_000, f"README.md is {size} bytes; the details belong in docs/"
    lines = [line.strip() for line in README.read_text().splitlines()]
    for command in SETUP_COMMANDS:
        assert any(line.startswith(command + " ") or line == command for line in lines), \
            f"README.md lost the set-up command `{command}`"


def test_readme_links_resolve() -> None:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text()):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


# ------------------------------------------------------------------------------------------------ the CLI
def _walk(cmd: Any, path: list[str], parent: Any = None) -> Iterator[tuple[list[str], Any, Any]]:
    ctx = cmd.context_class(cmd, info_name=path[-1], parent=parent)
    yield path, cmd, ctx
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not getattr(sub, "hidden", False):
                yield from _walk(sub, [*path, name], ctx)


def _cli() -> Any:
    import typer

    from daedalus.cli.main import app

    return typer.main.get_command(app)


@pytest.mark.slow  # builds the site: about 10-20 s on 2 cores
def test_cli_reference_has_every_command_and_option(site: Path) -> None:
    page = _page(site, "reference/cli")
    text = _text(page)
    commands = list(_walk(_cli(), ["daedalus"]))
    assert len(commands) > 10
    for path, cmd, _ctx in commands[1:]:
        name = " ".join(path)
        assert f'id="{"-".join(path)}"' in page, f"`{name}` has no section in the CLI reference"
        if hasattr(cmd, "list_commands"):
            continue
        for param in cmd.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--") and opt != "--help":
                    assert opt in text, f"`{name} {opt}` is missing from the CLI reference"


# ------------------------------------------------------------------------------------------------ jobs file
@pytest.mark.slow  # builds the site: about 10-20 s on 2 cores
def test_jobs_file_reference_has_every_field(site: Path) -> None:
    from pydantic import BaseModel

    from daedalus.connectors.jobs import JobSpec

    page = _page(site, "reference/jobs-file")
    assert JobSpec.model_fields, "JobSpec has no fields?"
    models, seen = [JobSpec], set()
    while models:
        model = models.pop()
        if model in seen:
            continue
        seen.add(model)
        assert f'id="{model.__name__.lower()}"' in page, f"{model.__name__} has no section in the jobs-file reference"
        for name, field in model.model_fields.items():
            assert f"<code>{name}</code>" in page, f"{model.__name__}.{name} is missing from the jobs-file reference"
            for arg in _leaf_types(field.annotation):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    models.append(arg)


def _leaf_types(annotation: Any) -> Iterator[Any]:
    import typing

    args = typing.get_args(annotation)
    if not args:
        yield annotation
    for arg in args:
        yield from _leaf_types(arg)


def test_example_jobs_file_loads() -> None:
    from daedalus.connectors.jobs import load_jobs

    jobs = load_jobs(DOCS / "examples" / "jobs.yaml")
    assert {j.engine for j in jobs.jobs} >= {"flink", "sim"}


# ------------------------------------------------------------------------------------------------ design page
_API_LINK = re.compile(r"\]\(reference/(\w+)\.md#(daedalus\.[\w.]+)\)")


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for i in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)  # AttributeError: the linked name does not exist
        return obj
    raise ModuleNotFoundError(dotted)


@pytest.mark.slow  # builds the site: about 10-20 s on 2 cores
def test_design_links_point_at_code_that_exists(site: Path) -> None:
    links = _API_LINK.findall((DOCS / "design.md").read_text())
    assert len(links) >= 30, "the design page should link each formula to its function"
    rooms = {"models": "daedalus.models", "flows": "daedalus.flows"}
    pages = {page: _page(site, f"reference/{page}") for page in {p for p, _ in links}}
    for page, target in links:
        assert target.startswith(rooms[page] + "."), f"{target} linked on reference/{page}.md"
        try:
            _resolve(target)
        except (ImportError, AttributeError) as exc:
            pytest.fail(f"design.md links to {target}, which does not exist in the code ({exc})")
        assert f'id="{target}"' in pages[page], f"design.md links to {target}: no such entry on reference/{page}"
    targets = [t for _, t in links]
    for name in ("capacity.model", "forecast.forecaster", "recovery.prediction", "recovery.anomaly", "planning.planner",
                 "policies.hpa", "policies.ds2", "policies.flink_autoscaler",
                 "planning.oracle"):
        assert any(t.startswith(f"daedalus.models.{name}") for t in targets), f"design.md links nothing in {name}"


# ------------------------------------------------------------------------------------------------ examples
def _doc_command_lines() -> Iterator[tuple[str, int, str]]:
    """(file, line number, command) for every `daedalus …` line inside a fenced code block, and every inline
    `daedalus … --option …` in the prose."""
    for path in [README, *sorted(DOCS.glob("*.md"))]:
        where, text = path.relative_to(ROOT).as_posix(), path.read_text()
        fenced = False
        for number, line in enumerate(text.splitlines(), start=1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if fenced and line.strip().startswith("daedalus "):
                yield where, number, line.strip()
        for m in re.finditer(r"`(daedalus [^`]*)`", text):
            span = " ".join(m.group(1).split())
            if " --" in span and "--help" not in span:
                yield where, text.count("\n", 0, m.start()) + 1, span


_WRONG = ("NoSuchOption", "BadOptionUsage", "MissingParameter")


def test_command_lines_in_the_docs_parse_against_the_cli() -> None:
    lines = list(_doc_command_lines())
    assert len(lines) > 10
    for where, number, line in lines:
        args = shlex.split(line, comments=True)[1:]
        cmd = _cli()
        ctx = cmd.context_class(cmd, info_name="daedalus")
        while hasattr(cmd, "list_commands"):
            assert args, f"{where}:{number}: `{line}` names no command"
            sub = cmd.get_command(ctx, args[0])
            assert sub is not None, f"{where}:{number}: `{line}`: no command {args[0]!r}"
            name = args.pop(0)
            cmd = sub
            ctx = cmd.context_class(cmd, info_name=name, parent=ctx)
        try:
            cmd.make_context(ctx.info_name, list(args), parent=ctx.parent)
        except Exception as exc:
            kinds = {k.__name__ for k in type(exc).__mro__}
            message = str(getattr(exc, "message", exc))
            if kinds & set(_WRONG) or "extra argument" in message:
                pytest.fail(f"{where}:{number}: `{line}` does not parse: {type(exc).__name__}: {message}")
