"""The egress classifier and destination checks, with literal addresses and a fake resolver (no DNS)."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest

from engine.directory.webhooks import (
    EgressDecision,
    check_destination,
    classify_address,
    destination_issues,
    destination_problem,
    literal_private_reason,
)
from engine.platform.errors import Issue


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("169.254.169.254", "link_local"),
        ("fe80::1", "link_local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "non_global"),
        ("::ffff:10.0.0.1", "ipv4_mapped_private"),
        ("::ffff:127.0.0.1", "ipv4_mapped_loopback"),
        ("64:ff9b::a00:1", "nat64_private"),
        ("2002:c0a8:0101::1", "6to4_private"),
    ],
)
def test_non_public_addresses_are_named(address: str, reason: str) -> None:
    assert classify_address(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert classify_address(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    "host", ["localhost", "LOCALHOST.", "api.localhost", "127.1", "0x7f.0.0.1", "2130706433", "[::1]"]
)
def test_hosts_private_on_their_face(host: str) -> None:
    assert literal_private_reason(host) == "loopback"


def test_names_are_not_judged_without_dns() -> None:
    assert literal_private_reason("hooks.example.com") is None
    assert literal_private_reason("cafe.de") is None


def fake_resolver(*answers: str) -> Any:
    calls: list[str] = []

    def resolve(host: str, port: int, family: int = 0, type: int = 0) -> list[tuple[Any, ...]]:
        calls.append(host)
        if not answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in answers
        ]

    resolve.calls = calls  # type: ignore[attr-defined]
    return resolve


def test_check_destination_resolves_and_judges_every_address() -> None:
    public = check_destination("https://hooks.example.com/x", False, False, resolve=fake_resolver("93.184.216.34"))
    assert public.permitted and public.addresses == ["93.184.216.34"]

    mixed = check_destination(
        "https://hooks.example.com/x", False, False, resolve=fake_resolver("93.184.216.34", "10.0.0.7")
    )
    assert not mixed.permitted and mixed.code == "egress_denied" and "10.0.0.7" in (mixed.reason or "")


def test_private_needs_both_the_subscription_flag_and_the_operator_setting() -> None:
    resolve = fake_resolver("192.168.0.10")
    url = "http://intranet.example/hook"
    assert check_destination(url, False, False, resolve=resolve).code == "egress_denied"
    assert check_destination(url, True, False, resolve=resolve).code == "egress_denied"
    assert check_destination(url, False, True, resolve=resolve).code == "egress_denied"
    both = check_destination(url, True, True, resolve=resolve)
    assert both.permitted and both.addresses == ["192.168.0.10"]


def test_literal_addresses_are_not_resolved() -> None:
    resolve = fake_resolver()
    decision = check_destination("http://[::ffff:169.254.169.254]/latest", False, False, resolve=resolve)
    assert decision.code == "egress_denied" and resolve.calls == []


def test_unresolvable_and_malformed_destinations() -> None:
    assert check_destination("https://nowhere.invalid/", False, False, resolve=fake_resolver()).code == "network_error"
    assert check_destination("file:///etc/passwd", True, True).code == "invalid_destination"


@pytest.mark.parametrize(
    "url",
    [
        "",
        "hooks.example.com/x",
        "ftp://hooks.example.com/",
        "https://user:pw@hooks.example.com/",
        "https://hooks example.com/",
        "https://hooks.example.com:99999/",
        "https://-bad-.example.com/",
        "https:///path-only",
        "https://x.example.com/" + "a" * 2000,
    ],
)
def test_malformed_urls(url: str) -> None:
    assert destination_problem(url) is not None


def test_creation_checks_literal_private_hosts_only() -> None:
    assert destination_issues("/destination", "https://hooks.example.com/", False) == []
    [issue] = destination_issues("/destination", "http://127.0.0.1:9000/", False)
    assert (issue.path, issue.code) == ("/destination", "egress_denied")
    assert destination_issues("/destination", "http://127.0.0.1:9000/", True) == []


def test_a_name_is_resolved_for_every_family_at_the_schemes_port() -> None:
    asked: list[tuple[Any, ...]] = []

    def resolve(*args: Any) -> list[tuple[Any, ...]]:
        asked.append(args)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", args[1]))]

    check_destination("https://hooks.example.com/x", False, False, resolve=resolve)
    check_destination("http://hooks.example.com/x", False, False, resolve=resolve)
    check_destination("https://hooks.example.com:8443/x", False, False, resolve=resolve)
    assert asked == [
        ("hooks.example.com", 443, socket.AF_UNSPEC, socket.SOCK_STREAM),
        ("hooks.example.com", 80, socket.AF_UNSPEC, socket.SOCK_STREAM),
        ("hooks.example.com", 8443, socket.AF_UNSPEC, socket.SOCK_STREAM),
    ]


def test_an_answers_scope_is_left_off_the_address_to_connect_to() -> None:
    def resolve(*args: Any) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("fe80::1%eth0", args[1], 0, 2))]

    denied = check_destination("http://printer.example/", False, False, resolve=resolve)
    assert denied.code == "egress_denied"
    assert (denied.reason or "").startswith("fe80::1 is a link local address")
    allowed = check_destination("http://printer.example/", True, True, resolve=resolve)
    assert allowed.permitted and allowed.addresses == ["fe80::1"]


def test_a_name_that_resolves_to_nothing_is_a_network_error() -> None:
    decision = check_destination("https://hooks.example.com/", True, True, resolve=lambda *args: [])
    assert decision == EgressDecision(False, "network_error", "The host name has no address.")


def test_each_problem_of_a_url_has_its_own_message() -> None:
    assert destination_problem("https://hooks.example.com/") is None
    assert destination_problem("https://hooks.example.com:0/") == "must not use port 0"
    assert destination_problem("https://hooks.example.com./") is None
    assert destination_problem("ftp://hooks.example.com/") == "must be an absolute http:// or https:// URL"


def test_creation_refuses_a_malformed_url_before_judging_its_host() -> None:
    assert destination_issues("/destination", "ftp://127.0.0.1/", True) == [
        Issue("/destination", "invalid_url", "must be an absolute http:// or https:// URL")
    ]
    assert destination_issues("/destination", "not-a-url", False) == [
        Issue("/destination", "invalid_url", "must be an absolute http:// or https:// URL")
    ]
