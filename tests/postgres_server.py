"""A throwaway PostgreSQL server for tests, CI and benchmarks, and a fresh database per test.

The server is a cluster of the machine's own PostgreSQL binaries (``pg_config --bindir``, else
``initdb`` on ``PATH``) in a temporary folder: data, a Unix-socket folder and a log, listening on
a free loopback port and the socket, trusting local connections, with ``fsync``,
``synchronous_commit`` and ``full_page_writes`` off (nothing in it has to survive a power cut).
PostgreSQL refuses to run as root, so as root every server command runs as the ``postgres`` user
and the folder is given to it.

``provide()`` picks the server a test run uses: ``$SOONG_STORE_TEST_PG_URL`` when set; else a
server of its own from the binaries; else, where a Docker engine answers and ``testcontainers``
is installed, a PostgreSQL container; else it raises ``ServerUnavailable`` with one reason.

Run as a script (what ``.ci/postgres`` does): ``python -m tests.postgres_server start`` starts a
server and prints ``export`` lines for a shell to ``eval`` (the URL, and the folder that ``stop``
needs); ``python -m tests.postgres_server stop [FOLDER]`` stops it and removes its folder.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

URL_ENV = "SOONG_STORE_TEST_PG_URL"
ROOT_ENV = "SOONG_STORE_TEST_PG_ROOT"
NO_SERVER = "no PostgreSQL: set SOONG_STORE_TEST_PG_URL or install the server binaries"
SERVER_USER = "postgres"
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}
_STATE = "server.json"
_START_TRIES = 3


class ServerUnavailable(RuntimeError):
    """No PostgreSQL server can be reached or started here."""


def find_bindir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, if this machine can run them."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        with suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=30
            ).stdout.strip()
            candidates.append(Path(out))
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(Path(initdb).parent)
    for folder in candidates:
        if all(os.access(folder / tool, os.X_OK) for tool in ("initdb", "pg_ctl", "postgres")):
            return folder if _can_run_server() else None
    return None


def _can_run_server() -> bool:
    if os.geteuid() != 0:
        return True
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        return False
    return True


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", SERVER_USER, "--", *argv]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class PostgresServer:
    """One running throwaway cluster: its folder, port and binaries."""

    root: Path
    port: int
    bindir: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "socket"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    @property
    def url(self) -> str:
        """A TCP URL of the ``postgres`` database as the ``postgres`` superuser."""
        return f"postgresql+psycopg://{SERVER_USER}@127.0.0.1:{self.port}/postgres"

    @property
    def socket_url(self) -> str:
        """The same database through the Unix socket."""
        return (
            f"postgresql+psycopg://{SERVER_USER}@/postgres?host={self.socket_dir}&port={self.port}"
        )

    @classmethod
    def start(cls, bindir: Path | None = None) -> PostgresServer:
        """Create a cluster in a new temporary folder and start it; raise if it cannot start."""
        found = bindir or find_bindir()
        if found is None:
            raise ServerUnavailable(NO_SERVER)
        root = Path(tempfile.mkdtemp(prefix="soong-pg-"))
        try:
            (root / "socket").mkdir()
            if os.geteuid() == 0:
                user = pwd.getpwnam(SERVER_USER)
                for path in (root, root / "socket"):
                    os.chown(path, user.pw_uid, user.pw_gid)
            server = cls(root, 0, found)
            server._run(
                "initdb",
                *("-D", str(server.data), "-U", SERVER_USER, "-A", "trust"),
                *("-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"),
            )
            for attempt in range(_START_TRIES):
                server = cls(root, _free_port(), found)
                server._configure()
                try:
                    server._pg_ctl("start")
                    break
                except subprocess.CalledProcessError:
                    if attempt == _START_TRIES - 1:
                        raise
            (root / _STATE).write_text(json.dumps({"port": server.port, "bindir": str(found)}))
            return server
        except BaseException:
            if (root / "data" / "postmaster.pid").exists():
                with suppress(Exception):
                    cls(root, 0, found)._pg_ctl("stop", "-m", "immediate")
            shutil.rmtree(root, ignore_errors=True)
            raise

    @classmethod
    def attach(cls, root: Path) -> PostgresServer:
        """The server whose folder is ``root`` (started by ``start``, maybe in another process)."""
        state = json.loads((root / _STATE).read_text())
        return cls(root, int(state["port"]), Path(state["bindir"]))

    def restart(self) -> None:
        """Stop the server (fast shutdown: sessions are cut off) and start it again."""
        self._pg_ctl("restart", "-m", "fast")

    def crash_and_start(self) -> None:
        """Stop the server as a crash would (immediate: no checkpoint, recovery at start)."""
        self._pg_ctl("restart", "-m", "immediate")

    @contextmanager
    def stopped(self) -> Iterator[None]:
        """The server stopped (fast shutdown: its buffers written out) in the block; then started.

        With the server down, its files can be changed behind its back (damage for ``check``).
        """
        self._pg_ctl("stop", "-m", "fast")
        try:
            yield
        finally:
            self._pg_ctl("start")

    def stop(self) -> None:
        """Stop the server and remove its folder."""
        try:
            if (self.data / "postmaster.pid").exists():
                self._pg_ctl("stop", "-m", "fast")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _configure(self) -> None:
        settings = dict(SETTINGS, port=str(self.port))
        settings["unix_socket_directories"] = f"'{self.socket_dir}'"
        lines = "".join(f"{key} = {value}\n" for key, value in settings.items())
        # postgresql.auto.conf is read last, so these win over initdb's defaults; rewritten whole,
        # a retry with another port leaves no stale line behind.
        (self.data / "postgresql.auto.conf").write_text(lines)

    def _pg_ctl(self, action: str, *options: str) -> None:
        self._run(
            "pg_ctl",
            *("-D", str(self.data), "-l", str(self.log), "-w", "-t", "60"),
            *options,
            action,
        )

    def _run(self, tool: str, *args: str) -> None:
        argv = _as_server_user([str(self.bindir / tool), *args])
        done = subprocess.run(
            argv, cwd=self.root, capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise subprocess.CalledProcessError(
                done.returncode, argv, output=done.stdout, stderr=done.stderr + log
            )


@contextmanager
def _container() -> Iterator[str | None]:
    """A testcontainers PostgreSQL where a Docker engine answers; ``None`` elsewhere."""
    try:
        import docker  # type: ignore[import-not-found, import-untyped, unused-ignore]
        from testcontainers.postgres import (  # type: ignore[import-not-found, import-untyped, unused-ignore]
            PostgresContainer,
        )

        docker.from_env(timeout=10).ping()
    except Exception:
        yield None
        return
    with PostgresContainer("postgres:15", driver="psycopg") as container:
        yield container.get_connection_url()


@contextmanager
def provide() -> Iterator[str]:
    """The URL of a PostgreSQL server for this test run, stopped afterwards if started here."""
    given = os.environ.get(URL_ENV)
    if given:
        yield database_url(given)
        return
    bindir = find_bindir()
    if bindir is not None:
        server = PostgresServer.start(bindir)
        try:
            yield server.url
        finally:
            server.stop()
        return
    with _container() as url:
        if url is None:
            raise ServerUnavailable(NO_SERVER)
        yield url


def database_url(url: str, database: str | None = None) -> str:
    """``url`` with psycopg 3 as its driver when it names none, naming ``database`` if given."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


