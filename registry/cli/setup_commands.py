"""Commands that declare what is being decided about: workloads, frame sets, artifacts."""
from __future__ import annotations

from pathlib import Path

import click

from registry.formats.kinds import ARTIFACT_KINDS
from registry.formats.errors import UserError

from .session import Session, pass_session
from .output import emit_json, say
from .params import Integer, name_value, seed_value


@click.group()
def workload() -> None:
    """Workload contracts (YAML manifests)."""


@workload.command("declare")
@click.argument("manifest", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def workload_declare(session: Session, manifest: str, as_json: bool) -> None:
    """Declare a workload contract from MANIFEST; new content appends a new version.

    Example:

    \b
      registry workload declare wan.yaml
    """
    from registry.app.workloads import declare_workload
    from registry.contracts import load_manifest

    from registry.app.rejudge import must_rejudge, speed_terms_change

    contract = load_manifest(manifest)
    registry = session.open()
    declared = declare_workload(registry, contract)
    stale = must_rejudge(registry, contract.workload)
    result = {"workload": contract.workload, "contract_version": declared.version,
              "contract_hash": declared.content_hash, "appended": declared.appended,
              "must_rejudge": [entry["artifact"] for entry in stale],
              "speed_records": speed_terms_change(registry, contract.workload) if declared.appended else None}
    if as_json:
        emit_json(result)
    else:
        state = "declared" if declared.appended else "unchanged"
        say(f"workload {contract.workload} {state}: contract version {declared.version} ({declared.content_hash[:12]})")
        if stale:
            say(f"  decided under an older contract, so they do not ship until judged again "
                f"(`registry rejudge {contract.workload}`): "
                + ", ".join(f"{e['artifact']} ({e['decision']} under v{e['contract_version']})" for e in stale))
        moved = result["speed_records"]
        if moved and moved["records"]:
            rule = ("pairs recorded before this version are still read under the strictest terms in force since "
                    "they were recorded; only new pairs count under the looser ones") if "loosened" in moved["change"] \
                else "every pair is read again under them"
            say(f"  speed terms {moved['change']} (gate {moved['gate'][0]} -> {moved['gate'][1]}, alpha "
                f"{moved['alpha'][0]} -> {moved['alpha'][1]}): {rule}; speed records affected: "
                + ", ".join(f"{r['payload_sha256'][:12]} ({r['pairs']} pairs; {', '.join(r['artifacts'])})"
                            for r in moved["records"]))


@click.group()
def artifact() -> None:
    """Candidate artifacts."""


@artifact.command("register")
@click.argument("artifact_id", callback=name_value)
@click.option("--workload", "workload_id", required=True, help="The workload whose contract judges it.")
@click.option("--kind", required=True, type=click.Choice(ARTIFACT_KINDS), help="What sort of artifact it is.")
@click.option("--backend", help="The backend it claims to run (required for attention_backend).")
@click.option("--payload", type=click.Path(exists=True, dir_okay=False), help="File whose sha256 identifies its content.")
@click.option("--bundle", "bundle_dir", type=click.Path(), help="Bundle directory (docs/bundles.md), verified file by file.")
@click.option("--op", help="Built-in operation it implements (see `registry kernels`).")
@click.option("--entry", help="module:function of the kernel entry point.")
@click.option("--new-identity", is_flag=True,
              help="Register claims that change an existing artifact's identity (other bytes, backend, op or "
                   "entry): its evidence and decision stop counting. Without it such a registration is refused.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def artifact_register(session: Session, artifact_id: str, workload_id: str, kind: str, backend: str | None,
                      payload: str | None, bundle_dir: str | None, op: str | None, entry: str | None,
                      new_identity: bool, as_json: bool) -> None:
    """Register ARTIFACT_ID as a candidate for a workload.

    ARTIFACT_ID is a name: 1 to 128 characters, starting with a letter or
    digit, with no whitespace, control characters or ':' (docs/names.md).

    With --bundle its identity is the bundle manifest's digest; every file is
    checked against the manifest before anything is recorded. Only a bundle
    ships (resolve, lock): make one with `registry bundle create`.

    Registering an existing id with other claims (a different --payload or
    bundle, backend, op or entry) starts a new identity, whose evidence and
    verdict start from nothing; that needs --new-identity.

    Example:

    \b
      registry artifact register my-kernel --workload wan-t2v --kind fused_kernel --payload kernel.so
    """
    from registry.app.bundles import register_bundle
    from registry.app.workloads import register_artifact

    if bundle_dir is not None and payload is not None:
        raise UserError("--bundle and --payload both name the content; give one")
    if bundle_dir is not None:
        done = register_bundle(session.open(), artifact_id, bundle_dir, workload=workload_id, kind=kind,
                               backend=backend, op=op, entry=entry, new_identity=new_identity)
    else:
        done = register_artifact(session.open(), artifact_id, workload=workload_id, kind=kind, backend=backend,
                                 payload=payload, op=op, entry=entry, new_identity=new_identity)
    ships = None if bundle_dir is not None else NOT_SHIPPABLE
    if as_json:
        emit_json({"artifact": done.artifact, "payload_sha256": done.payload_sha256, "appended": done.appended,
                   "ships": bundle_dir is not None, "note": ships})
    else:
        state = "registered" if done.appended else "already registered with this content"
        say(f"artifact {artifact_id} {state} (payload {done.payload_sha256 or 'none'})")
        if ships:
            say(f"note: {ships}")


# What `artifact register` says of every artifact registered without a bundle.
NOT_SHIPPABLE = ("it can be judged but never ships (resolve and lock take bundles only): make a bundle with "
                 "`registry bundle create DIR --entry FILE:SYMBOL --replaces ... --compatibility ...` and register "
                 "it with --bundle DIR")


@click.group()
def bundle() -> None:
    """Bundles: the directory and manifest an artifact ships as (docs/bundles.md)."""


@bundle.command("create")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--entry", help="FILE:SYMBOL: the bundle's .py file the loader imports and the callable in it.")
@click.option("--replaces", help="The operation replaced: a JSON file holding the manifest's `replaces` object "
                                 "(fingerprint, inputs, outputs), or op:NAME for a built-in operation "
                                 "(`registry kernels`).")
@click.option("--compatibility", help="Where it may run: a JSON file holding the manifest's `compatibility` object "
                                      "(model, gpu_architectures, torch, cuda, triton, execution_modes, "
                                      "distributed_modes).")
@click.option("--force", is_flag=True, help="Replace an existing bundle.json.")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest and its digest as JSON.")
def bundle_create(directory: str, entry: str | None, replaces: str | None, compatibility: str | None, force: bool,
                  as_json: bool) -> None:
    """Write DIRECTORY/bundle.json declaring every file in DIRECTORY, checked as registration checks it.

    Every field of the manifest is required (docs/bundles.md, "The
    manifest"); a missing or malformed one is refused in one line naming it,
    nothing written. The digest printed is the bundle's identity: the
    payload_sha256 its evidence documents name.
    """
    from registry.app.bundles import create_bundle

    manifest = create_bundle(directory, entry=entry, replaces=replaces, compatibility=compatibility, force=force)
    if as_json:
        emit_json({"directory": directory, "digest": manifest.digest, "manifest": manifest.canonical()})
    else:
        say(f"bundle {directory} written: {len(manifest.files)} file(s), entry "
            f"{manifest.entry_file}:{manifest.entry_symbol}; digest {manifest.digest}")
        say(f"register it: registry artifact register ID --workload W --kind KIND --bundle {directory}")


@click.group()
def frames() -> None:
    """Reference frame sets (named, seeded, identified by the hash of their pixels)."""


@frames.command("register")
@click.argument("name", callback=name_value)
@click.argument("path", type=click.Path(exists=True))
@click.option("--seed", type=Integer(), required=True, callback=seed_value,
              help="The fixed seed the frames were generated with (0 to 2**64 - 1).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def frames_register(session: Session, name: str, path: str, seed: int, as_json: bool) -> None:
    """Register the frames at PATH (.npy, .npz or a directory of PNGs) as frame set NAME.

    NAME follows the naming rule of every id (docs/names.md).
    """
    from registry.app.frames import register_frames
    from registry.evidence.frames import load_frames

    payload, appended = register_frames(session.open(), name, load_frames(path), seed, source=str(Path(path).resolve()))
    if as_json:
        emit_json({**payload, "appended": appended})
    else:
        state = "registered" if appended else "already registered with these pixels"
        say(f"frame set {name} {state}: {payload['frames']} frames {payload['height']}x{payload['width']}, "
            f"sha256 {payload['sha256'][:12]}")


COMMANDS = [workload, artifact, frames, bundle]
