"""Hosts on one machine: Linux network namespaces on a bridge, for tests of a multi-host deployment.

:class:`Network` makes a bridge with a private /24 (a free one of ``10.231.0.0/16``; the root
namespace gets ``.1`` on it) and one namespace per host, each joined to the bridge by a veth pair
whose host-side end :meth:`Network.cut` and :meth:`Network.heal` take down and up (a host cut
off from everything). Processes started with :meth:`Host.start` run in the host's namespace.
:meth:`Network.close` ends every process it started and removes every namespace, link and the
bridge it made — nothing else on the machine is touched.

The deployment's files are used as they are: :func:`render_env` fills ``deploy/cockpit.env.example``
for a host, :func:`unit_command` reads a systemd unit's ``ExecStart``, :func:`render_site` turns
``deploy/nginx/cockpit.conf`` into the proxy host's site.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from engine.platform.config import PROJECT_ROOT

DEPLOY = PROJECT_ROOT / "deploy"
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=30)


def why_no_namespaces() -> str | None:
    """Why hosts cannot be made here (None when they can): root, ``ip``, a namespace and a bridge."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing"
    probe = "cktp" + secrets.token_hex(3)
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    bridge = ip("link", "add", probe, "type", "bridge", check=False)
    if bridge.returncode != 0:
        return f"cannot make a bridge: {bridge.stderr.strip()}"
    ip("link", "del", probe, check=False)
    return None


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.231.0.0/16 that no route of the machine covers or overlaps."""
    routes = ip("-4", "route", "show", "table", "all").stdout
    taken: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for line in routes.splitlines():
        first = line.split()[0] if line.split() else ""
        if first in ("local", "broadcast", "unreachable", "blackhole", "multicast"):
            first = line.split()[1]
        try:
            taken.append(ipaddress.ip_network(first if first != "default" else "0.0.0.0/32", strict=False))
        except ValueError:
            continue
    candidates = list(ipaddress.IPv4Network("10.231.0.0/16").subnets(new_prefix=24))
    start = secrets.randbelow(len(candidates))
    for subnet in candidates[start:] + candidates[:start]:
        if not any(subnet.overlaps(t) for t in taken if t.prefixlen > 0):
            return subnet
    raise RuntimeError("no free /24 in 10.231.0.0/16")


@dataclass
class Host:
    """One namespace on the bridge: its name, address and the host-side end of its link."""

    network: Network
    role: str
    namespace: str
    address: str
    link: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(
        self, *command: str, check: bool = True, timeout: float = 120, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.namespace, *command],
            env=dict(env) if env is not None else None,
            cwd=PROJECT_ROOT,
            check=check,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(
        self, command: list[str], env: Mapping[str, str], log: Path, cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``command`` in this host's namespace, in a process group of its own."""
        log.parent.mkdir(parents=True, exist_ok=True)
        out = log.open("ab")
        process = subprocess.Popen(
            ["ip", "netns", "exec", self.namespace, *command],
            env=dict(env),
            cwd=cwd or PROJECT_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        self.processes.append(process)
        self.network.processes.append(process)
        return process


@dataclass
class Network:
    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    subnet: ipaddress.IPv4Network = field(default_factory=free_subnet)
    hosts: dict[str, Host] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    bridge: str = ""
    made_bridge: bool = False

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge (where the test, its browser and its receiver are)."""
        return str(self.subnet.network_address + 1)

    def open(self) -> Network:
        self.bridge = f"ckt{self.tag}br"
        ip("link", "add", self.bridge, "type", "bridge")
        self.made_bridge = True
        ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        return self

    def add(self, role: str, number: int) -> Host:
        """A host ``role`` at ``.number`` of the subnet."""
        namespace = f"ckt{self.tag}-{role}"
        link = f"ckt{self.tag}{number}"
        address = str(self.subnet.network_address + number)
        ip("netns", "add", namespace)
        host = Host(self, role, namespace, address, link)
        self.hosts[role] = host
        ip("link", "add", link, "type", "veth", "peer", "name", f"{link}p")
        ip("link", "set", f"{link}p", "netns", namespace)
        ip("link", "set", link, "master", self.bridge)
        ip("link", "set", link, "up")
        host.run("ip", "link", "set", "lo", "up")
        host.run("ip", "link", "set", f"{link}p", "name", "eth0")
        host.run("ip", "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        host.run("ip", "link", "set", "eth0", "up")
        return host

    def cut(self, host: Host) -> None:
        """Take the host's link down: nothing reaches it and nothing leaves it (no reset is sent)."""
        ip("link", "set", host.link, "down")

    def heal(self, host: Host) -> None:
        ip("link", "set", host.link, "up")

    def close(self) -> list[str]:
        """End every process started here, remove the namespaces, links and bridge. What failed, if anything."""
        problems: list[str] = []
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        deadline = time.monotonic() + 20
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
        for host in self.hosts.values():
            # Anything left in the namespace (a daemon that left its group) ends with it.
            pids = ip("netns", "pids", host.namespace, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            ip("link", "del", host.link, check=False)
            removed = ip("netns", "del", host.namespace, check=False)
            if removed.returncode != 0:
                problems.append(f"namespace {host.namespace}: {removed.stderr.strip()}")
        if self.made_bridge:
            removed = ip("link", "del", self.bridge, check=False)
            if removed.returncode != 0:
                problems.append(f"bridge {self.bridge}: {removed.stderr.strip()}")
        return problems


# --- The deployment's files -------------------------------------------------------------------------


def render_env(settings: Mapping[str, str], template: Path = DEPLOY / "cockpit.env.example") -> str:
    """``deploy/cockpit.env.example`` with ``settings`` filled in (a commented setting is uncommented).

    Every setting given must be one the template names: a test never invents a setting the
    operator's file does not show."""
    lines = template.read_text().splitlines()
    missing = set(settings)
    for index, line in enumerate(lines):
        match = re.match(r"^#?(COCKPIT_[A-Z_]+)=", line)
        if match and match.group(1) in settings:
            key = match.group(1)
            lines[index] = f"{key}={settings[key]}"
            missing.discard(key)
    if missing:
        raise AssertionError(f"{template.name} does not name {sorted(missing)}")
    return "\n".join(lines) + "\n"


def read_env(text: str) -> dict[str, str]:
    """An environment file as systemd's EnvironmentFile reads it (comments and blank lines skipped)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    return values


def unit_command(unit: str) -> list[str]:
    """The ``ExecStart`` of ``deploy/systemd/<unit>``, with the installed ``cockpit`` replaced by this
    checkout's (``python -m cockpit.cli``)."""
    text = (DEPLOY / "systemd" / unit).read_text()
    match = re.search(r"^ExecStart=(.+)$", text, re.MULTILINE)
    if match is None:
        raise AssertionError(f"{unit} has no ExecStart")
    program, *args = shlex.split(match.group(1))
    if not program.endswith("/cockpit"):
        raise AssertionError(f"{unit} starts {program}, not cockpit")
    return [sys.executable, "-m", "cockpit.cli", *args]


def render_site(
    *,
    web: list[str],
    server_name: str,
    certificate: Path,
    key: Path,
    template: Path = DEPLOY / "nginx" / "cockpit.conf",
) -> str:
    """``deploy/nginx/cockpit.conf`` for a proxy in front of ``web`` (``address:port`` each)."""
    text = template.read_text()

    def replace(pattern: str, replacement: str) -> None:
        nonlocal text
        text, count = re.subn(pattern, replacement, text, flags=re.MULTILINE)
        if count == 0:
            raise AssertionError(f"{template.name} has no line matching {pattern!r}")

    upstream = re.search(r"^(\s*)server 127\.0\.0\.1:8000( [^;]*)?;$", text, re.MULTILINE)
    if upstream is None:
        raise AssertionError(f"{template.name} has no upstream server line")
    indent, parameters = upstream.group(1), upstream.group(2) or ""
    lines = "\n".join(f"{indent}server {address}{parameters};" for address in web)
    text = text[: upstream.start()] + lines + text[upstream.end() :]
    replace(r"server_name cockpit\.example\.com;", f"server_name {server_name};")
    replace(r"ssl_certificate\s+\S+;", f"ssl_certificate {certificate};")
    replace(r"ssl_certificate_key\s+\S+;", f"ssl_certificate_key {key};")
    return text


def nginx_main_conf(folder: Path, site: Path) -> str:
    """The smallest main configuration around a site: everything nginx writes stays in ``folder``."""
    temp = folder / "temp"
    temp.mkdir(parents=True, exist_ok=True)
    temp.chmod(0o777)
    return (
        "worker_processes 1;\n"
        f"pid {folder / 'nginx.pid'};\n"
        f"error_log {folder / 'error.log'} warn;\n"
        "events { worker_connections 1024; }\n"
        "http {\n"
        f"  access_log {folder / 'access.log'};\n"
        f"  client_body_temp_path {temp / 'body'};\n"
        f"  proxy_temp_path {temp / 'proxy'};\n"
        f"  fastcgi_temp_path {temp / 'fastcgi'};\n"
        f"  uwsgi_temp_path {temp / 'uwsgi'};\n"
        f"  scgi_temp_path {temp / 'scgi'};\n"
        f"  include {site};\n"
        "}\n"
    )


# --- A throwaway CA (openssl) -------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    ca: Path
    certificate: Path
    key: Path
    spki_sha256: str  # base64, what Chromium's --ignore-certificate-errors-spki-list names


def throwaway_ca(folder: Path, address: str) -> Certificates:
    """A CA made with openssl for this test alone, and a server certificate for ``address`` it signs."""
    folder.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str, stdin: bytes | None = None) -> bytes:
        done = subprocess.run(["openssl", *args], input=stdin, check=True, capture_output=True, cwd=folder, timeout=60)
        return done.stdout

    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key")
    openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-sha256", "-days", "1", "-subj", "/CN=Cockpit topology test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-out", "ca.pem",
    )  # fmt: skip
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "server.key")
    openssl("req", "-new", "-key", "server.key", "-subj", f"/CN={address}", "-out", "server.csr")
    (folder / "server.ext").write_text(
        f"subjectAltName=IP:{address}\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
        "-sha256", "-extfile", "server.ext", "-out", "server.pem",
    )  # fmt: skip
    public = openssl("x509", "-in", "server.pem", "-pubkey", "-noout")
    der = openssl("pkey", "-pubin", "-outform", "der", stdin=public)
    import base64
    import hashlib

    spki = base64.b64encode(hashlib.sha256(der).digest()).decode()
    chain = folder / "fullchain.pem"
    chain.write_bytes((folder / "server.pem").read_bytes() + (folder / "ca.pem").read_bytes())
    return Certificates(folder / "ca.pem", chain, folder / "server.key", spki)