@contextmanager
def fresh_database(
    url: str, prefix: str = "soong_test", template: str | None = None
) -> Iterator[str]:
    """Create a database with a unique name on ``url``'s server; drop it afterwards.

    Empty, or a copy of the database ``template`` (see :func:`template_database`).
    """
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    name = f"{prefix}_{secrets.token_hex(6)}"
    copy = "" if template is None else f' TEMPLATE "{template}"'
    admin = create_engine(database_url(url), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"{copy}')
        try:
            yield database_url(url, name)
        finally:
            with admin.connect() as connection:
                connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


_TEMPLATES: dict[str, str] = {}
"""The template database made on each server URL by this process (see :func:`template_database`)."""


def template_database(url: str) -> str:
    """The name of a database on ``url``'s server to copy new test databases from, made once.

    It holds what every test database starts with: the ``amcheck`` extension (so ``check`` runs
    the server's own verification) and the store's schema at head (what opening a store on an
    empty database would create). ``CREATE DATABASE ... TEMPLATE`` copies it in one statement,
    where creating the extension and running the migrations took most of a test's set-up.
    :func:`drop_templates` removes it.
    """
    server = database_url(url)
    found = _TEMPLATES.get(server)
    if found is not None:
        return found
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from soong_store import upgrade

    name = f"soong_template_{secrets.token_hex(6)}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            made = database_url(server, name)
            engine = create_engine(made, poolclass=NullPool)
            try:
                with engine.begin() as connection:
                    connection.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS amcheck")
            finally:
                engine.dispose()
            upgrade(made)
        except BaseException:
            with admin.connect() as connection:
                connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            raise
    finally:
        admin.dispose()
    _TEMPLATES[server] = name
    return name


def drop_templates(url: str) -> None:
    """Drop the template database :func:`template_database` made on ``url``'s server, if any."""
    name = _TEMPLATES.pop(database_url(url), None)
    if name is None:
        return
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    admin = create_engine(database_url(url), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


def _main(argv: list[str]) -> int:
    if argv[:1] == ["start"] and len(argv) == 1:
        server = PostgresServer.start()
        print(f"export {URL_ENV}={shlex.quote(server.url)}")
        print(f"export {ROOT_ENV}={shlex.quote(str(server.root))}")
        return 0
    if argv[:1] == ["stop"] and len(argv) <= 2:
        root = argv[1] if len(argv) == 2 else os.environ.get(ROOT_ENV, "")
        if not root or not Path(root, _STATE).exists():
            print(f"postgres: nothing to stop ({ROOT_ENV} names no server folder)", file=sys.stderr)
            return 0
        PostgresServer.attach(Path(root)).stop()
        return 0
    print("usage: python -m tests.postgres_server start | stop [FOLDER]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
