"""Prepared statements run on the driver cursor behave like SQLAlchemy's own execution."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    Table,
    Text,
    bindparam,
    create_engine,
    func,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.sql.elements import ClauseElement

from soong_store.backends.prepared import Prepared, Runner, takes_names
from soong_store.backends.sqlite.backend import make_engine

metadata = MetaData()
items = Table(
    "items",
    metadata,
    Column("item_id", Text, primary_key=True),
    Column("n", Integer, nullable=False),
    Column("note", Text),
)
BY_N = select(items).where(items.c.n >= bindparam("p_n")).order_by(items.c.n).limit(2)


@pytest.fixture
def engine(tmp_path: Path):
    engine = create_engine(f"sqlite:///{tmp_path / 'p.sqlite'}")
    metadata.create_all(engine)
    yield engine
    engine.dispose()


@pytest.mark.parametrize("paramstyle", ["qmark", "named"])
def test_positional_and_named_paramstyles_give_the_same_rows(engine, paramstyle: str):
    dialect = sqlite.dialect(paramstyle=paramstyle)
    insert = Prepared.compile(items.insert(), dialect)
    query = Prepared.compile(BY_N, dialect)
    assert (insert.order is None) == (paramstyle == "named")
    with engine.begin() as connection:
        db = Runner(connection)
        for n in range(5):
            db.execute(insert, {"item_id": f"i{n}", "n": n, "note": None})
        assert db.first(query, {"p_n": 2}) == {"item_id": "i2", "n": 2, "note": None}
        rows = db.execute(query, {"p_n": 1}).fetchall()
        assert [tuple(r) for r in rows] == [("i1", 1, None), ("i2", 2, None)]  # LIMIT 2 kept
        assert db.scalar(Prepared.compile(select(func.max(items.c.n)), dialect)) == 4
        assert db.first(query, {"p_n": 99}) is None
        assert db.scalar(query, {"p_n": 99}) is None
    with engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(items)).scalar() == 5


@pytest.mark.parametrize("paramstyle", ["qmark", "named"])
def test_a_lookup_reads_the_row_of_its_key_as_the_core_select_does(engine, paramstyle: str):
    dialect = sqlite.dialect(paramstyle=paramstyle)
    lookup = Prepared.lookup(items, "item_id", dialect)
    core = Prepared.compile(select(items).where(items.c.item_id == bindparam("item_id")), dialect)
    assert lookup.columns == core.columns == ("item_id", "n", "note")
    with engine.begin() as connection:
        db = Runner(connection)
        insert = Prepared.compile(items.insert(), dialect)
        for n in range(3):
            db.execute(insert, {"item_id": f"i{n}", "n": n, "note": f"note {n}"})
        for key in ("i0", "i2", "missing"):
            assert db.first(lookup, {"item_id": key}) == db.first(core, {"item_id": key})
        assert db.first(lookup, {"item_id": "i2"}) == {"item_id": "i2", "n": 2, "note": "note 2"}


DIALECTS = {
    "sqlite": sqlite.dialect(),
    "sqlite-named": sqlite.dialect(paramstyle="named"),
    "postgresql": postgresql.psycopg.dialect(),  # casts each value: Core's own statement
}
QUOTED = Table("Mixed Case", MetaData(schema="Other"), Column("Key", Text), Column("n", Integer))


def _as_core(statement: ClauseElement, dialect: Dialect) -> Prepared:
    """What Core compiles, in the parameter style the store's text takes for ``dialect``."""
    if takes_names(dialect):  # the text keeps its names: SQLite's driver reads them
        dialect = sqlite.dialect(paramstyle="named")
    return Prepared.compile(statement, dialect)


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=DIALECTS.keys())
@pytest.mark.parametrize("table", [items, QUOTED], ids=["plain", "quoted"])
def test_an_insert_is_what_core_compiles(dialect, table: Table):
    assert Prepared.insert(table, dialect) == _as_core(table.insert(), dialect)
    names = [column.name for column in table.c][:-1]  # a subset, the last column left out
    for rows in (1, 3):
        values = [{name: bindparam(f"{name}_{i}") for name in names} for i in range(rows)]
        core = _as_core(table.insert().values(values), dialect)
        assert Prepared.insert(table, dialect, names, rows) == core


