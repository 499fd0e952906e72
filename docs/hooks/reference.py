"""MkDocs hook: the reference pages, generated from the code at every build, so they cannot drift from it.

- `reference/cli.md`: every command of `daedalus.cli.main.app` (walked, not listed), with its arguments and
  options as `--help` shows them;
- `reference/jobs-file.md`: every field of the jobs file, from the pydantic models in
  `daedalus.connectors.jobs` (type, default, constraint; the description is the field's `description`, else the
  comment on its line or just above it in the source, else the same setting's comment in `LoopConfig`);
- `reference/promql.md`: the PromQL templates per engine, from `daedalus.connectors.promql`;
- `reference/models.md` and `reference/flows.md`: mkdocstrings directives for every module of `models/` and
  `flows/` (found by walking the folders), rendered by mkdocstrings from the source.

The rooms are installed as `daedalus.<room>` from top-level folders (an editable install maps
`daedalus.models` to `models/`), which griffe's static finder cannot follow; the hook therefore builds a
throwaway tree `<tmp>/daedalus/<room> → <repo>/<room>` (symlinks) and hands it to mkdocstrings as its search
path. The example jobs file of the docs (`docs/examples/jobs.yaml`) is validated with the real loader too: a
field renamed in the code fails the build instead of leaving a stale example.
"""

from __future__ import annotations

import ast
import inspect
import io
import logging
import shutil
import tempfile
import textwrap
import tokenize
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("data", "models", "sim", "connectors", "tasks", "flows", "deployments", "runtime", "bench", "cli")
EXAMPLE_JOBS = ROOT / "docs" / "examples" / "jobs.yaml"
API_PAGES = {  # page → (room, title, intro)
    "reference/models.md": ("models", "Python API: `daedalus.models`",
                            "The mathematics, pure and deterministic: no Prefect, no I/O, no wall clock. Every "
                            "module of `models/`, of its sub-rooms named for the paper's parts (`capacity/`, "
                            "`forecast/`, `recovery/`, `planning/`), of the loop's (`loop/`) and of the policies "
                            "that wrap it (`policies/`), from its source; open "
                            "*Source code* under an entry to read the implementation."),
    "reference/flows.md": ("flows", "Python API: `daedalus.flows`",
                           "The Prefect flows: the control loop, approval and manual scaling, the background flows "
                           "started by events, the periodic pipeline flows and the dashboard."),
}
_tmp: Path | None = None
log = logging.getLogger("mkdocs.hooks.reference")  # a warning fails `mkdocs build --strict`

# What a jobs-file field means, for the fields whose code carries no description yet (no `Field(description=...)`,
# no comment on or above the line, none in LoopConfig). The code's own description wins as soon as it has one; a
# note whose field no longer exists fails the build, so a rename cannot leave it behind.
NOTES = {
    "JobSpec.name": "the job's name: lowercase letters, digits and dashes; it names the job's deployment "
                    "(`mape-k/<name>`), its knowledge in the store and its artifacts",
    "JobSpec.engine": "the streaming engine: picks the PromQL templates of the metrics source, or the embedded "
                      "simulator for `sim`",
    "JobSpec.prometheus": "where the job's metrics are read; required for every engine but `sim`",
    "JobSpec.selector": "label matchers on all of the job's series (`${selector}` in the templates); required for "
                        "every engine but `sim`",
    "JobSpec.source": "the job's source, for the templates: `topic` is the Kafka topic whose messages-in rate is the "
                      "workload",
    "JobSpec.scale_target": "what the execute phase scales",
    "JobSpec.scaleout": "the scale-out limits of the job",
    "JobSpec.checkpoint_interval": "the job's checkpoint interval: a restart replays up to this much of the "
                                   "workload, part of the backlog in the recovery-time prediction",
    "JobSpec.mode": "`auto` acts; `approve` proposes and waits for an operator; `dry-run` decides and reports, "
                    "never acts",
    "JobSpec.blackout": "daily windows (UTC) in which the loop decides and reports but never acts",
    "JobSpec.sim": "the simulated job's settings (engine `sim`)",
    "Blackout.start": "start of the window, UTC",
    "Blackout.end": "end of the window, UTC; a window may wrap past midnight",
    "PrometheusSettings.url": "the Prometheus server's base URL",
    "PrometheusSettings.timeout": "timeout of one query",
    "PrometheusSettings.retries": "retries of a query on connection errors, timeouts, 429 and 5xx, with backoff",
    "ScaleOut.min": "the smallest scale-out the loop sets",
    "ScaleOut.max": "the largest scale-out the loop sets",
    "ScaleTarget.kind": "what to scale: a Deployment or StatefulSet (scale subresource), a FlinkDeployment (Flink "
                        "Kubernetes Operator), a SparkApplication (Spark operator), the demo's local Spark query "
                        "(`spark-local`), a user's Spark application by its own submit command (`spark-submit`), "
                        "a Flink job through its REST API (`flink-rest`) or a local reactive cluster "
                        "(`flink-reactive`), or the simulator (`sim`)",
    "ScaleTarget.namespace": "the target's Kubernetes namespace",
    "ScaleTarget.name": "the target object's name",
    "SimSettings.peak_utilization": "the workload's peak as a share of the true capacity at the maximum scale-out",
    "SimSettings.seed": "random seed of the simulated job",
}


