"""The `registry` command: a click group whose subcommands stay thin.

Exit status, one meaning each across every command (docs/architecture.md,
"Exit codes"; registry/cli/output.py names them): 0 done, and the answer is
yes; 1 refused or invalid input (one line on stderr, nothing written); 2 usage
error; 3 done, and the answer is no (not promoted, nothing qualifies, a check
found a problem); 4 a measurement failed, and its failure was recorded; 70 a
defect in the registry (a crash report asking for a bug report).
"""
from __future__ import annotations

import os
import sys

import click

from registry import __version__
from registry.formats.errors import UserError, first_line
from registry.formats.text import check_text
from registry.events.errors import StoreError

from .output import EXIT_STATUS_KEY, JSON_EMITTED_KEY, crash_report, emit_json, fail
from .session import Session

# A refusal: the input or the request is not acceptable (one line, exit 1). Anything else is a defect.
REFUSALS = (UserError, StoreError, OSError)
# What click raises to end a command on purpose (usage errors, --help, an abort): its own to handle.
_CLICK_ENDINGS = (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort)
# A defect in the registry (EX_SOFTWARE, sysexits.h): never 1, which says the input was refused.
EXIT_BUG = 70
# The options of `registry` itself, which go before the command (`registry --db URL show X`).
GLOBAL_OPTIONS = ("--db", "--actor")
# Context.meta key of the command line's arguments, each checked as text before any command runs.
_ARGUMENTS_KEY = "registry.arguments"


# The module of each command, imported when the command is looked up: a command line imports the one module of
# the command it runs (its start-up is a read's, benchmarks/cli.py), and help imports them all.
# tests/cli/test_cli_startup.py checks this table against every module's COMMANDS.
COMMAND_MODULES = {
    **dict.fromkeys(("init", "history", "verify", "install-manifest", "db"), "log_commands"),
    **dict.fromkeys(("workload", "artifact", "frames", "bundle"), "setup_commands"),
    **dict.fromkeys(("evidence", "evaluate", "kernels"), "evidence_commands"),
    "import": "import_commands",
    **dict.fromkeys(("promote", "approve", "revoke", "what-if"), "decision_commands"),
    **dict.fromkeys(("show", "report", "replay"), "query_commands"),
    **dict.fromkeys(("resolve", "lock", "keys", "attest", "rejudge"), "ship_commands"),
    "demo": "demo_command",
    "bench": "bench_commands",
    **dict.fromkeys(("serve", "token"), "serve_commands"),
    "monitor": "monitor_commands",
    "hook": "hook_commands",
    **dict.fromkeys(("worker", "reverify", "jobs"), "job_commands"),
}