def test_written_text_keeps_its_names_on_sqlite_only():
    sql = "SELECT n FROM items WHERE item_id = :item_id AND n < :cap"
    on_sqlite = Prepared.written(sql, sqlite.dialect(), ("n",), {"cap": 5})
    assert on_sqlite == Prepared(sql, None, {"cap": 5}, ("n",))
    on_postgres = Prepared.written(sql, postgresql.psycopg.dialect(), ("n",), {"cap": 5})
    assert on_postgres.sql.count("%(") == 2 and on_postgres.fixed == {"cap": 5}


def test_a_written_statement_runs_with_its_fixed_values(engine):
    insert = Prepared.insert(items, engine.dialect)
    query = Prepared.written(
        "SELECT item_id FROM items WHERE n < :cap AND note IS :note ORDER BY n",
        engine.dialect,
        ("item_id",),
        {"cap": 2},
    )
    with engine.begin() as connection:
        db = Runner(connection)
        for n in range(4):
            db.execute(insert, {"item_id": f"i{n}", "n": n, "note": None})
        assert [row[0] for row in db.execute(query, {"note": None})] == ["i0", "i1"]
        assert db.scalar(query, {"note": None, "cap": 1}) == "i0"  # the caller's value wins


def test_an_insert_of_several_rows_writes_each(engine):
    insert = Prepared.insert(items, engine.dialect, ["item_id", "n"], 2)
    with engine.begin() as connection:
        Runner(connection).execute(insert, {"item_id_0": "a", "n_0": 1, "item_id_1": "b", "n_1": 2})
    with engine.connect() as connection:
        rows = connection.execute(select(items).order_by(items.c.n)).all()
    assert [tuple(row) for row in rows] == [("a", 1, None), ("b", 2, None)]


def test_driver_errors_come_out_as_sqlalchemy_errors(engine):
    insert = Prepared.compile(items.insert(), engine.dialect)
    with engine.begin() as connection:
        db = Runner(connection)
        db.execute(insert, {"item_id": "a", "n": 1, "note": None})
        with pytest.raises(IntegrityError) as caught:
            db.execute(insert, {"item_id": "a", "n": 2, "note": None})
        assert "UNIQUE" in str(caught.value.orig)
        with pytest.raises(OperationalError):
            db.execute(Prepared("SELECT * FROM nowhere", (), {}, ()))


def test_a_missing_parameter_is_an_error_not_a_null(engine):
    insert = Prepared.compile(items.insert(), engine.dialect)
    with engine.begin() as connection, pytest.raises(KeyError):
        Runner(connection).execute(insert, {"item_id": "a", "n": 1})
    written = Prepared.written("SELECT :a + :b", engine.dialect, ("sum",))
    with engine.connect() as connection, pytest.raises(ProgrammingError, match=":b"):
        Runner(connection).scalar(written, {"a": 1})  # named on SQLite: the driver's own check


def test_first_and_scalar_leave_no_statement_running(tmp_path: Path):
    """A statement left on its first row can be reset under a later cursor by some drivers."""
    engine = make_engine(f"sqlite:///{tmp_path / 'r.sqlite'}", "write")  # the store's driver
    metadata.create_all(engine)
    insert = Prepared.compile(items.insert(), engine.dialect)
    every = Prepared.compile(select(items).order_by(items.c.n), engine.dialect)
    try:
        with engine.begin() as connection:
            db = Runner(connection)
            for n in range(3):
                db.execute(insert, {"item_id": f"i{n}", "n": n, "note": None})
            assert db.first(every) == {"item_id": "i0", "n": 0, "note": None}
            assert db.scalar(every) == "i0"
            # SQLite refuses to drop a table while a statement of the connection still runs.
            connection.exec_driver_sql("DROP TABLE items")
    finally:
        engine.dispose()
