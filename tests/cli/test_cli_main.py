"""The assembled `daedalus` application: every command module's commands, under the names they always had."""

from __future__ import annotations

import typer

from daedalus.cli.main import app


def names(typer_app: typer.Typer) -> dict[str, list[str]]:
    """Top-level command names, and each group's command names."""
    group = typer.main.get_group(typer_app)
    return {name: sorted(getattr(cmd, "commands", {})) for name, cmd in group.commands.items()}


def test_every_command_and_group_is_there():
    found = names(app)
    assert sorted(found) == sorted(["simulate", "demo", "backtest", "observe", "jobs", "deploy", "status", "approve",
                                    "reject", "pause", "resume", "scale", "worker", "validate", "retrain", "compact",
                                    "bench", "exporter", "step", "release", "config", "fleet", "explain"])
    assert found["jobs"] == ["check"]
    assert found["fleet"] == ["down", "status", "up"]
    assert found["bench"] == sorted(["monitor", "deploy", "schedule", "operate", "retrain", "validate", "policies",
                                     "cv", "loop", "backtest", "forecast", "capacity", "flink", "fleet", "chaos"])


def options(command) -> set[str]:
    """A command's long option names."""
    return {o for p in command.params for o in p.opts if o.startswith("--")}


def test_one_option_name_for_the_jobs_file_the_store_and_the_scale_out():
    group = typer.main.get_group(app)
    commands = {**{n: c for n, c in group.commands.items() if n not in ("jobs", "bench", "fleet")},
                "jobs check": group.commands["jobs"].commands["check"],
                **{f"bench {n}": c for n, c in group.commands["bench"].commands.items()}}
    opts = {name: options(cmd) for name, cmd in commands.items()}
    assert {n for n, o in opts.items() if "--jobs-file" in o} == {
        "observe", "deploy", "status", "approve", "reject", "pause", "resume", "scale", "jobs check", "exporter",
        "step", "release"}
    assert {n for n, o in opts.items() if "--jobs" in o and not n.startswith("bench")} == {"retrain"}  # job names
    store_options = {x for o in opts.values() for x in o if "store" in x}
    assert store_options == {"--store"}
    assert not any("--parallelism" in o for o in opts.values())
    assert "--scaleout" in opts["approve"]
