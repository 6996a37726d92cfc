"""`registry hook add | list | remove | secret | deliver`: webhooks told of decisions, alarms and revocations."""
from __future__ import annotations

import click

from .output import emit_json, say, table
from .session import Session, pass_session


@click.group()
def hook() -> None:
    """Webhooks: signed deliveries of decisions, promotions, alarms and revocations (docs/hooks.md)."""


def _hook_line(summary: dict) -> str:
    return (f"hook {summary['hook']}: {summary['url']} for {', '.join(summary['events'])}; secret "
            f"{summary['secret_file']} (id {summary['secret_id']})")


@hook.command("add")
@click.argument("url")
@click.option("--events", "events", multiple=True, required=True,
              help="What to deliver: decision (every verdict and human decision), promotion, alarm (a monitor's "
                   "regression), revocation; comma-separated or repeated.")
@click.option("--secret-file", required=True, type=click.Path(dir_okay=False),
              help="The owner-only file holding the hook's signing secret (`registry hook secret FILE` writes one); "
                   "read when each delivery is signed, never recorded.")
@click.option("--json", "as_json", is_flag=True, help="Print the hook as JSON.")
@pass_session
def hook_add(session: Session, url: str, events: tuple[str, ...], secret_file: str, as_json: bool) -> None:
    """Add a webhook at URL: every event it wants, appended from now on, is POSTed there, signed.

    Deliveries are made by `registry serve` or `registry hook deliver`,
    never by the command that appended the decision, so a receiver that is
    down never holds up or fails a decision; failed attempts are retried
    with backoff and every attempt is recorded in the hook's stream.
    """
    from registry.app.hooks import add_hook

    added = add_hook(session.open(), url, events, secret_file).summary()
    if as_json:
        emit_json(added)
    else:
        say("added " + _hook_line(added))
        say("  deliveries are made by `registry serve` while it runs, or by `registry hook deliver`")


@hook.command("list")
@click.option("--all", "everything", is_flag=True, help="Include removed hooks.")
@click.option("--json", "as_json", is_flag=True, help="Print the hooks as JSON.")
@pass_session
def hook_list(session: Session, everything: bool, as_json: bool) -> None:
    """List the webhooks with what each was delivered, what is being retried and what was given up."""
    from registry.app.hooks import list_hooks

    hooks = [h.summary() for h in list_hooks(session.open(create=False), removed=everything)]
    if as_json:
        emit_json(hooks)
        return
    if not hooks:
        say("no hooks (`registry hook add URL --events ... --secret-file FILE` adds one)")
        return
    table("hooks", ["hook", "url", "events", "delivered", "retrying", "given up", "last attempt", "removed"],
          ((h["hook"], h["url"], ", ".join(h["events"]), h["delivered"], h["retrying"], h["given_up"],
            _last(h["last_attempt"]), (h["removed"] or {}).get("reason")) for h in hooks))


def _last(attempt: dict | None) -> str | None:
    if attempt is None:
        return None
    how = attempt["outcome"] + (f" ({attempt['status']})" if attempt["status"] else "")
    return f"{attempt['recorded_at'][:19]} {how}" + (f": {attempt['error']}" if attempt["error"] else "")


@hook.command("remove")
@click.argument("hook_id")
@click.option("--reason", required=True, help="Why the hook is removed (recorded).")
@click.option("--json", "as_json", is_flag=True, help="Print the removed hook as JSON.")
@pass_session
def hook_remove(session: Session, hook_id: str, reason: str, as_json: bool) -> None:
    """Remove webhook HOOK_ID: nothing more is delivered to it, retries included (its history stays)."""
    from registry.app.hooks import remove_hook

    removed = remove_hook(session.open(), hook_id, reason).summary()
    if as_json:
        emit_json(removed)
    else:
        say(f"removed hook {hook_id} ({removed['url']}) at position {removed['removed']['position']}")


@hook.command("secret")
@click.argument("secret_file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the file and the secret's id as JSON.")
def hook_secret(secret_file: str, as_json: bool) -> None:
    """Write a new signing secret (32 random bytes) to SECRET_FILE, owner-only, never over an existing file.

    Give the same file to the receiver, which checks each delivery with it
    (registry.formats.webhooks.verify_delivery).
    """
    from registry.app.hooks import create_secret

    identifier = create_secret(secret_file)
    if as_json:
        emit_json({"secret_file": secret_file, "secret_id": identifier})
    else:
        say(f"created webhook secret {secret_file} (mode 0600); secret id {identifier}")


@hook.command("deliver")
@click.option("--follow", is_flag=True, help="Keep delivering as events are appended, until interrupted.")
@click.option("--json", "as_json", is_flag=True, help="Print each attempt as JSON (one pass).")
@pass_session
def hook_deliver(session: Session, follow: bool, as_json: bool) -> None:
    """Deliver what the webhooks are owed now: retries that are due, then every new event each hook wants.

    One pass, each attempt recorded, unless --follow (what `registry serve`
    does in a thread of its own). Exit 0 whatever the receivers answered:
    a failed attempt is recorded and retried later, never an error here.
    """
    from registry.app.hooks import deliver

    registry = session.open()
    if follow:
        import threading

        from registry.app.hooks import Deliverer

        stopping = threading.Event()
        say("delivering webhooks as events are appended (Ctrl-C stops)")
        deliverer = Deliverer(registry, stopping).start()
        try:
            while deliverer.thread.is_alive():
                deliverer.thread.join(0.5)
        except KeyboardInterrupt:
            stopping.set()
            deliverer.thread.join()
        return
    made = [attempt.to_dict() for attempt in deliver(registry)]
    if as_json:
        emit_json(made)
        return
    if not made:
        say("nothing to deliver")
    for attempt in made:
        say(f"hook {attempt['hook']}: {attempt['event']} at position {attempt['position']} (delivery "
            f"{attempt['delivery']}, attempt {attempt['attempt']}): {attempt['outcome']}"
            + (f" ({attempt['status']})" if attempt["status"] else "")
            + (f": {attempt['error']}" if attempt["error"] else "")
            + (f"; next attempt after {attempt['next_attempt_after']}" if attempt["next_attempt_after"] else ""))


COMMANDS = [hook]
