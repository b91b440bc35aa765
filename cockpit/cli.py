"""``cockpit``: run, migrate and administer the product.

Every failure an operator can cause (database unreachable, port taken, bad setting) ends with
one line on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from cockpit.admin_cli import AdminError, record_web_address, shown_url
from engine.platform.config import ConfigError, Settings, get_settings
from engine.platform.database import DatabaseUnavailable, libpq_conninfo, redact, resolve_database_url
from engine.platform.logs import configure_logging

log = logging.getLogger("cockpit.cli")


class CliError(Exception):
    """A failure to report in one line."""


def _database(settings: Settings) -> str:
    return resolve_database_url(settings)


def _check_port(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CliError(f"port {port} on {host} is already in use; set COCKPIT_PORT to another port") from exc
            raise CliError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc


def _migrate(url: str) -> None:
    from engine.platform.migrate import upgrade

    try:
        upgrade(url)
    except Exception as exc:
        raise CliError(f"migration failed: {str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__}") from exc


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    url = _database(settings)
    _migrate(url)
    print(f"database {redact(url)} is at the latest revision")
    return 0


def cmd_db_url(settings: Settings, args: argparse.Namespace) -> int:
    print(libpq_conninfo(_database(settings)))
    return 0


def server_config(app: Any, host: str, port: int, *, processes: int = 1) -> Any:
    """uvicorn's settings. It never reads proxy headers itself: the app believes
    X-Forwarded-For only from the proxies ``COCKPIT_TRUSTED_PROXIES`` names.

    With several ``processes`` the app is an import string of a factory each process calls."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
        proxy_headers=False,
        forwarded_allow_ips="",
        server_header=False,
        # Longer than a proxy keeps an idle connection to us (nginx: 60 s), so the proxy never
        # sends a request on a connection this side is closing at that moment.
        timeout_keep_alive=75,
        workers=processes,
        factory=processes > 1,
        # How long the supervisor waits for a process to answer its ping before it replaces it:
        # a process still importing on a loaded host must not count as hung.
        timeout_worker_healthcheck=60,
    )


def default_processes() -> int:
    """One web process per core this process may run on."""
    return max(1, len(os.sched_getaffinity(0)))


def web_process_app() -> Any:
    """The app of one of ``cockpit serve --processes N``'s processes, started by uvicorn's
    supervisor: settings from the environment, the database URL its parent resolved and
    migrated, counters in the folder its parent chose. It ends when its parent is gone."""
    from cockpit.app import create_app

    settings = get_settings()
    configure_logging(settings.log_level, settings.log_format)
    parent = os.getppid()
    _exit_with_parent(parent, lambda: os.kill(os.getpid(), signal.SIGTERM))
    app = create_app(settings, database_url=os.environ["COCKPIT_DATABASE_URL"])
    gc.collect()
    gc.freeze()
    return app


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from cockpit.app import create_app

    host, port = args.host or settings.host, args.port if args.port is not None else settings.port
    processes = args.processes if args.processes is not None else default_processes()
    if processes < 1:
        raise CliError(f"--processes must be at least 1, got {processes}")
    _check_port(host, port)
    url = _database(settings)
    if not args.no_migrate:
        _migrate(url)
    if processes > 1:
        return _serve_processes(settings, url, host, port, processes)
    app = create_app(settings, database_url=url)
    server = uvicorn.Server(server_config(app, host, port))
    parent = os.environ.get("COCKPIT_PARENT_PID")
    if parent:
        _exit_with_parent(int(parent), lambda: setattr(server, "should_exit", True))
    log.info("web server listening", extra={"url": f"http://{host}:{port}/"})
    record_web_address(settings, host, port)
    # Everything made so far (modules, the routes, the schema) lives as long as the process: moved
    # out of the collector's sight, it is not walked again by each full collection that a request's
    # rows set off (a diagnostics request of 1,500 rows did several, half its time).
    gc.collect()
    gc.freeze()
    server.run()
    return 0 if server.started or server.should_exit else 1


def _serve_processes(settings: Settings, url: str, host: str, port: int, processes: int) -> int:
    """Several web processes on one listening socket: uvicorn's supervisor binds it, starts
    ``processes`` children (each calls :func:`web_process_app`), replaces one that dies, and on
    SIGTERM or SIGINT stops them all gracefully."""
    import multiprocessing

    import uvicorn._subprocess
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    import cockpit.app  # noqa: F401  (imported once here, inherited by every forked process)

    # Forked, not spawned: a process starts with the code already imported (a spawned one
    # imports everything again, which took most of a minute per process on a loaded host). No
    # database connection or pool exists yet in this process, so none is shared.
    uvicorn._subprocess.spawn = multiprocessing.get_context("fork")  # type: ignore[assignment]  # fork context for spawn
    os.environ["COCKPIT_DATABASE_URL"] = url  # the children use the server this process resolved
    config = server_config("cockpit.cli:web_process_app", host, port, processes=processes)
    sock = config.bind_socket()
    sock.listen(2048)  # connections wait in the queue while the processes start, never refused
    supervisor = Multiprocess(config, sockets=[sock])
    parent = os.environ.get("COCKPIT_PARENT_PID")
    if parent:
        _exit_with_parent(int(parent), supervisor.should_exit.set)
    log.info("web server listening", extra={"url": f"http://{host}:{port}/", "processes": processes})
    record_web_address(settings, host, port)
    supervisor.run()
    # A process that could not start (a bad setting, the database gone) stops them all: say so.
    return 1 if any(p.exitcode == STARTUP_FAILURE for p in supervisor.processes) else 0


