"""Webhooks against a real receiver on 127.0.0.1: signed deliveries of a promotion and an alarm, refused replays,
a receiver that is down and then up, every attempt recorded, the secret never in the log (docs/hooks.md).

The receiver is an HTTP server in a thread of the test's process that checks each delivery with the helper the
registry ships (registry.formats.webhooks.verify_delivery) and answers as a receiver would: 2xx for a delivery
it accepts, 401 for one it refuses. One test starts `registry serve` (a process of its own) to show that a
running server delivers by itself: a few seconds.
"""
from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from registry.app import open_registry
from registry.app.hooks import RETRY_DELAYS_S, deliver, read_hook
from registry.formats.webhooks import (ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, AlreadyReceived,
                                       DeliveryRefused, ReplayGuard, body_bytes, signed_headers, verify_delivery)
from serve_helpers import ServerProcess
from ship_helpers import declare_monitored, make_bundle, measure_and_promote, register, remeasure
from store_helpers import opened
from limits import HANG_GUARD_S


class Receiver:
    """A webhook receiver on a free loopback port: verifies each delivery, keeps the accepted ones.

    Its port is bound when it is made and held until it is closed, but listened on only inside `with`: until
    then (a receiver that is down) a connection to it is refused at once, and no other process can take the port
    between the receiver being down and up (a port freed and bound again could be)."""

    def __init__(self, secret: str, forced: int | None = None):
        self.secret, self.accepted, self.refused, self.guard = secret, [], [], ReplayGuard()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server hook
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if forced is not None:  # a receiver that answers this whatever it gets, with a large body
                    self.send_response(forced)
                    self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                    self.end_headers()
                    try:
                        self.wfile.write(b"x" * (1 << 20))
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # the registry read the status line and hung up, as it should
                    return
                try:
                    delivery = verify_delivery(receiver.secret, dict(self.headers.items()), body,
                                               guard=receiver.guard)
                except AlreadyReceived as exc:
                    receiver.refused.append(str(exc))
                    self.send_response(200)  # a retry of one already handled: acknowledged, not acted on
                except DeliveryRefused as exc:
                    receiver.refused.append(str(exc))
                    self.send_response(401)
                else:
                    receiver.accepted.append((delivery, dict(self.headers.items()), body))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *_args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
        self.server.server_bind()
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/registry-hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "Receiver":
        self.server.server_activate()  # listen
        self.thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.server.shutdown()
        self.close()

    def close(self) -> None:
        self.server.server_close()


@pytest.fixture
def hooked(registry_cli):
    """A monitored workload, a hook secret, and the CLI."""
    declare_monitored(registry_cli)
    secret_file = registry_cli.tmp / "hook.secret"
    created = registry_cli("hook", "secret", str(secret_file))
    assert created.exit_code == 0, created.output
    registry_cli.secret_file = secret_file
    registry_cli.secret = secret_file.read_text().strip()
    return registry_cli


