"""Commands that ship what was promoted: resolve, lock, lock verify.

Thin: they parse a runtime profile and call site, call app/ and print.
Exit status: `resolve` 0 with a match, 3 with none; `lock` 0 when it wrote a
lock with at least one artifact, 3 when nothing matched (no file written);
`lock verify` 0 when the lock holds, 1 with every problem listed.
"""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import click

from registry.formats.errors import UserError
from .session import Session, pass_session
from .output import emit_json, exit_status_ahead, output_path, say, table
from .query_commands import AS_OF_HELP

EXIT_NO_MATCH = 3


def _profile_options(command):
    """The runtime profile and call-site options `resolve` and `lock` share."""
    for option in reversed((
            click.option("--arch", help="GPU architecture of the runtime (sm80, sm90, sm100, ... or cpu)."),
            click.option("--torch", "torch_version", help="torch version, e.g. 2.13.0."),
            click.option("--cuda", help="CUDA version; a bundle bounding it never matches without one."),
            click.option("--triton", help="Triton version; a bundle bounding it never matches without one."),
            click.option("--model", help="Model id of the pipeline (checked when given)."),
            click.option("--revision", help="Model revision (with --model)."),
            click.option("--fingerprint", help="Graph fingerprint of the operation to replace (checked when given)."),
            click.option("--input", "inputs", multiple=True, metavar="DTYPE:SHAPE:STRIDE:DEVICE",
                         help="An input tensor of the call, in order, e.g. float32:2x8x64:512x64x1:cuda "
                              "(checked when given)."),
            click.option("--mode", "execution_mode", default="inference", show_default=True, help="Execution mode."),
            click.option("--distributed", "distributed_mode", default="single", show_default=True,
                         help="Distributed mode."),
            click.option("--detect", is_flag=True, help="Take the architecture and the torch, CUDA and Triton "
                                                        "versions from this process (imports torch)."),
    )):
        command = option(command)
    return command


def _query(arch, torch_version, cuda, triton, model, revision, fingerprint, inputs, execution_mode, distributed_mode,
           detect):
    from registry.bundles import CallSite, Profile, parse_input_spec

    if revision is not None and model is None:
        raise UserError("--revision needs --model: a revision of which model?")
    if detect:
        if any(value is not None for value in (arch, torch_version, cuda, triton)):
            raise UserError("--detect reads the architecture and versions from this process; "
                             "drop --arch/--torch/--cuda/--triton or --detect")
        from registry.runtime import RuntimeProfile

        profile = RuntimeProfile.detect(execution_mode=execution_mode, distributed_mode=distributed_mode)
    elif arch is None and any(value is not None for value in (torch_version, cuda, triton)):
        raise UserError("versions describe a runtime: give --arch with them (or --detect)")
    else:
        profile = None if arch is None else Profile(arch, torch_version, cuda, triton, execution_mode,
                                                    distributed_mode)
    site = CallSite(model, revision, fingerprint, tuple(parse_input_spec(text) for text in inputs) if inputs else None)
    return profile, site


def _with_query(function):
    @functools.wraps(function)
    def wrapper(*args, arch, torch_version, cuda, triton, model, revision, fingerprint, inputs, execution_mode,
                distributed_mode, detect, **kwargs):
        profile, site = _query(arch, torch_version, cuda, triton, model, revision, fingerprint, inputs,
                               execution_mode, distributed_mode, detect)
        return function(*args, profile=profile, site=site, **kwargs)
    return wrapper


def _profile_text(profile) -> str:
    return (f"{profile.gpu_architecture}, torch {profile.torch or '-'}, cuda {profile.cuda or '-'}, "
            f"triton {profile.triton or '-'} ({profile.execution_mode}, {profile.distributed_mode})")


def print_resolution(found) -> None:
    """What would ship and why every other artifact would not (also used by the demo)."""
    resolution = found.resolution
    say(f"resolve {found.workload} for {_profile_text(found.profile)} as of position {found.position}:")
    chosen = next((o for o in resolution.outcomes if o.code == "selected"), None)
    if chosen is None:
        say("  nothing ships: no promoted, unrevoked bundle matches")
    else:
        record = chosen.candidate.record
        entry = record.get("entry_point") or {}
        say(f"  ships {chosen.artifact}: {chosen.detail}; bundle {str(record.get('payload_sha256'))[:12]}, "
            f"entry {entry.get('file')}:{entry.get('symbol')}")
        if record.get("note"):
            say(f"  note: {record['note']}")
    if resolution.others:
        table("not chosen", ["artifact", "code", "why"],
              ((o.artifact, o.code, o.detail + (f" [{o.candidate.record['note']}]" if o.candidate.record.get("note")
                                                else "")) for o in resolution.others))


