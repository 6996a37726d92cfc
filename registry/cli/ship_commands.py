"""Commands that ship what was promoted: resolve, lock, lock verify, keys, attest, rejudge.

Thin: they parse a runtime profile and call site, call app/ and print.
Exit status: `resolve` 0 with a match, 3 with none; `lock` 0 when it wrote a
lock with at least one artifact, 3 when nothing matched (no file written);
`lock verify` 0 when the lock holds, 1 with every problem listed.
"""
from __future__ import annotations

import functools
import sys

import click

from registry.formats.errors import UserError
from .session import Session, pass_session
from .output import EXIT_NO, emit_json, exit_status_ahead, output_path, say, table, write_output
from .query_commands import AS_OF_HELP



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
        from registry.bundles.resolution import left_out

        skipped = left_out(resolution.outcomes)
        say("  nothing ships: no promoted, unrevoked bundle matches"
            + (f"; promoted but left out: {', '.join(f'{o.artifact} ({o.code})' for o in skipped)} (why: below)"
               if skipped else ""))
    else:
        record = chosen.candidate.record
        entry = record.get("entry_point") or {}
        say(f"  ships {chosen.artifact}: {chosen.detail}; bundle {record.get('payload_sha256')}, "
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

    Example:

    \b
      registry resolve --workload wan-t2v --arch sm90 --torch 2.13.0 --cuda 12.8
    """
    from registry.app.resolve import resolve_workload
    from registry.projections import resolve_as_of

    if profile is None:
        raise UserError("resolve needs the runtime: --arch and --torch, or --detect")
    registry = session.open()
    found = resolve_workload(registry, workload_id, profile, site, resolve_as_of(registry.store, as_of))
    exit_status_ahead(EXIT_NO if found.resolution.chosen is None else 0)
    if as_json:
        emit_json(found.to_dict())
    else:
        print_resolution(found)
    if found.resolution.chosen is None:
        sys.exit(EXIT_NO)


KEY_HELP = "Private signing key file (`registry keys init`); default: the PEM text in $REGISTRY_SIGNING_KEY."


@click.group(invoke_without_command=True)
@click.option("--workload", "workload_id", help="The workload to lock.")
@_profile_options
@click.option("--out", type=click.Path(dir_okay=False), help="Where to write the lock file.")
@click.option("--force", is_flag=True, help="Replace an existing --out file (never a registry).")
@click.option("--as-of", "as_of", help=AS_OF_HELP)
@click.option("--key", "key_file", type=click.Path(dir_okay=False), help=KEY_HELP)
@click.option("--valid-for", "valid_for", default="7d", show_default=True,
              help="How long the signed lock is valid (s, m, h or d, e.g. 12h): the revocation window.")
@click.option("--unsigned", is_flag=True, help="Write an unsigned lock, which runtimes refuse unless they opt in "
                                               "to unsigned locks explicitly.")
@click.option("--refresh", "refresh_file", type=click.Path(dir_okay=False),
              help="Re-issue this lock, signed by --key (expired or not), at the log's head: same workload, "
                   "profile and call site; artifacts that no longer ship drop out, none is added.")
@click.option("--rebuild", is_flag=True,
              help="With --refresh: accept a lock the key did not sign (or edited since), taking from it only its "
                   "workload, profile, call site and artifact ids.")
@click.option("--json", "as_json", is_flag=True, help="Print the lock document instead of a summary.")
@pass_session
@_with_query
@click.pass_context
def lock(ctx: click.Context, session: Session, workload_id: str | None, profile, site, out: str | None,
         force: bool, as_of: str | None, key_file: str | None, valid_for: str, unsigned: bool,
         refresh_file: str | None, rebuild: bool, as_json: bool) -> None:
    """Export a workload's promoted, compatible bundles to a signed lock file: `registry lock --workload W --out FILE`.

    Without --arch (or --detect) every promoted bundle is locked; with it,
    those matching the profile. Best first. The lock is signed (--key or
    $REGISTRY_SIGNING_KEY) and expires after --valid-for (default 7 days);
    --unsigned writes one unsigned. Exit 3 (no file written) when none
    qualifies; a --refresh writes its lock even when nothing remains in it.

    Example:

    \b
      registry lock --workload wan-t2v --key signing.key --out registry.lock.json
    """
    from registry.bundles import CallSite

    if ctx.invoked_subcommand is not None:
        if workload_id or out:
            raise click.UsageError("--workload and --out export a lock; `lock verify` takes only its own options")
        return
    if refresh_file is not None and (workload_id or profile is not None or as_of or site != CallSite()):
        raise click.UsageError("--refresh takes the workload, profile and call site from the lock it refreshes")
    if not (workload_id or refresh_file) or not out:
        raise click.UsageError("exporting a lock needs --workload and --out (or use `registry lock verify FILE`)")
    if unsigned and key_file:
        raise click.UsageError("--unsigned and --key contradict each other: give one")
    if unsigned and ctx.get_parameter_source("valid_for") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--valid-for applies to a signed lock; an unsigned lock carries no expiry that a "
                               "reader could trust (docs/bundles.md, \"Unsigned locks\")")
    if rebuild and refresh_file is None:
        raise click.UsageError("--rebuild applies only with --refresh")
    from registry.app.lock import export, lock_to_refresh, refresh_lock, signed_lock
    from registry.bundles.keys import load_signing_key
    from registry.bundles.signed_lock import parse_duration
    from registry.projections import resolve_as_of

    output_path(out, force)
    key = None if unsigned else load_signing_key(key_file)
    validity = parse_duration(valid_for)
    registry = session.open()
    if refresh_file is not None:
        previous, wanted = lock_to_refresh(refresh_file, key, rebuild)
        document = refresh_lock(registry, previous, wanted, rebuild=rebuild)
        workload_id = document["workload"]
        left_out = []
    else:
        exported = export(registry, workload_id, profile, site, resolve_as_of(registry.store, as_of))
        document, left_out = exported.document, exported.left_out_dicts()
    for entry in left_out:
        click.echo(f"left out: {entry['artifact']} ({entry['code']}): {entry['detail']}", err=True)
    if not document["artifacts"] and refresh_file is None:
        exit_status_ahead(EXIT_NO)
        left = f"{len(left_out)} promoted artifact(s) left out, each named above" if left_out else \
            "nothing of it is promoted"
        click.echo(f"nothing to lock: no promoted bundle of {workload_id} "
                   f"{'matches the profile' if profile else 'exists'}; {left} (no file written)", err=True)
        if as_json:
            emit_json({**document, "written": False, "left_out": left_out})
        sys.exit(EXIT_NO)
    content = document if key is None else signed_lock(document, key, validity)
    write_output(out, _lock_text(content), force=force)
    if as_json:
        emit_json(content)
    else:
        signature = "unsigned" if key is None else f"signed by key {key.key_id}, valid for {valid_for}"
        say(f"locked {len(document['artifacts'])} artifact(s) of {workload_id} at log position "
            f"{document['log_position']} (chain {document['chain_hash']}) to {out}; {signature}")
        for entry in document["artifacts"]:
            say(f"  {entry['artifact']}: bundle {entry['bundle_sha256']}, verdict {entry['verdict_event_id']}")


def _lock_text(document: dict) -> str:
    import json

    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


@lock.command("verify")
@click.argument("lock_file", type=click.Path(dir_okay=False))
@click.option("--bundles", "bundles_dir", type=click.Path(file_okay=False),
              help="Directory holding one bundle directory per locked artifact, named by its id.")
@click.option("--key", "public_keys", multiple=True, type=click.Path(dir_okay=False),
              help="A trusted public key (repeat during a key rotation): the lock must be signed by one of them "
                   "and unexpired.")
@click.option("--seen", "seen_file", type=click.Path(dir_okay=False),
              help="The newest lock this deployment already accepted: an older one is refused (rollback).")
@click.option("--json", "as_json", is_flag=True, help="Print the checks and problems as JSON.")
@pass_session
def lock_verify(session: Session, lock_file: str, bundles_dir: str | None, public_keys: tuple[str, ...],
                seen_file: str | None, as_json: bool) -> None:
    """Check LOCK_FILE: its signature (--key), itself, the bundles (--bundles) and, given a database, the registry.

    Offline (no --db and no REGISTRY_DATABASE_URL) nothing but the files is
    read. With --key the lock must be signed by a trusted key and not
    expired. With a database, every field of every locked artifact must equal
    the registry's, with no revocation since the export. Exit 0 when all
    hold, 3 otherwise (each problem named with its code), 1 on invalid input.
    """
    from registry.app.lock import verify_lock

    if seen_file is not None and not public_keys:
        raise click.UsageError("--seen compares signed locks: give the trusted --key too")
    outcome = verify_lock(lock_file, public_keys=public_keys, seen_file=seen_file, bundles_dir=bundles_dir,
                          database=session.url, actor=session.actor)
    parsed, checked, problems = outcome.lock, outcome.checked, outcome.problems
    exit_status_ahead(EXIT_NO if problems else 0)
    if as_json:
        emit_json({"lock": lock_file, "workload": parsed and parsed.workload,
                   "artifacts": [a.artifact for a in parsed.artifacts] if parsed else [],
                   "checked": checked, "ok": not problems, "problems": [p.to_dict() for p in problems]})
    elif problems:
        for problem in problems:
            click.echo(f"{problem.code}: {problem.artifact or 'lock'}: {problem.detail}", err=True)
    else:
        say(f"lock holds: {len(parsed.artifacts)} artifact(s) of {parsed.workload}; checked {', '.join(checked)}")
        if not public_keys:
            say("  not authenticated: its signature was not checked (give --key PUB)")
    if problems:
        sys.exit(EXIT_NO)


@click.group()
def keys() -> None:
    """Signing keys for locks and attestations (Ed25519)."""


@keys.command("init")
@click.argument("key_file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the paths and key id as JSON.")
def keys_init(key_file: str, as_json: bool) -> None:
    """Create a signing key in KEY_FILE (owner-only, never overwriting) and its public key in KEY_FILE.pub."""
    from registry.bundles.keys import create_key

    key = create_key(key_file)
    result = {"private_key": key_file, "public_key": key_file + ".pub", "key_id": key.key_id}
    if as_json:
        emit_json(result)
    else:
        say(f"created signing key {key_file} (mode 0600) and public key {key_file}.pub; key id {key.key_id}")


@keys.command("show")
@click.option("--key", "key_file", type=click.Path(dir_okay=False), help=KEY_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the public key and key id as JSON.")
def keys_show(key_file: str | None, as_json: bool) -> None:
    """Print the public key (PEM) and key id of the signing key, for verifiers to trust."""
    from registry.bundles.keys import load_signing_key

    key = load_signing_key(key_file)
    if as_json:
        emit_json({"key_id": key.key_id, "public_key": key.public.pem()})
    else:
        say(f"key id {key.key_id}")
        click.echo(key.public.pem(), nl=False)


@click.command()
@click.argument("artifact_id")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Where to write the signed attestation.")
@click.option("--force", is_flag=True, help="Replace an existing --out file (never a registry).")
@click.option("--key", "key_file", type=click.Path(dir_okay=False), help=KEY_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the statement as JSON.")
@pass_session
def attest(session: Session, artifact_id: str, out: str, force: bool, key_file: str | None, as_json: bool) -> None:
    """Write a signed in-toto attestation of ARTIFACT_ID's promotion (a DSSE envelope) to --out.

    Only a promoted, unrevoked bundle promoted under its workload's current
    contract is attested. The predicate schema is in docs/bundles.md.
    """
    from registry.app.attest import attestation, signed_attestation
    from registry.bundles.keys import load_signing_key

    output_path(out, force)
    key = load_signing_key(key_file)
    statement = attestation(session.open(), artifact_id)
    write_output(out, _lock_text(signed_attestation(statement, key)), force=force)
    if as_json:
        emit_json(statement)
    else:
        say(f"attested {artifact_id} (bundle {statement['subject'][0]['digest']['sha256']}, verdict "
            f"{statement['predicate']['verdict']['event_id']}) to {out}; signed by key {key.key_id}")


@click.command()
@click.argument("workload_id")
@click.option("--json", "as_json", is_flag=True, help="Print each new verdict as JSON.")
@pass_session
def rejudge(session: Session, workload_id: str, as_json: bool) -> None:
    """Judge again, from their recorded evidence, the artifacts of WORKLOAD_ID decided under an older contract.

    Each gets a new verdict under the current contract through the ordinary
    promote path; nothing is measured. Exit 0 (also when none needed it).
    """
    from registry.app.rejudge import rejudge_workload

    outcomes = rejudge_workload(session.open(), workload_id)
    if as_json:
        emit_json([{"artifact": name, "decision": o.verdict["decision"], "rule": o.verdict["rule"],
                    "contract_version": o.contract_version, "position": o.position} for name, o in outcomes])
    elif not outcomes:
        say(f"nothing to judge again: every final decision of {workload_id} was made under its current contract")
    else:
        table(f"{workload_id}: judged again under contract v{outcomes[0][1].contract_version}",
              ["artifact", "decision", "rule", "position"],
              ((name, o.verdict["decision"], o.verdict["rule"], o.position) for name, o in outcomes))


COMMANDS = [resolve, lock, keys, attest, rejudge]
