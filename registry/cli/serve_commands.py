"""`registry serve` and `registry token issue | revoke`: the HTTP API and the tokens that open it."""
from __future__ import annotations

import click

from .output import emit_json, say
from .params import Integer
from .session import Session, pass_session


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything but loopback needs --allow-remote (and a TLS proxy in front).")
@click.option("--port", type=Integer(0, 65535), default=8750, show_default=True,
              help="Port to listen on (0: any free port; the line printed on start names it).")
@click.option("--allow-remote", is_flag=True, help="Bind a non-loopback address (put a TLS-terminating proxy in front).")
@click.option("--key", "key_file", type=click.Path(dir_okay=False),
              help="Signing key for the locks the server exports (else $REGISTRY_SIGNING_KEY; without either, "
                   "the lock route refuses).")
@click.option("--workers", type=Integer(1, 64), default=1, show_default=True,
              help="Processes answering on the one socket (more than one uses more cores; docs/serve.md).")
@pass_session
def serve(session: Session, host: str, port: int, allow_remote: bool, key_file: str | None, workers: int) -> None:
    """Serve the registry over HTTP: the API of docs/serve.md and a live view at /, behind scoped tokens."""
    import os

    from registry.bundles.keys import SIGNING_KEY_ENV, load_signing_key
    from registry.serve.server import check_bind, serve as run

    check_bind(host, allow_remote)
    key = load_signing_key(key_file) if key_file or os.environ.get(SIGNING_KEY_ENV) else None
    registry = session.open()

    def ready(bound: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        say(f"registry serving {registry.engine.url.render_as_string(hide_password=True)} on http://{shown}:{bound}"
            f" (live view at http://{shown}:{bound}/#token=...)")
        click.get_text_stream("stdout").flush()

    run(registry, host, port, signing_key=key, ready=ready, workers=workers)


@click.group()
def token() -> None:
    """API tokens for `registry serve` (issued and revoked here, never through the server)."""


@token.command("issue")
@click.option("--principal", required=True, help="Who holds the token (a name; events appended with it name "
                                                  "principal/key-id as their actor).")
@click.option("--scope", "scopes", multiple=True, required=True,
              help="read, ingest:<workload glob>, decide or admin (repeat for several).")
@click.option("--workload", "workload_glob", help="The workloads ingest and decide reach, as a glob (e.g. 'wan-*').")
@click.option("--valid-for", "valid_days", type=Integer(), default=30, show_default=True,
              help="Days until the token expires (1 to 366).")
@click.option("--person", is_flag=True, help="The principal is a person: only a person's token may approve or revoke.")
@click.option("--json", "as_json", is_flag=True, help="Print the token and what it grants as JSON.")
@pass_session
def token_issue(session: Session, principal: str, scopes: tuple[str, ...], workload_glob: str | None,
                valid_days: int, person: bool, as_json: bool) -> None:
    """Issue a token and print it once: the log keeps its SHA-256, never the token."""
    from registry.app.tokens import issue_token

    secret, grant = issue_token(session.open(), principal, scopes, workload=workload_glob, valid_days=valid_days,
                                person=person)
    if as_json:
        emit_json({"token": secret, **grant.to_dict()})
        return
    say(secret)
    click.echo(f"token {grant.key_id} for {grant.actor}: {', '.join(grant.scopes)}"
               + (f" on workloads {grant.workload}" if grant.workload else "")
               + f", valid until {grant.not_after.isoformat()} (shown once; keep it secret)", err=True)


@token.command("revoke")
@click.argument("key_id")
@click.option("--reason", required=True, help="Why the token ends (recorded).")
@pass_session
def token_revoke(session: Session, key_id: str, reason: str) -> None:
    """Revoke the token KEY_ID: the server refuses it from the next request on."""
    from registry.app.tokens import revoke_token

    position = revoke_token(session.open(), key_id, reason)
    say(f"token {key_id} revoked at position {position}")


COMMANDS = [serve, token]