# --------------------------------------------------------------------------------------------- the hook events
@event_priority(100)  # before mkdocstrings reads its handler options
def on_config(config: Any) -> Any:
    global _tmp
    on_shutdown()  # `mkdocs serve` configures again on every rebuild
    _tmp = Path(tempfile.mkdtemp(prefix="daedalus-docs-"))
    (_tmp / "daedalus").mkdir()
    for room in ROOMS:
        (_tmp / "daedalus" / room).symlink_to(ROOT / room, target_is_directory=True)
    plugin = config.plugins.get("mkdocstrings")
    if plugin is not None:
        python = plugin.config.handlers.setdefault("python", {})
        python["paths"] = [str(_tmp)]
    return config


def on_files(files: Files, config: Any) -> Files:
    pages = {
        "reference/cli.md": cli_markdown(),
        "reference/jobs-file.md": jobs_markdown(),
        "reference/promql.md": promql_markdown(),
    }
    for page, (room, title, intro) in API_PAGES.items():
        pages[page] = api_markdown(room, title, intro)
    for path, content in pages.items():
        files.append(File.generated(config, path, content=content))
    return files


def on_shutdown() -> None:
    if _tmp is not None:
        shutil.rmtree(_tmp, ignore_errors=True)


# --------------------------------------------------------------------------------------------- helpers
def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    text = str(text)
    tick = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{tick}{pad}{text}{pad}{tick}".replace("|", "\\|")


# --------------------------------------------------------------------------------------------- the CLI
def walk_cli(app: Any = None) -> Iterator[tuple[list[str], Any, Any]]:
    """(path of names, command, context) for every command of the typer app, groups included, depth first."""
    import typer

    if app is None:
        from daedalus.cli.main import app
    root = typer.main.get_command(app)

    def walk(cmd: Any, path: list[str], parent: Any) -> Iterator[tuple[list[str], Any, Any]]:
        ctx = cmd.context_class(cmd, info_name=path[-1], parent=parent)
        yield path, cmd, ctx
        if hasattr(cmd, "list_commands"):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not getattr(sub, "hidden", False):
                    yield from walk(sub, [*path, name], ctx)

    yield from walk(root, ["daedalus"], None)


def cli_commands() -> list[str]:
    """Every leaf command, as typed: `daedalus bench policies`."""
    return [" ".join(path) for path, cmd, _ in walk_cli() if not hasattr(cmd, "list_commands")]


_SKIP_OPTIONS = {"--help", "--install-completion", "--show-completion"}