def chromium_trusting(certificates: Certificates, folder: Path, chromium: str) -> Path:
    """A launcher for ``chromium`` that accepts this server certificate (by its key) and no other
    unknown one: what ``COCKPIT_CHROMIUM`` names for the browser tests."""
    launcher = folder / "chromium-trusting-test-ca"
    launcher.write_text(
        "#!/bin/sh\n"
        f'exec {shlex.quote(chromium)} --ignore-certificate-errors-spki-list={certificates.spki_sha256} "$@"\n'
    )
    launcher.chmod(0o755)
    return launcher


# --- PostgreSQL in a host -------------------------------------------------------------------------------


@dataclass
class Postgres:
    """A PostgreSQL server of Debian's packages in ``host``, listening on the host's address."""

    host: Host
    folder: Path
    password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    user: str = "postgres"
    durable: bool = False  # fsync and synchronous commit as PostgreSQL's defaults (a benchmark's); off for tests

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def url(self) -> str:
        return f"postgresql://cockpit:{self.password}@{self.host.address}:5432/cockpit"

    def _as_postgres(self, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.host.run("runuser", "-u", self.user, "--", *command, timeout=timeout)

    def create(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.folder.chmod(0o755)
        password_file = self.folder / "password"
        password_file.write_text(self.password + "\n")
        shutil.chown(self.folder, self.user, self.user)
        shutil.chown(password_file, self.user, self.user)
        self._as_postgres(
            str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "cockpit", f"--pwfile={password_file}",
            "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C",
        )  # fmt: skip
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {self.host.network.subnet} scram-sha-256\n")
        self.start()
        self._as_postgres(str(PG_BIN / "createdb"), "-h", str(self.folder), "-U", "cockpit", "cockpit")

    def start(self) -> None:
        options = (
            f"-c listen_addresses={self.host.address} -c port=5432 -c unix_socket_directories={self.folder} "
            "-c max_connections=300"
        )
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "server.log"), "-o", options, "-w",
            "start",
        )  # fmt: skip

    def restart(self) -> float:
        """Stop (fast: sessions are ended) and start again; the seconds it took."""
        started = time.monotonic()
        self._as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "server.log"), "-m", "fast", "-w",
            "restart",
        )  # fmt: skip
        return time.monotonic() - started

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")