def add(cli, url: str, *events: str) -> str:
    result = cli("hook", "add", url, "--events", ",".join(events), "--secret-file", str(cli.secret_file), "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["hook"]


def promote_fast(cli) -> None:
    assert register(cli, "fast", make_bundle(cli.tmp / "bundles", "fast")).exit_code == 0
    assert measure_and_promote(cli, "fast", 1.5) == "promoted"


def regress_fast(cli) -> None:
    for i in range(5):  # 10 pairs below the threshold: the fewest that alarm at alpha 0.001
        remeasure(cli, "fast", 0.99, f"b{i}")


def log_text(url: str) -> str:
    with open_registry(url) as registry:
        return "\n".join(json.dumps(event.to_dict()) for event in registry.store.iter_all())


def test_a_promotion_and_an_alarm_are_delivered_signed_and_a_replay_is_refused(hooked):
    with Receiver(hooked.secret) as receiver:
        hook = add(hooked, receiver.url, "promotion", "alarm")
        promote_fast(hooked)
        regress_fast(hooked)
        delivered = hooked("hook", "deliver", "--json")
        assert delivered.exit_code == 0, delivered.output
        attempts = json.loads(delivered.stdout)
        assert [(a["event"], a["outcome"], a["status"]) for a in attempts] == [("promotion", "delivered", 204),
                                                                           ("alarm", "delivered", 204)]
        (promotion, headers, body), (alarm, _, _) = receiver.accepted
        assert promotion.event == "promotion" and promotion.document["decision"] == "promoted"
        assert promotion.document["artifact"] == "fast" and promotion.document["hook"] == hook
        assert alarm.event == "alarm" and alarm.document["pairs"] == 10 and "regression detected" in alarm.document["text"]
        assert promotion.document["log"]["type"] == "VerdictRendered"
        assert headers[SIGNATURE_HEADER].startswith("v1=") and headers[ID_HEADER] == promotion.id

        # The same request sent again: a replay inside the window is known by its id; answered 2xx, not acted on.
        import httpx

        again = httpx.post(receiver.url, content=body, headers=headers)
        assert again.status_code == 200 and len(receiver.accepted) == 2
        assert "already received" in receiver.refused[-1]
    # Captured and replayed later: the timestamp is outside the window, so a receiver refuses it by the timestamp.
    later = int(headers[TIMESTAMP_HEADER]) + 301
    with pytest.raises(DeliveryRefused, match="more than the 300 s allowed"):
        verify_delivery(hooked.secret, headers, body, now=later)
    # A new timestamp (or any other byte) without the secret breaks the signature.
    with pytest.raises(DeliveryRefused, match="no signature verifies"):
        verify_delivery(hooked.secret, {**headers, TIMESTAMP_HEADER: str(later)}, body, now=later)
    with pytest.raises(DeliveryRefused, match="no signature verifies"):
        verify_delivery(hooked.secret, headers, body.replace(b'"fast"', b'"slow"'), now=int(headers[TIMESTAMP_HEADER]))
    with pytest.raises(DeliveryRefused, match="no signature verifies"):
        verify_delivery("x" * 40, headers, body, now=int(headers[TIMESTAMP_HEADER]))
    # Nothing more is owed: a second pass delivers nothing; the secret is nowhere in the log.
    assert json.loads(hooked("hook", "deliver", "--json").stdout) == []
    assert hooked.secret not in log_text(hooked.url)


def test_a_receiver_that_is_down_and_then_up_gets_the_delivery_on_a_retry_and_each_attempt_is_recorded(hooked):
    receiver = Receiver(hooked.secret)  # bound, not yet listening: down
    try:
        hook = add(hooked, receiver.url, "promotion")
        promote_fast(hooked)  # the decision does not wait for, or hear of, the receiver
        registry = opened(hooked.url)
        clock = [time.time()]
        [first] = deliver(registry, now=lambda: clock[0])
        assert (first.outcome, first.attempt, first.status) == ("failed", 1, None) and "refused" in first.error.lower()
        assert first.next_attempt_after is not None
        assert deliver(registry, now=lambda: clock[0]) == []  # not due before its backoff
        with receiver:  # up, on the same port
            clock[0] += RETRY_DELAYS_S[0] + 1
            [second] = deliver(registry, now=lambda: clock[0])
            assert (second.outcome, second.attempt, second.status) == ("delivered", 2, 204)
            [(delivery, _, _)] = receiver.accepted
            assert delivery.id == first.delivery == second.delivery  # one delivery id across its attempts
    finally:
        receiver.close()
    state = read_hook(registry, hook)
    assert state.attempt_count == 2 and state.summary()["delivered"] == 1 and state.summary()["retrying"] == 0
    history = hooked("history", f"hook:{hook}")
    assert history.exit_code == 0 and "HookDeliveryAttempted" in history.output


def test_a_delivery_that_never_succeeds_is_given_up_after_the_last_delay(hooked):
    down = Receiver(hooked.secret)  # bound and never listening: every attempt is refused
    try:
        add(hooked, down.url, "decision")
        promote_fast(hooked)
        registry = opened(hooked.url)
        clock = [time.time()]
        outcomes = []
        for _ in range(4):
            outcomes += deliver(registry, now=lambda: clock[0], retry_delays=(1.0, 2.0))
            clock[0] += 10
    finally:
        down.close()
    assert [(a.attempt, a.outcome, a.next_attempt_after is None) for a in outcomes] == [
        (1, "failed", False), (2, "failed", False), (3, "failed", True)]
    listed = json.loads(hooked("hook", "list", "--json").stdout)
    assert (listed[0]["given_up"], listed[0]["attempts"]) == (1, 3)


def test_hooks_are_added_listed_and_removed_and_a_removed_hook_is_told_nothing(hooked):
    with Receiver(hooked.secret) as receiver:
        hook = add(hooked, receiver.url, "decision")
        listed = hooked("hook", "list")
        assert listed.exit_code == 0 and hook in listed.output and receiver.url in listed.output
        removed = hooked("hook", "remove", hook, "--reason", "channel archived")
        assert removed.exit_code == 0 and f"removed hook {hook}" in removed.output
        again = hooked("hook", "remove", hook, "--reason", "twice")
        assert again.exit_code == 1 and "was removed at position" in again.stderr
        promote_fast(hooked)
        assert json.loads(hooked("hook", "deliver", "--json").stdout) == [] and receiver.accepted == []
    assert json.loads(hooked("hook", "list", "--json").stdout) == []
    assert [h["hook"] for h in json.loads(hooked("hook", "list", "--all", "--json").stdout)] == [hook]


def test_what_a_hook_is_refused_for_is_one_line_and_nothing_is_written(hooked):
    loose = hooked.tmp / "loose.secret"
    loose.write_text("s" * 40)
    os.chmod(loose, 0o644)
    short = hooked.tmp / "short.secret"
    short.write_text("tooshort")
    os.chmod(short, 0o600)
    before = log_text(hooked.url)
    for args, said in (
            (("https://user:pw@example.org/h", "--events", "decision", "--secret-file", str(hooked.secret_file)),
             "holds credentials"),
            (("ftp://example.org/h", "--events", "decision", "--secret-file", str(hooked.secret_file)), "http://"),
            (("https://example.org/h", "--events", "promoted", "--secret-file", str(hooked.secret_file)),
             "choose from decision, promotion, alarm, revocation"),
            (("https://example.org/h", "--events", "decision", "--secret-file", str(loose)), "readable by others"),
            (("https://example.org/h", "--events", "decision", "--secret-file", str(short)), "at least 32"),
            (("https://example.org/h", "--events", "decision", "--secret-file", str(hooked.tmp / "none")),
             "registry hook secret FILE")):
        result = hooked("hook", "add", *args)
        assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1, result.output
        assert said in result.stderr, result.stderr
    assert log_text(hooked.url) == before
    existing = hooked("hook", "secret", str(hooked.secret_file))
    assert existing.exit_code == 1 and "never overwritten" in existing.stderr


def test_a_changed_secret_file_is_not_signed_with(hooked):
    with Receiver(hooked.secret) as receiver:
        add(hooked, receiver.url, "promotion")
        hooked.secret_file.write_text("t" * 48)
        promote_fast(hooked)
        [attempt] = json.loads(hooked("hook", "deliver", "--json").stdout)
        assert attempt["outcome"] == "failed" and "the secret changed since the hook was added" in attempt["error"]
        assert receiver.accepted == [] and receiver.refused == []  # nothing was sent


def test_a_running_server_delivers_by_itself(hooked):
    with Receiver(hooked.secret) as receiver:
        add(hooked, receiver.url, "promotion")
        with ServerProcess(hooked.url):
            promote_fast(hooked)  # appended by another process: the server sees it in the log
            deadline = time.monotonic() + HANG_GUARD_S
            while not receiver.accepted and time.monotonic() < deadline:
                time.sleep(0.2)
        [(delivery, _, _)] = receiver.accepted
        assert delivery.event == "promotion" and delivery.document["artifact"] == "fast"


def test_the_helper_signs_what_it_verifies():
    body = body_bytes({"format": "registry.webhook/1", "text": "x"})
    headers = signed_headers("k" * 32, "d-1", "decision", body, now=1_000_000)
    assert verify_delivery("k" * 32, headers, body, now=1_000_100).document["text"] == "x"
    lower = {key.lower(): value for key, value in headers.items()}  # header names are case-insensitive
    assert verify_delivery("k" * 32, lower, body, now=1_000_000).id == "d-1"
    rotated = {**headers, SIGNATURE_HEADER: "v1=00 " + headers[SIGNATURE_HEADER]}  # any one signature verifies
    assert verify_delivery("k" * 32, rotated, body, now=1_000_000).id == "d-1"
    for broken, said in (({**headers, TIMESTAMP_HEADER: "1e6"}, "not Unix seconds"),
                         ({k: v for k, v in headers.items() if k != ID_HEADER}, "no Registry-Webhook-Id")):
        with pytest.raises(DeliveryRefused, match=said):
            verify_delivery("k" * 32, broken, body, now=1_000_000)


@pytest.mark.parametrize("status", [500, 307])
def test_an_error_or_a_redirect_is_a_failed_attempt_and_its_body_is_never_read(hooked, status):
    with Receiver(hooked.secret, forced=status) as receiver:
        add(hooked, receiver.url, "promotion")
        promote_fast(hooked)
        [attempt] = json.loads(hooked("hook", "deliver", "--json").stdout)
    assert (attempt["outcome"], attempt["status"]) == ("failed", status) and attempt["next_attempt_after"]
    assert attempt["error"].startswith(f"answered {status}")


@settings(max_examples=200, deadline=None)
@example(body=b"0", delivery="d", stamp=0, where="timestamp", at=0)  # "00" is not the "0" that was signed
@given(body=st.binary(min_size=0, max_size=200), delivery=st.text(st.characters(min_codepoint=33, max_codepoint=126),
                                                                   min_size=1, max_size=40),
       stamp=st.integers(min_value=0, max_value=10**10), where=st.sampled_from(("id", "timestamp", "body")),
       at=st.integers(min_value=0, max_value=10**6))
def test_any_change_to_the_id_the_timestamp_or_the_body_breaks_the_signature(body, delivery, stamp, where, at):
    secret = "s" * 32
    headers = signed_headers(secret, delivery, "decision", body, now=stamp)
    if where == "body":
        if not body:
            body, changed = b"", b"x"
        else:
            index = at % len(body)
            changed = body[:index] + bytes([body[index] ^ 0x01]) + body[index + 1:]
        headers_after = headers
    else:
        changed = body
        name = ID_HEADER if where == "id" else TIMESTAMP_HEADER
        value = headers[name]
        headers_after = {**headers, name: value + "0" if where == "timestamp" else value + "x"}
    with pytest.raises(DeliveryRefused):
        verify_delivery(secret, headers_after, changed, now=int(headers_after[TIMESTAMP_HEADER]))