@click.command()
@click.option("--workload", "workload_id", required=True, help="The workload whose artifacts may ship.")
@_profile_options
@click.option("--as-of", "as_of", help=AS_OF_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the match and every reason code as JSON.")
@pass_session
@_with_query
def resolve(session: Session, workload_id: str, profile, site, as_of: str | None, as_json: bool) -> None:
    """Which promoted, unrevoked bundle of a workload this runtime may load, and why not each other one.

    The runtime is --arch and --torch (with --cuda, --triton when it has
    them), or --detect for this process. Every other artifact gets a stable
    reason code (docs/runtime.md). Exit 0 with a match, 3 with none, 1 on
    invalid input.
    """
    from registry.app.resolve import resolve_workload
    from registry.projections import resolve_as_of

    if profile is None:
        raise UserError("resolve needs the runtime: --arch and --torch, or --detect")
    registry = session.open()
    found = resolve_workload(registry, workload_id, profile, site, resolve_as_of(registry.store, as_of))
    exit_status_ahead(EXIT_NO_MATCH if found.resolution.chosen is None else 0)
    if as_json:
        emit_json(found.to_dict())
    else:
        print_resolution(found)
    if found.resolution.chosen is None:
        sys.exit(EXIT_NO_MATCH)


@click.group(invoke_without_command=True)
@click.option("--workload", "workload_id", help="The workload to lock.")
@_profile_options
@click.option("--out", type=click.Path(dir_okay=False), help="Where to write the lock file.")
@click.option("--force", is_flag=True, help="Replace an existing --out file (never a registry).")
@click.option("--as-of", "as_of", help=AS_OF_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the lock document instead of a summary.")
@pass_session
@_with_query
@click.pass_context
def lock(ctx: click.Context, session: Session, workload_id: str | None, profile, site, out: str | None,
         force: bool, as_of: str | None, as_json: bool) -> None:
    """Export a workload's promoted, compatible bundles to a lock file: `registry lock --workload W --out FILE`.

    Without --arch (or --detect) every promoted bundle is locked; with it,
    those matching the profile. Best first. Exit 3 (no file written) when none qualifies.
    """
    if ctx.invoked_subcommand is not None:
        if workload_id or out:
            raise click.UsageError("--workload and --out export a lock; `lock verify` takes only its own options")
        return
    if not workload_id or not out:
        raise click.UsageError("exporting a lock needs --workload and --out (or use `registry lock verify FILE`)")
    from registry.app.lock import export_lock
    from registry.projections import resolve_as_of

    output_path(out, force)
    registry = session.open()
    document = export_lock(registry, workload_id, profile, site, resolve_as_of(registry.store, as_of))
    if not document["artifacts"]:
        click.echo(f"nothing to lock: no promoted bundle of {workload_id} "
                   f"{'matches the profile' if profile else 'exists'} (no file written)", err=True)
        sys.exit(EXIT_NO_MATCH)
    _write_atomically(Path(out), _lock_text(document))
    if as_json:
        emit_json(document)
    else:
        say(f"locked {len(document['artifacts'])} artifact(s) of {workload_id} at log position "
            f"{document['log_position']} (chain {document['chain_hash'][:12]}) to {out}")
        for entry in document["artifacts"]:
            say(f"  {entry['artifact']}: bundle {entry['bundle_sha256'][:12]}, verdict {entry['verdict_event_id']}")


def _lock_text(document: dict) -> str:
    import json

    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


@lock.command("verify")
@click.argument("lock_file", type=click.Path(dir_okay=False))
@click.option("--bundles", "bundles_dir", type=click.Path(file_okay=False),
              help="Directory holding one bundle directory per locked artifact, named by its id.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks and problems as JSON.")
@pass_session
def lock_verify(session: Session, lock_file: str, bundles_dir: str | None, as_json: bool) -> None:
    """Check LOCK_FILE: itself, the bundles on disk (--bundles) and, given a database, the registry.

    Offline (no --db and no REGISTRY_DATABASE_URL) nothing but the files is
    read. With a database, every locked artifact must still hold its
    identity and verdict, with no revocation since the export. Exit 0 when
    all hold, 1 otherwise (each problem named with its code).
    """
    from registry.bundles import check_bundles, read_lock

    parsed = read_lock(lock_file)
    checked = ["lock file"]
    problems = []
    if bundles_dir is not None:
        problems += check_bundles(parsed, bundles_dir)
        checked.append("bundles")
    url = session.url or os.environ.get("REGISTRY_DATABASE_URL")
    if url:
        from registry.app.lock import registry_problems

        problems += registry_problems(session.open(), parsed)
        checked.append("registry")
    exit_status_ahead(1 if problems else 0)
    if as_json:
        emit_json({"lock": lock_file, "workload": parsed.workload, "artifacts": [a.artifact for a in parsed.artifacts],
                   "checked": checked, "ok": not problems, "problems": [p.to_dict() for p in problems]})
    elif problems:
        for problem in problems:
            click.echo(f"{problem.code}: {problem.artifact or 'lock'}: {problem.detail}", err=True)
    else:
        say(f"lock holds: {len(parsed.artifacts)} artifact(s) of {parsed.workload}; checked {', '.join(checked)}")
    if problems:
        sys.exit(1)


COMMANDS = [resolve, lock]