# --- A layout of hosts, and what runs on them ------------------------------------------------------------


@dataclass
class Layout:
    """The hosts of one deployment on a :class:`Network`: PostgreSQL, a proxy, web and worker hosts."""

    network: Network
    postgres: Postgres
    proxy: Host | None
    web: list[Host]
    workers: list[Host]


def add_hosts(network: Network, folder: Path, *, web: int, workers: int, proxy: bool, durable: bool = False) -> Layout:
    """PostgreSQL on ``db`` (.10), the proxy (.5), ``web1``… (.21…) and ``worker1``… (.31…); the server
    is made and started (its data under ``folder/postgres``; ``durable``: with fsync, as a benchmark needs)."""
    proxy_host = network.add("proxy", 5) if proxy else None
    db = network.add("db", 10)
    web_hosts = [network.add(f"web{n}", 20 + n) for n in range(1, web + 1)]
    worker_hosts = [network.add(f"worker{n}", 30 + n) for n in range(1, workers + 1)]
    postgres = Postgres(db, folder / "postgres", durable=durable)
    postgres.create()
    return Layout(network, postgres, proxy_host, web_hosts, worker_hosts)


def host_env(
    folder: Path, host: Host, postgres: Postgres, proxy: Host, secret_key: str, **settings: str
) -> dict[str, str]:
    """``deploy/cockpit.env.example`` for ``host`` (behind ``proxy``), written where /etc/cockpit/cockpit.env
    would be (``folder/<role>/cockpit.env``): the environment its units run with. ``settings`` are more
    of the template's settings to fill in."""
    home = folder / host.role / "home"
    home.mkdir(parents=True, exist_ok=True)
    rendered = render_env(
        {
            "COCKPIT_DATABASE_URL": postgres.url,
            "COCKPIT_HOME": str(home),
            "COCKPIT_SECRET_KEY": secret_key,
            "COCKPIT_HOST": host.address,
            "COCKPIT_PORT": "8000",
            "COCKPIT_TRUSTED_PROXIES": proxy.address,
            "COCKPIT_SECURE_COOKIES": "true",
            "COCKPIT_PUBLIC_URL": f"https://{proxy.address}",
            "COCKPIT_LOG_FORMAT": "json",
            "COCKPIT_METRICS_TOKEN": "metrics-" + secrets.token_hex(16),
        }
        | settings
    )
    (folder / host.role / "cockpit.env").write_text(rendered)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COCKPIT_")}
    return env | read_env(rendered)


