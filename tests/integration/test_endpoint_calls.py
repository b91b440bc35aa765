"""``call_webhook`` steps end to end against a real HTTP receiver on 127.0.0.1.

The receiver verifies every request's Standard Webhooks signature with the ``standardwebhooks``
package. Tests call a local receiver, so they turn on both private-egress switches (the
subscription's ``allow_private_network`` and the operator's) unless the test is about them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from sqlalchemy import select, text

from engine.directory import organizations, webhooks
from engine.directory.models import AuditEvent, WebhookSubscription
from engine.platform.clock import FixedClock
from engine.platform.ids import new_id
from engine.runs import service as runs
from engine.runs import triggers
from engine.runs.endpoint_calls import complete_call
from engine.runs.runner import Runner
from testing.factories import TEST_SECRET_KEY, RealmHandle
from testing.receiver import Received, Receiver
from testing.runs import drain, load, transition_once
from testing.webhooks import call_runner, calling, run_one, subscribe
from testing.workflows import publish

CONTRACT = json.loads((Path(__file__).parents[2] / "engine/workflows/definitions/step-call.v1.json").read_text())


async def test_a_call_sends_the_contract_signed_and_completes_the_step(realm: RealmHandle, receiver: Receiver) -> None:
    hook = await subscribe(realm, receiver)
    wid, run_id = await run_one(realm, calling(hook, timeout_ms=5000))
    await drain(call_runner(realm))
    run, attempts = await load(realm, run_id)
    assert run.state == "succeeded", (run.error_category, run.last_error)
    [got] = receiver.wait_for(1)
    assert got.verified_by == [0], "the receiver could not verify the signature"
    body = got.json
    jsonschema.validate(body, CONTRACT)
    assert got.body == json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(), "not compact JSON"
    sync = attempts[0]
    assert body["action"] == "execute" and body["run_id"] == run_id and body["workflow_id"] == wid
    assert body["attempt"] == 1 and body["idempotency_key"] == f"{run_id}.sync"
    assert body["trigger"] == {"type": "manual"} and body["subject"]["id"] == run.subject_id
    assert got.header("Idempotency-Key") == f"{run_id}.sync"
    assert got.header("Webhook-Id") == sync.id and sync.id.startswith("wsa_")
    assert got.header("User-Agent") == "LifecycleCockpit-Workflows/1"
    assert got.header("Content-Type") == "application/json"
    assert got.header(
        "Webhook-Signature",
    ).startswith("v1,")  # type: ignore[union-attr]
    assert sync.state == "succeeded" and sync.result is not None and sync.result["status_code"] == 200
    # Without compensate the call cannot be undone: impossible, fixed when it succeeded.
    assert (sync.compensation_strategy, sync.compensation_state) == ("impossible", "impossible")


@pytest.mark.parametrize(
    ("status", "category", "permanent"),
    [
        (410, "gone", True),
        (400, "http_400", True),
        (404, "http_404", True),
        (422, "http_422", True),
        (408, "http_408", False),
        (429, "http_429", False),
        (500, "http_500", False),
        (503, "http_503", False),
        (302, "http_302", False),
    ],
)
async def test_answers_are_classified_per_the_contract(
    realm: RealmHandle, receiver: Receiver, status: int, category: str, permanent: bool
) -> None:
    receiver.respond = lambda _r: (status, 0.0, {"Location": "http://127.0.0.1:1/elsewhere"})
    hook = await subscribe(realm, receiver)
    _, run_id = await run_one(realm, calling(hook))
    clock = FixedClock(datetime.now(UTC))
    await drain(call_runner(realm, clock=clock))
    run, attempts = await load(realm, run_id)
    assert [(a.state, a.error_category) for a in attempts] == [("failed", category)]
    if permanent:
        assert run.state == "failed" and run.error_category == category
    else:
        assert run.state == "running" and run.due_at is not None and run.due_at > clock.now()
        receiver.respond = lambda _r: 204
        clock.advance(seconds=5)
        await drain(call_runner(realm, clock=clock))
        run, attempts = await load(realm, run_id)
        assert run.state == "succeeded"
        ids = [r.header("Webhook-Id") for r in receiver.requests()]
        assert len(set(ids)) == 2 and {r.header("Idempotency-Key") for r in receiver.requests()} == {f"{run_id}.sync"}
    assert len(receiver.requests()) in (1, 2)  # redirects are never followed


async def test_timeouts_and_network_errors_are_transient_and_exhaust(realm: RealmHandle, receiver: Receiver) -> None:
    receiver.respond = lambda _r: (200, 3.0)
    hook = await subscribe(realm, receiver)
    _, run_id = await run_one(realm, calling(hook, timeout_ms=200))
    clock = FixedClock(datetime.now(UTC))
    await drain(call_runner(realm, clock=clock))
    run, attempts = await load(realm, run_id)
    assert [(a.state, a.error_category) for a in attempts] == [("failed", "timeout")] and run.state == "running"
    # The endpoint goes away: network errors, until the attempts are exhausted.
    async with realm.sessions() as session, session.begin():
        row = await session.get(WebhookSubscription, hook)
        assert row is not None
        row.destination = "http://127.0.0.1:9/hook"  # discard port: nothing listens
    for _ in range(2):
        clock.advance(seconds=30)
        await drain(call_runner(realm, clock=clock))
    run, attempts = await load(realm, run_id)
    assert [a.error_category for a in attempts] == ["timeout", "network_error", "network_error"]
    assert run.state == "failed" and run.error_category == "retries_exhausted"


async def test_operator_timeout_caps_the_step_timeout(realm: RealmHandle, receiver: Receiver) -> None:
    receiver.respond = lambda _r: (200, 2.0)
    hook = await subscribe(realm, receiver)
    _, run_id = await run_one(realm, calling(hook, timeout_ms=30000))
    await drain(call_runner(realm, timeout_ms=300))
    _, attempts = await load(realm, run_id)
    assert attempts[0].error_category == "timeout"


@pytest.mark.parametrize(
    ("state", "category", "permanent"),
    [("paused", "subscription_paused", False), ("disabled", "subscription_disabled", True)],
)
async def test_subscription_states_decide_at_call_time(
    realm: RealmHandle, receiver: Receiver, state: str, category: str, permanent: bool
) -> None:
    hook = await subscribe(realm, receiver)
    _, run_id = await run_one(realm, calling(hook))
    async with realm.sessions() as session, session.begin():
        await webhooks.update_subscription(session, realm.actor, hook, state=state)
    await drain(call_runner(realm))
    run, attempts = await load(realm, run_id)
    assert [a.error_category for a in attempts] == [category]
    assert run.state == ("failed" if permanent else "running")
    assert receiver.requests() == []


async def test_a_deleted_subscription_or_an_unreadable_secret_fails_permanently(
    realm: RealmHandle, receiver: Receiver
) -> None:
    hook = await subscribe(realm, receiver)
    _, gone_run = await run_one(realm, calling(hook))
    async with realm.sessions() as session, session.begin():
        await webhooks.delete_subscription(session, realm.actor, hook)
    await drain(call_runner(realm))
    run, attempts = await load(realm, gone_run)
    assert (run.state, attempts[0].error_category) == ("failed", "subscription_missing")

    other = await subscribe(realm, receiver)
    _, secret_run = await run_one(realm, calling(other))
    await drain(call_runner(realm, operator_key="another-operator-key-0123456789abcdef"))
    run, attempts = await load(realm, secret_run)
    assert (run.state, attempts[0].error_category) == ("failed", "secret_unavailable")
    assert receiver.requests() == []


async def _raw_subscription(realm: RealmHandle, url: str, *, allow_private_network: bool) -> str:
    """A subscription whose name passed the save-time check (no DNS then) and resolves privately now."""
    from engine.platform import crypto

    hook = new_id("whk")
    async with realm.sessions() as session, session.begin():
        session.add(
            WebhookSubscription(
                id=hook,
                realm_id=realm.id,
                destination=url,
                secret_enc=crypto.encrypt(TEST_SECRET_KEY, webhooks.SECRET_PURPOSE, webhooks.new_secret()),
                allow_private_network=allow_private_network,
            )
        )
    return hook


@pytest.mark.parametrize(("flag", "operator"), [(False, False), (True, False), (False, True)])
async def test_a_name_resolving_to_loopback_is_refused_without_both_switches(
    realm: RealmHandle, receiver: Receiver, flag: bool, operator: bool
) -> None:
    hook = await _raw_subscription(realm, receiver.url_for("localhost"), allow_private_network=flag)
    _, run_id = await run_one(realm, calling(hook))
    await drain(call_runner(realm, allow_private=operator))
    run, attempts = await load(realm, run_id)
    assert [a.error_category for a in attempts] == ["egress_denied"]
    assert "loopback" in (attempts[0].error_message or "")
    assert run.state == "running"  # transient: retried under the step's policy
    assert receiver.requests() == []


async def test_with_both_switches_the_checked_address_is_called(realm: RealmHandle, receiver: Receiver) -> None:
    hook = await _raw_subscription(realm, receiver.url_for("localhost"), allow_private_network=True)
    _, run_id = await run_one(realm, calling(hook))
    await drain(call_runner(realm, allow_private=True))
    run, _ = await load(realm, run_id)
    assert run.state == "succeeded"
    [got] = receiver.requests()
    # The connection went to the address that was judged, under the name the subscription gave.
    assert got.header("Host") == f"localhost:{receiver.url.split(':')[2].split('/')[0]}"


async def test_a_rotated_secret_signs_beside_the_new_one_during_its_overlap(
    realm: RealmHandle, receiver: Receiver
) -> None:
    hook = await subscribe(realm, receiver)
    async with realm.sessions() as session, session.begin():
        _, new_secret = await webhooks.rotate_secret(session, realm.actor, TEST_SECRET_KEY, hook)
    receiver.secrets.append(new_secret)
    await run_one(realm, calling(hook))
    await drain(call_runner(realm))
    [got] = receiver.wait_for(1)
    signatures = (got.header("Webhook-Signature") or "").split(" ")
    assert len(signatures) == 2 and all(s.startswith("v1,") for s in signatures)
    assert got.verified_by == [0, 1]  # the previous secret alone verifies it, and so does the new one
    # After the overlap only the new secret signs.
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE webhook_subscriptions SET previous_secret_expires_at = now() - interval '1 s' WHERE id = :h"),
            {"h": hook},
        )
    await run_one(realm, calling(hook))
    await drain(call_runner(realm))
    later = receiver.wait_for(2)[1]
    assert later.verified_by == [1] and " " not in (later.header("Webhook-Signature") or "")


async def test_endpoint_compensation(realm: RealmHandle, receiver: Receiver) -> None:
    """TestWorkflowEndpointCompensation: a later permanent failure compensates the call."""

    def answer(r: Received) -> int:
        body = r.json
        if body["step_id"] == "reject":
            return 400
        if body["action"] == "compensate" and body["attempt"] == 1:
            return 503  # the first compensation try fails; the second succeeds
        return 200

    receiver.respond = answer
    hook = await subscribe(realm, receiver)
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [
            {"id": "sync", "type": "call_webhook", "subscription_id": hook, "compensate": True},
            {"id": "reject", "type": "call_webhook", "subscription_id": hook},
            {"id": "done", "type": "end"},
        ],
        "retry": {"max_attempts": 2, "backoff": "1s"},
    }
    _, run_id = await run_one(realm, definition)
    clock = FixedClock(datetime.now(UTC))
    await drain(call_runner(realm, clock=clock))
    clock.advance(seconds=60)
    await drain(call_runner(realm, clock=clock))
    run, attempts = await load(realm, run_id)
    assert run.state == "compensated", (run.state, run.error_category, run.last_error)
    assert run.error_category == "http_400"
    sync = attempts[0]
    assert (sync.compensation_strategy, sync.compensation_state, sync.compensation_attempts) == (
        "notify_endpoint",
        "done",
        2,
    )
    got = receiver.requests()
    assert all(r.verified_by == [0] for r in got)
    compensations = [r for r in got if r.json["action"] == "compensate"]
    assert [r.json["attempt"] for r in compensations] == [1, 2]
    assert {r.header("Webhook-Id") for r in compensations} == {sync.id + "c"}
    assert {r.header("Idempotency-Key") for r in compensations} == {f"{run_id}.sync.compensate"}
    for r in compensations:
        jsonschema.validate(r.json, CONTRACT)
        assert r.json["idempotency_key"] == f"{run_id}.sync.compensate" and r.json["step_id"] == "sync"
    async with realm.sessions() as session:
        types = (
            (
                await session.execute(
                    select(AuditEvent.type).where(AuditEvent.correlation_id == run_id).order_by(AuditEvent.id)
                )
            )  # type: ignore[arg-type]
            .scalars()
            .all()
        )
    assert "workflow.step.compensated" in types and types[-1] == "workflow.run.compensated"


async def test_a_started_attempt_found_by_the_next_claim_is_interrupted_and_retried(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """The record after the call never happened: the next holder counts it and calls again."""
    hook = await subscribe(realm, receiver)
    _, run_id = await run_one(realm, calling(hook))
    clock = FixedClock(datetime.now(UTC))
    first = call_runner(realm, clock=clock)
    # Prepare the call and commit the started attempt, but never send it or record it.
    async with realm.sessions() as session, session.begin():
        from engine.runs.runstore import leases

        claimed = await leases.claim_due_runs(
            session, first.worker_id, now=clock.now(), lease=timedelta(seconds=30), batch_size=10, tenant_share=10
        )
    assert [c.run_id for c in claimed] == [run_id]
    calls: list[Any] = []
    assert await transition_once(first, run_id, calls) == (True, False)
    assert len(calls) == 1
    run, attempts = await load(realm, run_id)
    assert [a.state for a in attempts] == ["started"]
    # The first worker dies; its lease runs out; another worker claims the run.
    clock.advance(seconds=31)
    second = Runner(realm.sessions, "worker-test-2-call", settings=first.settings, clock=clock)
    await drain(second)
    run, attempts = await load(realm, run_id)
    assert [(a.state, a.error_category) for a in attempts] == [("failed", "interrupted")]
    said = "The worker stopped between the endpoint call and its outcome; retried with the same Idempotency-Key."
    assert (attempts[0].error_message, run.last_error) == (said, said)
    assert run.state == "running"
    clock.advance(seconds=5)
    await drain(second)
    run, attempts = await load(realm, run_id)
    assert run.state == "succeeded"
    assert [(a.number, a.state) for a in attempts if a.step_id == "sync"] == [(1, "failed"), (2, "succeeded")]
    [got] = receiver.requests()
    assert got.header("Webhook-Id") == attempts[1].id and got.json["attempt"] == 2


async def test_the_next_judged_address_is_tried_only_when_a_connection_cannot_be_made(receiver: Receiver) -> None:
    import socket

    from engine.endpoints import transport

    def resolve(host: str, port: int, *_args: Any) -> list[tuple[Any, ...]]:
        # 127.0.0.2 is loopback too, but the receiver listens on 127.0.0.1 only: refused, then the next.
        assert host == "hooks.test"
        return [
            (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))
            for address in ("127.0.0.2", "127.0.0.1")
        ]

    url = receiver.url_for("hooks.test")
    async with transport.new_client() as client:
        outcome = await transport.post(
            client,
            url,
            b"{}",
            {"Content-Type": "application/json"},
            timeout_s=10.0,
            allow_private_network=True,
            operator_allows_private=True,
            resolve=resolve,
        )
    assert outcome.status_code == 200 and outcome.succeeded, outcome
    [got] = receiver.requests()
    assert got.header("Host") == url.split("/")[2]  # hooks.test and its port: the name, not the address


async def test_at_most_64_kib_of_an_answer_is_read() -> None:
    """An endpoint that answers 200 and then streams a body without end: the call reads at most
    64 KiB and is done, instead of waiting for a body that never ends (which would be a timeout)."""
    import socket
    import threading

    from engine.endpoints import transport

    sent = {"bytes": 0}
    stop = threading.Event()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)  # the request
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"x" * 8192
            frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
            try:
                while not stop.is_set() and sent["bytes"] < 64 * 1024 * 1024:
                    conn.sendall(frame)
                    sent["bytes"] += len(chunk)
            except OSError:
                pass  # the caller hung up after its 64 KiB: what this test expects

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
        async with transport.new_client() as client:
            outcome = await transport.post(
                client,
                url,
                b"{}",
                {"Content-Type": "application/json"},
                timeout_s=60.0,
                allow_private_network=True,
                operator_allows_private=True,
            )
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=30)
    assert outcome.status_code == 200 and outcome.category is None and outcome.succeeded, outcome
    assert sent["bytes"] < 64 * 1024 * 1024  # the caller stopped reading long before the endless body ran out


@pytest.mark.parametrize(
    ("body_bytes", "timeout_s", "category"),
    [(64 * 1024, 30.0, None), (64 * 1024 - 1, 2.0, "timeout")],  # the seed's 64 KiB, not the constant
)
async def test_an_answer_is_read_up_to_its_64th_kib_and_not_a_byte_further(
    body_bytes: int, timeout_s: float, category: str | None
) -> None:
    """An endpoint answers 200, announces a longer body, sends ``body_bytes`` of it and then holds
    the connection open. With 65,536 bytes sent the call has read all it may and is done, without
    waiting for the 65,537th; with 65,535 it still waits for the 65,536th, until its time is up."""
    import socket
    import threading

    from engine.endpoints import transport

    stop = threading.Event()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)  # the request
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1048576\r\n\r\n")
            left = body_bytes
            while left:
                piece = min(left, 5000)
                conn.sendall(b"x" * piece)
                left -= piece
            stop.wait(120)  # the rest of the announced body never comes

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        async with transport.new_client() as client:
            outcome = await transport.post(
                client,
                f"http://127.0.0.1:{listener.getsockname()[1]}/hook",
                b"{}",
                {"Content-Type": "application/json"},
                timeout_s=timeout_s,
                allow_private_network=True,
                operator_allows_private=True,
            )
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=30)
    assert (outcome.status_code, outcome.category) == ((200, None) if category is None else (None, category)), outcome


async def test_a_run_cancelled_while_its_call_is_in_flight_closes_the_started_attempt(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """Cancelling ends the wait for the call: the started attempt is closed as interrupted at that
    moment, only the run's own attempts, and the call's late outcome changes nothing."""
    from engine.runs.runstore import leases

    hook = await subscribe(realm, receiver)
    _, run_id = await run_one(realm, calling(hook))
    _, bystander_id = await run_one(realm, calling(hook))
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    worker = call_runner(realm, clock=clock)
    async with realm.sessions() as session, session.begin():
        claimed = await leases.claim_due_runs(
            session, worker.worker_id, now=clock.now(), lease=timedelta(seconds=30), batch_size=10, tenant_share=10
        )
    assert {c.run_id for c in claimed} == {run_id, bystander_id}
    calls: list[Any] = []
    assert await transition_once(worker, run_id, calls) == (True, False)
    assert await transition_once(worker, bystander_id, calls) == (True, False)
    async with realm.sessions() as session, session.begin():
        await runs.cancel_run(session, realm.actor, run_id, reason="stop")
    clock.advance(seconds=2)
    assert await transition_once(worker, run_id) == (True, False)  # compensating: the call is over
    run, attempts = await load(realm, run_id)
    assert run.state == "compensating"
    assert [(a.state, a.error_category, a.error_message, a.finished_at) for a in attempts] == [
        ("failed", "interrupted", "The worker stopped between the endpoint call and its outcome.", clock.now())
    ]
    _, others = await load(realm, bystander_id)
    assert [a.state for a in others] == ["started"]
    late = next(c for c in calls if c.run_id == run_id)
    await complete_call(worker, late)  # the answer arrives after all: nothing is recorded
    run, attempts = await load(realm, run_id)
    assert [(a.state, a.result) for a in attempts] == [("failed", None)]
    assert await transition_once(worker, run_id) == (True, True)
    run, _ = await load(realm, run_id)
    assert run.state == "cancelled"


async def test_each_reason_not_to_call_is_recorded_with_its_own_message(realm: RealmHandle, receiver: Receiver) -> None:
    """Checked when the attempt starts, before anything is sent: what the attempt and the run say.
    A paused subscription is retried later (the run goes on); every other reason ends the run."""
    states: list[str] = []

    async def refused(change: Any, operator_key: str = TEST_SECRET_KEY) -> tuple[str, str | None, str | None]:
        hook = await subscribe(realm, receiver)
        _, run_id = await run_one(realm, calling(hook))
        await change(hook)
        clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
        await drain(call_runner(realm, clock=clock, operator_key=operator_key))
        run, attempts = await load(realm, run_id)
        [attempt] = attempts
        assert (run.error_category, run.last_error) == (attempt.error_category, attempt.error_message)
        states.append(run.state)
        return hook, attempt.error_category, attempt.error_message

    async def to(state: str) -> Any:
        async def change(hook: str) -> None:
            async with realm.sessions() as session, session.begin():
                if state == "deleted":
                    await webhooks.delete_subscription(session, realm.actor, hook)
                else:
                    await webhooks.update_subscription(session, realm.actor, hook, state=state)

        return change

    async def nothing(_hook: str) -> None:
        return None

    hook, *why = await refused(await to("paused"))
    assert why == ["subscription_paused", f"The webhook subscription {hook} is paused; retried later."]
    hook, *why = await refused(await to("disabled"))
    assert why == ["subscription_disabled", f"The webhook subscription {hook} is disabled."]
    hook, *why = await refused(await to("deleted"))
    assert why == ["subscription_missing", f"The webhook subscription {hook} is gone."]
    hook, *why = await refused(nothing, operator_key="")
    assert why == ["secret_unavailable", "No operator key to read the subscription's secret."]
    hook, *why = await refused(nothing, operator_key="another-key-0123456789abcdef0123")
    assert why == ["secret_unavailable", "The subscription's secret cannot be read with the operator key."]
    assert states == ["running", "failed", "failed", "failed", "failed"]
    assert receiver.requests() == []


async def test_the_step_timeout_applies_when_below_the_operators(realm: RealmHandle, receiver: Receiver) -> None:
    receiver.respond = lambda _r: (200, 2.0)
    hook = await subscribe(realm, receiver)
    _, run_id = await run_one(realm, calling(hook, timeout_ms=300))
    await drain(call_runner(realm, timeout_ms=30_000))
    _, attempts = await load(realm, run_id)
    assert [(a.state, a.error_category) for a in attempts] == [("failed", "timeout")]


async def test_the_overlap_of_a_rotated_secret_is_judged_at_the_runs_clock_for_both_calls(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """A run advanced two days after a rotation: the call and its compensation carry only the new
    secret's signature, though the old one still signs by the wall clock."""
    receiver.respond = lambda r: 400 if r.json["step_id"] == "reject" else 200
    hook = await subscribe(realm, receiver)
    async with realm.sessions() as session, session.begin():
        _, new_secret = await webhooks.rotate_secret(session, realm.actor, TEST_SECRET_KEY, hook)
    receiver.secrets.append(new_secret)
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [
            {"id": "sync", "type": "call_webhook", "subscription_id": hook, "compensate": True},
            {"id": "reject", "type": "call_webhook", "subscription_id": hook},
        ],
    }
    _, run_id = await run_one(realm, definition)
    await drain(call_runner(realm, clock=FixedClock(datetime.now(UTC) + timedelta(days=2))))
    run, _ = await load(realm, run_id)
    assert run.state == "compensated", (run.state, run.error_category)
    got = receiver.requests()
    assert [(r.json["step_id"], r.json["action"]) for r in got] == [
        ("sync", "execute"),
        ("reject", "execute"),
        ("sync", "compensate"),
    ]
    # Signed at the run's time (so no receiver accepts the timestamp today): one signature each.
    assert [len((r.header("Webhook-Signature") or "").split(" ")) for r in got] == [1, 1, 1]