def _exit_with_parent(parent_pid: int, stop: Callable[[], None]) -> None:
    import threading

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1)
        stop()

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    from engine.worker.runtime import run_worker

    url = _database(settings)
    if not args.no_migrate:
        _migrate(url)
    parent = os.environ.get("COCKPIT_PARENT_PID")
    asyncio.run(run_worker(settings, url, parent_pid=int(parent) if parent else None))
    return 0


def cmd_up(settings: Settings, args: argparse.Namespace) -> int:
    host, port = settings.host, settings.port
    _check_port(host, port)
    url = _database(settings)
    _migrate(url)
    env = dict(os.environ)
    env["COCKPIT_DATABASE_URL"] = url
    env["COCKPIT_HOME"] = str(settings.home)
    env["COCKPIT_PARENT_PID"] = str(os.getpid())
    base = [sys.executable, "-m", "cockpit.cli"]
    children: list[subprocess.Popen[bytes]] = []
    stopping = False

    def stop_all(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop_all)
    signal.signal(signal.SIGTERM, stop_all)
    try:
        # Each child in its own session: Ctrl-C reaches only us, and we stop them once, in order.
        children.append(
            subprocess.Popen([*base, "serve", "--no-migrate", "--processes", "1"], env=env, start_new_session=True)
        )
        for _ in range(max(1, args.workers)):
            children.append(subprocess.Popen([*base, "worker", "--no-migrate"], env=env, start_new_session=True))
        # The demo realm is prepared while the children start (they do not need it to come up).
        from cockpit.bootstrap import first_start

        messages = first_start(settings, url)
        public = shown_url(host, port) + "/"
        print(f"Lifecycle Cockpit is starting at {public}", flush=True)
        for line in messages:
            print(line, flush=True)
        print("Press Ctrl-C to stop.", flush=True)
        exit_code = 0
        while not stopping:
            for child in children:
                code = child.poll()
                if code is not None:
                    print(f"cockpit: a child process stopped unexpectedly (exit {code}); stopping", file=sys.stderr)
                    stopping = True
                    exit_code = 1
            time.sleep(0.2)
        return exit_code
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 25
        for child in children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        print("Lifecycle Cockpit stopped.", flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cockpit",
        description="Lifecycle Cockpit: durable lifecycle workflows for identity administration.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", help="migrate, seed a demo realm on first start, and run web + worker")
    up.add_argument("--workers", type=int, default=1, help="worker processes to run (default 1)")
    up.set_defaults(func=cmd_up)

    serve = sub.add_parser("serve", help="run the web server (API and cockpit) only")
    serve.add_argument("--host", default=None, help="address to listen on (default COCKPIT_HOST)")
    serve.add_argument("--port", type=int, default=None, help="port to listen on (default COCKPIT_PORT)")
    serve.add_argument(
        "--processes",
        type=int,
        default=None,
        metavar="N",
        help="web processes sharing the port (default one per core)",
    )
    serve.add_argument("--no-migrate", action="store_true", help="do not apply migrations first")
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", help="run one worker process (runs workflows, periodic tasks)")
    worker.add_argument("--no-migrate", action="store_true", help="do not apply migrations first")
    worker.set_defaults(func=cmd_worker)

    migrate = sub.add_parser("migrate", help="apply database migrations (ours and the queue's); idempotent")
    migrate.set_defaults(func=cmd_migrate)

    db_url = sub.add_parser("db-url", help='print the database URL, for psql "$(cockpit db-url)"')
    db_url.set_defaults(func=cmd_db_url)

    from cockpit.admin_cli import add_admin_commands

    add_admin_commands(sub)
    from cockpit.remote_cli import add_remote_commands

    add_remote_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "remote", None) is not None:
        # Over HTTP to a running cockpit: no settings, no database, no logging set-up here.
        code: int = args.func(None, args)
        return code
    try:
        settings = get_settings()
        configure_logging(settings.log_level, settings.log_format)
        if args.func in (cmd_serve, cmd_worker, cmd_up):
            # Before anything imports prometheus-client: it picks multiprocess mode at import.
            from engine.platform.metrics_setup import use_multiprocess_dir

            use_multiprocess_dir(settings.metrics_dir, clear=args.func is cmd_up)
        code = args.func(settings, args)
        return code
    except (CliError, ConfigError, DatabaseUnavailable, AdminError) as exc:
        print(f"cockpit: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
