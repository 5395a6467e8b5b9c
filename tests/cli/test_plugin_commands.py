"""Commands as a plugin kind (`initmem_register_commands`): an outside package's `initmem`
subcommand listed and run beside the built-in ones, its errors in one line, a broken or clashing
one isolated; `new-plugin` and `clean` are the optional built-in plugin `commands`."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from initmem_cli.app import app

runner = CliRunner()

#: A researcher's package: one working command, one that takes initmem's own name, one that
#: does not load.
GREET = '''
from typing import Annotated

import typer

from initmem_core import hookimpl
from initmem_core.errors import ConfigError


@hookimpl
def initmem_register_commands(register):
    register("greet", "greetplug_mod:greet", "Greet a researcher")
    register("run", "greetplug_mod:greet", "Would replace initmem run")
    register("broken-cmd", "greetplug_mod:no_such_function", "Does not load")


def greet(name: Annotated[str, typer.Argument(help="Whom to greet")], loud: bool = False) -> None:
    """Say hello to NAME."""
    if name == "nobody":
        raise ConfigError("'nobody' is not a name; give a researcher's name")
    typer.echo(f"hello {name}".upper() if loud else f"hello {name}")
'''

TWIN = """
from initmem_core import hookimpl


@hookimpl
def initmem_register_commands(register):
    register("greet", "builtins:print", "Greets too")
"""


def listed_commands() -> set[str]:
    """The names in `initmem --help`'s Commands panel."""
    listing = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert listing.exit_code == 0, listing.output
    panel = listing.stdout.split("Commands")[1].split("╰")[0]
    return set(re.findall(r"^│ (\S+) ", panel, re.MULTILINE))


def test_an_outside_command_is_listed_and_runs_beside_initmems_own(install_fake_plugin):
    install_fake_plugin("greetplug", GREET)
    assert {"greet", "new-plugin", "clean", "run"} <= listed_commands()  # new-plugin, clean: the built-in plugin's
    assert "Greet a researcher" in runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).stdout
    result = runner.invoke(app, ["greet", "ada", "--loud"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "HELLO ADA\n"
    helped = runner.invoke(app, ["greet", "--help"], env={"COLUMNS": "200"})
    assert "Say hello to NAME." in helped.stdout and "Whom to greet" in helped.stdout


def test_an_outside_commands_error_is_one_line_and_exit_2(install_fake_plugin):
    install_fake_plugin("greetplug", GREET)
    result = runner.invoke(app, ["greet", "nobody"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == "Error: 'nobody' is not a name; give a researcher's name"
    assert "Traceback" not in result.output


def test_a_command_taking_initmems_name_is_ignored_and_one_that_does_not_load_is_left_out(install_fake_plugin):
    install_fake_plugin("greetplug", GREET)
    listing = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert listing.exit_code == 0, listing.output
    warnings = [line for line in listing.stderr.splitlines() if line.startswith("Warning:")]
    assert any("command 'run' is initmem's own; it is ignored" in line for line in warnings), listing.stderr
    assert any("command 'broken-cmd' failed to load: AttributeError" in line for line in warnings), listing.stderr
    assert "broken-cmd" not in listing.stdout and "Greet a researcher" in listing.stdout
    assert "--arch" in runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).stdout  # initmem's run
    missing = runner.invoke(app, ["broken-cmd"])
    assert missing.exit_code == 2 and "No such command 'broken-cmd'" in missing.stderr
    assert "Traceback" not in missing.output
    assert runner.invoke(app, ["greet", "ada"]).stdout == "hello ada\n"  # its sibling still works


def test_two_plugins_registering_one_command_is_one_line_naming_both(install_fake_plugin):
    install_fake_plugin("greetplug", GREET)
    install_fake_plugin("twinplug", TWIN)
    result = runner.invoke(app, ["greet", "ada"])
    assert result.exit_code == 2
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("Error: command 'greet' is registered twice") and "twinplug" in line, line
    assert "greet" not in listed_commands()


def test_without_the_commands_plugin_new_plugin_and_clean_are_not_commands(monkeypatch):
    monkeypatch.setenv("INITMEM_LOAD_PLUGINS", "")
    assert {"run", "sweep", "report"} <= listed_commands()
    assert not {"new-plugin", "clean"} & listed_commands()
    result = runner.invoke(app, ["clean", "my-sweep"])
    assert result.exit_code == 2 and "No such command 'clean'" in result.stderr