def cli_markdown() -> str:
    out = [
        "# Command line reference",
        "",
        "Generated at build time from the `daedalus` typer application (`daedalus.cli.main.app`); "
        "`daedalus COMMAND --help` prints the same. Durations are seconds unless the option says otherwise.",
        "",
    ]
    entries = list(walk_cli())
    out += ["| command | does |", "|---|---|"]
    for path, cmd, _ in entries[1:]:
        if hasattr(cmd, "list_commands"):
            continue
        name = " ".join(path)
        anchor = "-".join(path)
        out.append(f"| [`{name}`](#{anchor}) | {_cell(cmd.get_short_help_str(limit=150))} |")
    out.append("")
    for path, cmd, ctx in entries[1:]:
        name = " ".join(path)
        anchor = "-".join(path)
        level = "##" if len(path) == 2 else "###"
        out += [f"{level} `{name}` {{#{anchor}}}", ""]
        if cmd.help:
            out += [inspect.cleandoc(cmd.help), ""]
        if hasattr(cmd, "list_commands"):
            subs = [" ".join(p) for p, c, _ in entries if p[:-1] == path]
            out += ["Commands: " + ", ".join(f"[`{s}`](#{s.replace(' ', '-')})" for s in subs) + ".", ""]
            continue
        usage = cmd.get_usage(ctx).strip()
        out += ["```text", usage.removeprefix("Usage: "), "```", ""]
        rows = []
        for param in cmd.get_params(ctx):
            if any(opt in _SKIP_OPTIONS for opt in getattr(param, "opts", ())):
                continue
            record = param.get_help_record(ctx)
            if record is None:
                record = (param.name, "")
            kind = "argument" if param.param_type_name == "argument" else "option"
            rows.append(f"| {_code(record[0])} | {kind} | {_cell(record[1]) or '–'} |")
        if rows:
            out += ["| argument or option | kind | meaning |", "|---|---|---|", *rows, ""]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------- the jobs file
