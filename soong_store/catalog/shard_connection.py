"""The connection a shard move's copy (T1) runs on, kept from one batch to the next."""

from __future__ import annotations

from sqlalchemy import Connection, Engine

from soong_store.backends.base import Backend, shard_files

HOT_AS = "hot"
"""The alias of the main database on a shard's own connection."""


class ShardConnection:
    """T1's connection on the shard being filled, kept from one batch to the next.

    Opening one (an engine, the connection, the main file attached, the shard's schema read)
    cost most of a batch. It holds no transaction between batches, so no lock; it is closed
    when the batch goes to another file, when its shard is full, after any failed batch, and
    with the writer's maintenance. Used by the writer's thread only.
    """

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._file: str | None = None
        self._engine: Engine | None = None
        self._connection: Connection | None = None

    @property
    def file(self) -> str | None:
        """The shard the kept connection is open on (``None``: none is open)."""
        return self._file if self._connection is not None else None

    def to(self, file: str) -> Connection:
        """A connection whose main database is shard ``file``, the main file attached as ``hot``."""
        if self._connection is not None and self._file == file:
            return self._connection
        self.close()
        files = shard_files(self._backend)
        assert files is not None  # only a backend that places pairs moves them
        engine = files.file_engine(file, HOT_AS)
        try:
            self._connection = engine.connect()
        except BaseException:
            engine.dispose()
            raise
        self._engine, self._file = engine, file
        return self._connection

    def close(self) -> None:
        """Close the kept connection and its engine, if open (idempotent)."""
        connection, engine = self._connection, self._engine
        self._connection = self._engine = self._file = None
        try:
            if connection is not None:
                connection.close()
        finally:
            if engine is not None:
                engine.dispose()
