"""The PostgreSQL test server itself: the fixtures, the helper module and ``.ci/postgres``."""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from tests import postgres_server
from tests.postgres_server import NO_SERVER, URL_ENV, PostgresServer, ServerUnavailable

REPO = Path(__file__).resolve().parents[3]
SEEN_DATABASES: list[str] = []


def scalar(url: str, sql: str) -> object:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return connection.execute(text(sql)).scalar()
    finally:
        engine.dispose()


def user_tables(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            )
            return [row[0] for row in rows]
    finally:
        engine.dispose()


def database_exists(admin_url: str, name: str) -> bool:
    sql = f"SELECT count(*) FROM pg_database WHERE datname = '{name}'"
    return scalar(admin_url, sql) == 1


def test_pg_url_is_a_postgresql_server_through_psycopg_3(pg_url: str) -> None:
    engine = create_engine(pg_url)
    try:
        assert engine.dialect.name == "postgresql"
        assert engine.dialect.driver == "psycopg"
        with engine.connect() as connection:
            version = connection.execute(text("select version()")).scalar()
        assert isinstance(version, str) and version.startswith("PostgreSQL ")
    finally:
        engine.dispose()


@pytest.mark.parametrize("turn", ["first", "second"])
def test_each_test_gets_an_empty_database_of_its_own(
    pg_url: str, pg_database_url: str, turn: str
) -> None:
    name = make_url(pg_database_url).database
    assert name is not None
    assert name != make_url(pg_url).database
    assert scalar(pg_database_url, "SELECT current_database()") == name
    assert user_tables(pg_database_url) == []
    assert name not in SEEN_DATABASES
    SEEN_DATABASES.append(name)
    engine = create_engine(pg_database_url)
    try:
        with engine.begin() as connection:
            connection.execute(text(f"CREATE TABLE left_by_{turn} (x integer)"))
    finally:
        engine.dispose()
    assert user_tables(pg_database_url) == [f"left_by_{turn}"]


def test_a_fresh_database_is_dropped_afterwards_even_with_a_connection_open(pg_url: str) -> None:
    with postgres_server.fresh_database(pg_url) as url:
        name = make_url(url).database
        assert name is not None and database_exists(pg_url, name)
        engine = create_engine(url)
        connection = engine.connect()
        connection.execute(text("CREATE TABLE t (x integer)"))
        connection.commit()
    try:
        assert not database_exists(pg_url, name)
    finally:
        connection.invalidate()
        engine.dispose()


def test_a_given_url_is_used_as_it_is_and_no_server_is_started(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> PostgresServer:
        raise AssertionError("a server was started although a URL was given")

    bare = pg_url.replace("postgresql+psycopg://", "postgresql://", 1)
    monkeypatch.setenv(URL_ENV, bare)
    monkeypatch.setattr(PostgresServer, "start", refuse)
    with postgres_server.provide() as url:
        assert url == pg_url
        assert scalar(url, "SELECT 1") == 1


def test_without_url_binaries_or_docker_engine_the_reason_is_the_one_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")
    assert postgres_server.find_bindir() is None
    with pytest.raises(ServerUnavailable) as caught, postgres_server.provide():
        pass
    assert str(caught.value) == NO_SERVER


def run_ci_script(*args: str) -> str:
    done = subprocess.run(
        ["bash", str(REPO / ".ci" / "postgres"), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_ci_script_starts_a_server_that_survives_a_restart_and_stops_it() -> None:
    if postgres_server.find_bindir() is None:
        pytest.skip(NO_SERVER)
    exported = dict(
        shlex.split(line)[1].split("=", 1) for line in run_ci_script("start").splitlines()
    )
    root = Path(exported[postgres_server.ROOT_ENV])
    url = exported[URL_ENV]
    try:
        server = PostgresServer.attach(root)
        assert url == server.url
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            assert scalar(url, f"SHOW {setting}") == "off"
        assert scalar(server.socket_url, "SELECT inet_server_addr() IS NULL") is True
        before = scalar(url, "SELECT pg_postmaster_start_time()")
        server.restart()
        assert scalar(url, "SELECT pg_postmaster_start_time()") != before
    finally:
        run_ci_script("stop", str(root))
    assert not root.exists()
    with pytest.raises(OperationalError):
        scalar(url, "SELECT 1")


def test_a_server_that_cannot_start_leaves_no_folder_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("initdb", "pg_ctl", "postgres"):
        (bindir / tool).write_text("#!/bin/sh\necho broken >&2\nexit 1\n")
        (bindir / tool).chmod(0o755)
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    with pytest.raises(subprocess.CalledProcessError):
        PostgresServer.start(bindir)
    assert list(temp.iterdir()) == []