def _source_comments(cls: type) -> dict[str, str]:
    """Field name → the comment on its line, or the block of comment lines just above it, in `cls`'s source."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    found: dict[str, str] = {}
    body = ast.parse(source).body[0]
    for node in getattr(body, "body", []):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name, line = node.target.id, node.lineno
            if line in comments and not lines[line - 1].lstrip().startswith("#"):
                found[name] = comments[line]
                continue
            above = []
            prev = line - 1
            while prev in comments and lines[prev - 1].lstrip().startswith("#"):
                above.insert(0, comments[prev])
                prev -= 1
            if above:
                found[name] = " ".join(above)
    return found


def _constraint(meta: list[Any]) -> list[str]:
    out = []
    for m in meta:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(m, attr, None)
            if value is not None and type(m).__name__ != "FieldInfo":
                out.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
        pattern = getattr(m, "pattern", None)
        if pattern:
            out.append(f"matches `{pattern}`")
    return out


def _is_duration(meta: list[Any]) -> bool:
    return any(getattr(getattr(m, "func", None), "__name__", "") == "seconds" for m in meta)


def _type(annotation: Any, meta: list[Any], models: dict[str, type]) -> tuple[str, list[str]]:
    """A readable type and its constraints; nested models are registered in `models` (name → class)."""
    from pydantic import BaseModel

    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0], [*meta, *annotation.__metadata__], models)
    if _is_duration(meta):
        return "duration", _constraint(meta)
    if origin in (typing.Union, types.UnionType):
        parts = [_type(a, [], models) for a in args if a is not type(None)]
        text = " or ".join(p[0] for p in parts)
        cons = [c for p in parts for c in p[1]]
        return (f"{text} or null" if type(None) in args else text), [*cons, *_constraint(meta)]
    if origin is typing.Literal:
        return "one of " + ", ".join(_code(a) for a in args), []
    if origin is dict:
        return f"mapping of {_type(args[0], [], models)[0]} to {_type(args[1], [], models)[0]}", []
    if origin in (tuple, list):
        return f"list of {_type(args[0], [], models)[0]}", _constraint(meta)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        models.setdefault(annotation.__name__, annotation)
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})", []
    name = getattr(annotation, "__name__", str(annotation))
    names = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "time": "time (`HH:MM`, UTC)",
             "HttpUrl": "URL (http or https)"}
    return names.get(name, name), _constraint(meta)


def _default(field: Any) -> str:
    from pydantic import BaseModel

    if field.is_required():
        return "**required**"
    value = field.default_factory() if field.default_factory is not None else field.default
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if value is None:
        return "–"
    if value in ({}, (), []):
        return "empty"
    if isinstance(value, dict):
        return _code(", ".join(f"{k}: {v}" for k, v in value.items()))
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return _code(value)


def jobs_fields(cls: type | None = None) -> list[str]:
    """The field names of `JobSpec` (what a jobs-file entry may hold)."""
    if cls is None:
        from daedalus.connectors.jobs import JobSpec as cls
    return list(cls.model_fields)


def _model_table(cls: type, models: dict[str, type], fallback: dict[str, str], used: set[str]) -> list[str]:
    comments = _source_comments(cls)
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, field in cls.model_fields.items():
        type_text, cons = _type(field.annotation, list(field.metadata), models)
        if cons:
            type_text += " (" + ", ".join(cons) + ")"
        note = f"{cls.__name__}.{name}"
        used.add(note)
        meaning = field.description or comments.get(name) or fallback.get(name) or NOTES.get(note, "")
        rows.append(f"| `{name}` | {_cell(type_text)} | {_cell(_default(field))} | {_cell(meaning) or '–'} |")
    return rows


def jobs_markdown() -> str:
    from daedalus.connectors import jobs
    from daedalus.models.config import LoopConfig

    if EXAMPLE_JOBS.is_file():  # the docs' example must load with the real loader
        jobs.load_jobs(EXAMPLE_JOBS)
    loop_comments = _source_comments(LoopConfig)
    models: dict[str, type] = {}
    used: set[str] = set()
    out = [
        "# Jobs file reference",
        "",
        "Generated at build time from the pydantic models in `daedalus.connectors.jobs` (and the connectors' "
        "settings they compose), so it always matches the loader.",
        "",
        inspect.cleandoc(jobs.__doc__ or ""),
        "",
        "A jobs file is a YAML mapping with `jobs:` (a non-empty list of [job entries](#jobspec)) and optionally "
        "`defaults:` (a mapping merged under every entry; nested mappings are merged key by key, the entry wins). "
        "Check a file with `daedalus jobs check --jobs-file FILE`. Durations take seconds (`600`) or a unit "
        "(`600s`, `10m`, `1h`, `500ms`).",
        "",
        "## JobSpec",
        "",
        "One entry of `jobs:`, one streaming job.",
        "",
        *_model_table(jobs.JobSpec, models, loop_comments, used),
        "",
    ]
    done: set[str] = set()
    while len(done) < len(models):
        for name in sorted(set(models) - done):
            cls = models[name]
            done.add(name)
            doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")  # its own, not pydantic's inherited one
            out += [f"## {name}", ""]
            if doc:
                out += [doc, ""]
            out += [*_model_table(cls, models, loop_comments, used), ""]
    for stale in sorted(set(NOTES) - used):
        log.warning(f"docs/hooks/reference.py: NOTES names {stale}, which the jobs file no longer has")
    if EXAMPLE_JOBS.is_file():
        out += ["## Example", "", "This file is loaded with the real loader at every docs build and by the tests.",
                "", "```yaml", EXAMPLE_JOBS.read_text().rstrip(), "```", ""]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------- PromQL
def promql_markdown() -> str:
    from daedalus.connectors import promql

    engines = promql.ENGINES
    keys = [k for k in promql.KEYS if any(k in t for t in engines.values())]
    out = [
        "# PromQL templates",
        "",
        "Generated at build time from `daedalus.connectors.promql`: the queries the monitor phase sends, per "
        "engine. A job's `queries:` entry overrides any of them.",
        "",
        inspect.cleandoc(promql.__doc__ or ""),
        "",
        f"Job-level queries: {', '.join(_code(k) for k in promql.JOB_KEYS)}. Per-worker queries (aggregated by "
        f"`{promql.WORKER_LABEL}`): {', '.join(_code(k) for k in promql.WORKER_KEYS)}. Optional: "
        f"{', '.join(_code(k) for k in promql.OPTIONAL_KEYS)}.",
        "",
    ]
    for engine, templates in engines.items():
        out += [f"## `{engine}`", "", "| query | template |", "|---|---|"]
        for key in keys:
            if key in templates:
                out.append(f"| `{key}` | {_code(templates[key])} |")
        out.append("")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------- Python API
def room_modules(room: str) -> list[str]:
    """Every module of a room as `daedalus.<room>.<module>`, packages first, in path order."""
    base = ROOT / room
    names = []
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
            if not parts:
                continue
        names.append(".".join(["daedalus", room, *parts]))
    return names


def api_markdown(room: str, title: str, intro: str) -> str:
    where = (f"The room is installed as `daedalus.{room}` from the folder `{room}/`: a *Source code* block titled "
             f"`daedalus/{room}/x.py` shows the file `{room}/x.py` of the repository.")
    out = [f"# {title}", "", intro, "", where, ""]
    for module in room_modules(room):
        out += [f"::: {module}", ""]
    return "\n".join(out) + "\n"