class RegistryGroup(click.Group):
    """Turns every refusal raised below into one line on stderr and exit 1, and anything else into a crash report.

    A refusal is a registry.formats.errors.UserError (every refusal error subclasses
    it), a StoreError or an OSError (a file the user named). Any other
    exception is a bug, even a ValueError: it must not pass for a refusal,
    so it gets a crash report asking for a bug report, exit EXIT_BUG.

    Every argument is text the registry can keep, or the command does not
    run: undecodable bytes (a lone surrogate once Python decodes them) are
    one refusal here, for every command and option at once.

    Given --json, every outcome but a crash prints one JSON document on
    standard output: the command's own, or for a refusal `{"error": LINE}`
    (the same line as on stderr), for a usage error `{"error": ...,
    "exit_status": 2}`, and for any other non-zero exit that printed none
    `{"exit_status": N}`.

    A reader that stops early (`registry history X | head`) closes the pipe:
    that ends the command quietly, as other command-line tools do, with exit
    0, or with the status the command recorded before printing
    (output.exit_status_ahead: a promote's 3 stays 3). Standard output is
    flushed here, so a pipe closed while the output still sits in the buffer
    is caught too, not at interpreter exit.
    """

    def list_commands(self, ctx: click.Context | None) -> list[str]:
        return sorted({*self.commands, *COMMAND_MODULES})

    def get_command(self, ctx: click.Context | None, name: str) -> click.Command | None:
        """The command named, its module imported on first use (COMMAND_MODULES)."""
        if name not in self.commands and name in COMMAND_MODULES:
            module = __import__(f"{__package__}.{COMMAND_MODULES[name]}", fromlist=["COMMANDS"])
            for command in module.COMMANDS:
                self.add_command(command)
        return super().get_command(ctx, name)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Every argument, as given, is kept for the text check `invoke` makes before anything else runs."""
        ctx.meta[_ARGUMENTS_KEY] = list(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        wants_json = "--json" in ctx.meta.get(_ARGUMENTS_KEY, ())
        try:
            try:
                for index, argument in enumerate(ctx.meta.get(_ARGUMENTS_KEY, ()), start=1):
                    check_text(argument, f"argument {index}")
                return super().invoke(ctx)
            except REFUSALS as exc:
                if isinstance(exc, BrokenPipeError):
                    raise
                _refuse(ctx, first_line(exc), wants_json)
            except click.UsageError as exc:
                if isinstance(exc, click.NoSuchOption) and exc.option_name in GLOBAL_OPTIONS:
                    exc.message += (f" ({exc.option_name} belongs to `registry` itself and goes before the command: "
                                    f"registry {exc.option_name} VALUE {ctx.invoked_subcommand or 'COMMAND'} ...)")
                _answer_json(ctx, wants_json, {"error": exc.format_message(), "exit_status": exc.exit_code})
                raise
            except _CLICK_ENDINGS:
                raise
            except SystemExit as exc:
                if exc.code not in (0, None):
                    _answer_json(ctx, wants_json, {"exit_status": exc.code})
                raise
            except Exception as exc:  # noqa: BLE001 - a defect, reported as one
                damage = database_damage(exc)
                if damage is not None:
                    _refuse(ctx, damage, wants_json)
                crash_report(exc)
                sys.exit(EXIT_BUG)
            finally:
                _flush_stdout()
        except BrokenPipeError:
            _discard_stdout()
            sys.exit(ctx.meta.get(EXIT_STATUS_KEY, 0))


def _answer_json(ctx: click.Context, wants_json: bool, document: dict) -> None:
    """Given --json, a command that ends without having printed its JSON prints this one document instead."""
    if wants_json and not ctx.meta.get(JSON_EMITTED_KEY):
        emit_json(document)


def _refuse(ctx: click.Context, line: str, wants_json: bool) -> None:
    """A refusal: its one line on stderr, exit 1, and given --json the same line as `{"error": ...}` on stdout."""
    _answer_json(ctx, wants_json, {"error": line})
    fail(line)


def database_damage(exc: Exception) -> str | None:
    """One line for a database the registry cannot read as one (a damaged read model, a file that is no registry).

    SQLite and Postgres say so with an OperationalError (no such table, text
    that is not UTF-8) or a DatabaseError (not a database at all): the state
    of the file, not a defect of the code. The read models are derived, so
    `registry replay` rebuilds them from the log.
    """
    from sqlalchemy.exc import DatabaseError, IntegrityError, ProgrammingError

    if not isinstance(exc, DatabaseError) or isinstance(exc, (IntegrityError, ProgrammingError)):
        return None
    cause = first_line(exc.orig)
    return (f"the database cannot be read as a registry ({cause}); if only the read models are damaged, "
            "`registry replay` rebuilds them from the log")


def _flush_stdout() -> None:
    if sys.stdout is None:  # started with standard output closed: nothing to flush, nothing lost
        return
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # a closed pipe, a closed descriptor or stream: the output is gone
        _discard_stdout()


def _discard_stdout() -> None:
    """Point standard output at the null device, so the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no file descriptor behind sys.stdout (in memory, or none)
        pass
    finally:
        os.close(devnull)


@click.group(cls=RegistryGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "url", metavar="URL",
              help="Database URL (else REGISTRY_DATABASE_URL, else sqlite:///registry.db; "
                   "`registry demo` uses its own demo.db).")
@click.option("--actor", help="Who is acting (else REGISTRY_ACTOR, else user@host): a name as every id is "
                              "(1-128 characters, a letter or digit first, no whitespace, control characters or ':').")
@click.version_option(__version__, prog_name="registry")
@click.pass_context
def main(ctx: click.Context, url: str | None, actor: str | None) -> None:
    """An event-sourced promotion registry for GPU kernel artifacts of video diffusion models."""
    ctx.obj = Session(url, actor)


def run() -> None:
    """The `registry` command as a process of its own (the installed script, `python -m registry`).

    It ends as the interpreter would (other threads joined, atexit handlers
    run, the standard streams flushed) but without the teardown that follows:
    once a command has imported torch (`evaluate`, `demo`), freeing every
    module object by object costs 0.7 to 1 s of CPU after the work is done
    (docs/benchmarks.md). Only for a process that ends here: click's test
    runner calls ``main`` itself.
    """
    import atexit
    import threading

    try:
        main(prog_name="registry")
        code = 0
    except SystemExit as exc:
        code = exc.code
    if code is not None and not isinstance(code, int):  # sys.exit(text): the text on stderr, exit 1
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # noqa: SLF001 - the interpreter's own first step at exit: join non-daemon threads
    atexit._run_exitfuncs()  # noqa: SLF001 - then the atexit handlers, as at any exit
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a reader that went away: what it missed is gone either way
            pass
    os._exit(code or 0)


if __name__ == "__main__":
    run()