async def test_a_call_for_an_event_names_the_event_and_the_runs_organization(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """A run started by a membership event: its call names the run's organization, and the
    event's type and id as its trigger, so the endpoint can tell which change it answers."""
    hook = await subscribe(realm, receiver)
    org = await realm.organization("Eng")
    definition = calling(hook)
    definition["triggers"] = [{"type": "event", "event_types": ["organization.membership.added"]}]
    wid = await publish(realm, definition, name="On joining")
    subject = await realm.user()
    async with realm.sessions() as session, session.begin():
        await organizations.add_member(session, realm.actor, org.id, subject.id, authority=None)
    async with realm.sessions() as session, session.begin():
        assert await triggers.dispatch_outbox(session) >= 1
    await drain(call_runner(realm))
    [got] = receiver.wait_for(1)
    async with realm.sessions() as session:
        run_input, run_org, state = (
            await session.execute(
                text("SELECT input, organization_id, state FROM workflow_runs WHERE workflow_id = :w"), {"w": wid}
            )
        ).one()
    assert state == "succeeded"
    assert run_input["event_id"]
    assert (got.json["organization_id"], run_org) == (org.id, org.id)
    assert got.json["trigger"] == {
        "type": "event",
        "event_type": "organization.membership.added",
        "event_id": run_input["event_id"],
    }