def start_proxy(
    proxy: Host, folder: Path, web: list[str], certificates: Certificates, timeout: float = 60, ready: str = "/readyz"
) -> str:
    """nginx on ``proxy`` with ``deploy/nginx/cockpit.conf`` in front of ``web`` (``address:port`` each), its
    files under ``folder``; waits until ``ready`` answers 200 through it (``/readyz`` also waits for a
    worker's heartbeat). Its https base URL."""
    site = folder / "cockpit.conf"
    folder.mkdir(parents=True, exist_ok=True)
    site.write_text(
        render_site(web=web, server_name=proxy.address, certificate=certificates.certificate, key=certificates.key)
    )
    main_conf = folder / "nginx.conf"
    main_conf.write_text(nginx_main_conf(folder, site))
    error_log = str(folder / "error.log")
    checked = proxy.run("nginx", "-t", "-c", str(main_conf), "-e", error_log, check=False)
    if checked.returncode != 0:
        raise RuntimeError(f"nginx -t: {checked.stderr}")
    proxy.start(["nginx", "-c", str(main_conf), "-e", error_log, "-g", "daemon off;"], os.environ, folder / "nginx.log")
    base = f"https://{proxy.address}"
    verify = ssl.create_default_context(cafile=certificates.ca)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{base}{ready}", verify=verify, timeout=5).status_code == 200:
                return base
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the proxy did not answer {ready}: {(folder / 'error.log').read_text()[-2000:]}")
        time.sleep(0.2)
