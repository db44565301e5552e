"""The backend seam: everything that differs between databases, behind one small contract.

A :class:`Backend` subclass serves one SQLAlchemy dialect, named by its ``name``, and registers
itself under that name when it is defined (the shape of Alembic's ``DefaultImpl`` registry).
:func:`open_backend` picks the class by ``url.get_backend_name()``; a URL no backend is
registered for is refused with one :class:`~soong_store.errors.StorageError`.

The contract has two halves:

- **A configured backend** (an instance, made from a URL, a durability and the store's
  :class:`~soong_store.backends.retry.RetryPolicy`): engines per role (``write``: the writer's one
  connection, whose transactions begin by taking the write lock; ``read``: a small pool, each
  read one snapshot; ``admin``: schema work, changing nothing it need not), whether the database
  exists, and where it is (for messages).
- **What a dialect does on any connection** (class methods, so that code holding only a
  connection asks :func:`dialect_of`): busy detection and error classification, the per-session
  write lock (and the one lock of artifact-file removal), how a commit whose answer was lost is
  resolved, listing tables, integrity checks, foreign-key violations and a snapshot of every
  table's rows for tests.

Error translation is split the same way: a backend classifies a driver error into an
:class:`~.translation.ErrorKind` (by its own message patterns or codes);
:mod:`~soong_store.backends.translation` turns kinds into soong_store errors, the same for every
database, and :func:`translate` and :func:`translated` apply it with a backend's classification.
SQL itself is never here: statements are shared SQLAlchemy Core.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from sqlalchemy import Connection, Engine, inspect, make_url
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError

from soong_store.backends import translation
from soong_store.backends.link import DriverLink, Link
from soong_store.backends.retry import RetryPolicy
from soong_store.backends.translation import ErrorKind, Translated
from soong_store.backends.values import DataVersion, Integrity
from soong_store.errors import InvalidArgument, SoongStoreError, StorageError

if TYPE_CHECKING:
    from soong_store.backends.search import SearchDialect

Role = Literal["write", "read", "admin"]
Durability = Literal["normal", "full"]


_REGISTRY: dict[str, type[Backend]] = {}


class Backend(ABC):
    """The base contract every database backend implements (see the module docstring)."""

    name: ClassVar[str]
    """The SQLAlchemy dialect name served (``url.get_backend_name()``); defining it registers."""
    title: ClassVar[str]
    """The database's name for people ("SQLite")."""
    fold_case: ClassVar[bool] = False
    """Whether the database treats table names that differ only in case as one name."""
    read_connections: ClassVar[int] = 4
    """How many reader threads a store runs, and so the size of its read pool."""
    reads_on_loop: ClassVar[bool] = False
    """Whether a small read may run on its caller's event loop (:mod:`soong_store.read.on_loop`), on
    an idle connection of the reader threads: only where a read waits for no server and
    :meth:`wait_for_locks` can stop it waiting for a lock."""
    alters_by_rebuild: ClassVar[bool] = False
    """Whether changing a table means rebuilding it (Alembic's batch mode in revisions)."""
    opens_on_reader: ClassVar[bool] = False
    """Whether a store opens on one read connection: the read pool's first connection reads the
    schema's revision (inside :meth:`connecting_untouched`, then :meth:`settle_reader`) and then
    serves the first read, and an admin connection is made only to upgrade. Without it, opening
    reads the revision (and upgrades) on an admin connection. Either way the writer connects at
    its first write, and a store that only reads never does."""
    opens_on_loop: ClassVar[bool] = False
    """Whether such an open may run on its caller's event loop when it waits for nothing: the
    database exists, its first connection (a :meth:`link`) takes no lock another holds, and it
    is at head with nothing to settle. Anything else opens on a reader thread, as without it
    (:meth:`~soong_store.store.runtime.StoreRuntime.open`)."""
    places_pairs: ClassVar[bool] = False
    """Whether idle sessions' pairs move to files of their own (shards); else all stay put."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if isinstance(name, str):
            _REGISTRY[name] = cls

    def __init__(
        self,
        url: str | URL,
        *,
        durability: Durability = "normal",
        module: str | ModuleType | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        if durability not in ("normal", "full"):
            raise InvalidArgument(
                f"invalid durability {durability!r}: expected 'normal' or 'full'",
                durability=durability,
            )
        self.url = make_url(url)
        self.durability: Durability = durability
        self.module = module
        """The DB-API module the engines use (``None``: the dialect's default)."""
        self.retry = retry if retry is not None else RetryPolicy()

    # -- a configured backend -------------------------------------------------------------

    @abstractmethod
    def engine(self, role: Role) -> Engine:
        """A new engine for one role, with the begin-write and settings that role needs."""

    @abstractmethod
    def database_exists(self) -> bool:
        """Whether the database is there already (asking creates nothing)."""

    def check_writable(self) -> None:
        """Raise :class:`StorageError` naming the database if this process may not write it.

        Asked before an upgrade at open; by default every database is writable as far as the
        store can tell (the server refuses what it refuses).
        """
        return None

    def absence(self, where: str) -> str:
        """Why there is no store at ``where`` (:meth:`database_exists` said so), and what to do.

        ``where`` is how the caller names the place (a home, a URL); the sentence names it once.
        """
        return f"no database in {where}: {self.location} does not exist"

    @property
    def location(self) -> str:
        """Where the database is, for messages (never a password)."""
        return self.url.render_as_string(hide_password=True)

    def connecting_untouched(self) -> AbstractContextManager[None]:
        """A block in which new read connections change nothing stored as they connect.

        Opening reads the schema's revision on the read pool's first connection inside it, so
        that a database this code refuses is left as it was; :meth:`settle_reader` then does
        what connecting left undone. Nothing to hold back by default.
        """
        return nullcontext()

    def link(self) -> DriverLink | None:
        """A read connection on the driver alone, for an open on the caller's loop.

        Set up as the read engine's connections are, but waiting for no lock ever (a link is
        read on event loops only), and only where nothing is left to settle; ``None``
        otherwise, and by default: the open then runs on a reader thread. Asked only where
        :attr:`opens_on_loop`.
        """
        return None

    def engine_taking(self, link: DriverLink) -> Engine:
        """A read engine whose pool takes ``link``'s connection over as its first.

        ``link`` is closed if this fails. By default it is closed, and the pool connects anew.
        """
        link.close()
        return self.engine("read")

    def settle_reader(self, engine: Engine) -> None:
        """Do on the read engine what its connections left undone in :meth:`connecting_untouched`.

        Called once the database is known to be at head. Nothing by default.
        """
        return None

    @property
    def commits_on_loop(self) -> bool:
        """Whether the writer may run a batch on its callers' event loop thread while idle.

        Only where a commit waits for neither the disk nor a server, the write connection
        leaves its housekeeping (:meth:`checkpoint`) to the writer's thread, and no
        :meth:`commit_token` is kept (a lost answer to a commit is then taken as done, on the
        loop as on the thread). No by default.
        """
        return False

    # -- what the dialect does on any connection ------------------------------------------

    @classmethod
    def classify(cls, exc: BaseException) -> ErrorKind | None:
        """What a driver error (or SQLAlchemy's wrapper of one) means; ``None``: nothing known."""
        return None

    @classmethod
    def is_busy(cls, exc: BaseException) -> bool:
        """Whether ``exc`` means "another connection holds the lock: try again"."""
        return cls.classify(exc) is ErrorKind.BUSY

    @classmethod
    def is_transient(cls, exc: BaseException) -> bool:
        """Whether the same work may succeed when tried again: busy, or the connection was lost.

        Every retry loop (the writer's batches, reads, the open-time upgrade) asks this. A lost
        connection at ``COMMIT`` is the writer's to resolve (:meth:`commit_outcome`), never a
        blind retry.
        """
        return cls.classify(exc) in (ErrorKind.BUSY, ErrorKind.LOST)

    @classmethod
    def is_lost(cls, exc: BaseException) -> bool:
        """Whether ``exc`` says the connection to the database failed or was cut."""
        return cls.classify(exc) is ErrorKind.LOST

    @classmethod
    def is_missing_table(cls, exc: BaseException) -> bool:
        """Whether ``exc`` says a statement named a table that does not exist."""
        return cls.classify(exc) is ErrorKind.MISSING_TABLE

    @classmethod
    def translate(cls, exc: BaseException) -> SoongStoreError:
        """The soong_store error that stands for ``exc`` (see :func:`translate`)."""
        return translation.translate(exc, (cls,))

    @classmethod
    def translated(cls) -> Translated:
        """Re-raise every error of the block as a soong_store error (see :func:`translated`)."""
        return Translated((cls,))

    @classmethod
    @abstractmethod
    def lock_session(cls, connection: Connection, session_id: str) -> bool | None:
        """Take the write lock of one session for the rest of the transaction.

        Called by every writer job that writes to a session or creates one, before it reads the
        session's counters or checks a rule, so that seqs stay dense and rules hold with writers
        in other processes and hosts. Returns whether the session's row exists when taking the
        lock tells (``None``: not known).
        """

    @classmethod
    def data_version(cls, connection: Link) -> DataVersion | None:
        """Where ``connection``'s transaction stands (read caches check it); ``None``: unknown.

        Must be the first statement of a read transaction, so that it names the snapshot the
        rest of the transaction reads. ``None`` (the default) means no cache is kept.
        """
        return None

    @classmethod
    @abstractmethod
    def lock_files(cls, connection: Connection) -> None:
        """Take the lock that removing artifact files and placing an import's files share.

        A file may be unlinked only while no row names it; a job that checks the rows and
        unlinks, and a job that puts files in place for rows it inserts, take this lock first,
        so neither runs between the other's check and its commit.
        """

    @classmethod
    def commit_token(cls, connection: Connection) -> str | None:
        """What identifies the open transaction after its connection is lost (``None``: nothing).

        The writer asks this right before ``COMMIT``; when the answer to ``COMMIT`` never comes,
        :meth:`commit_outcome` tells on a new connection whether it took effect.
        """
        return None

    @classmethod
    def commit_outcome(cls, connection: Connection, token: str) -> bool | None:
        """Whether the transaction ``token`` names committed; ``None`` while that is not known."""
        return None

    @classmethod
    def wait_for_locks(cls, connection: Link, wait: bool) -> None:
        """Whether taking a lock waits for another holder (else it fails as busy).

        A batch or a read run on an event loop must not wait there; the threads wait as usual.
        Only a backend whose :attr:`commits_on_loop` or :attr:`reads_on_loop` is true is asked.
        """
        return None

    @classmethod
    def claim_checkpoint(cls, connection: Connection) -> bool:
        """Whether the write connection's commits now owe a :meth:`checkpoint`.

        Asked after each batch; a yes is counted as paid.
        """
        return False

    @classmethod
    def checkpoint(cls, connection: Connection) -> bool:
        """What commits on an event loop leave undone, on a connection of the writer's thread.

        The writer runs it while writes go on; when it answers true, once more with its own
        writes held, for what was committed meanwhile (:mod:`soong_store.write.connection`).
        """
        return False

    @classmethod
    def driver_in_transaction(cls, connection: Connection) -> bool:
        """Whether the driver still holds the transaction open (some end it on their own)."""
        return True

    @classmethod
    def attached_as(cls, connection: Connection, file: str) -> str | None:
        """The schema name under which ``file`` is attached to ``connection`` (``None``: not)."""
        return None

    @classmethod
    def attached_files(cls, connection: Connection) -> list[str]:
        """The files attached to ``connection``, least recently used first."""
        return []

    @classmethod
    def attach(cls, connection: Connection, file: str) -> str:
        """Attach ``file`` (relative to the database's folder) outside any transaction."""
        raise StorageError(f"{cls.title} keeps every pair in its database: nothing to attach")

    @classmethod
    def detach(cls, connection: Connection, file: str) -> None:
        """Detach ``file`` if it is attached (outside any transaction)."""
        return None  # nothing is ever attached where pairs stay put

    def file_engine(self, file: str, main_as: str) -> Engine:
        """An engine on ``file`` beside the database, the database attached as ``main_as``."""
        raise StorageError(f"{self.title} keeps every pair in its database")

    def shard_files_on_disk(self) -> list[str]:
        """The shard files beside the database, as the catalog names them (none here)."""
        return []

    def remove_shard_file(self, file: str) -> None:
        """Remove a shard file no catalog row, journal row or ``shard_files`` row names."""
        raise StorageError(f"{self.title} keeps every pair in its database")

    def shards_marked_at(self, revision: str) -> bool:
        """Whether, without reading them, no shard file can be past ``revision`` (cheap)."""
        return True

    def refuse_shards_ahead(self, revision: str) -> None:
        """Refuse (``SchemaVersionError``) a shard file past ``revision``, the database's."""
        return None

    @classmethod
    def add_column(cls, connection: Connection, tables: set[str], definition: str) -> None:
        """Add the nullable column ``definition`` to those of ``tables`` that exist.

        One ``ALTER TABLE`` each, in the caller's transaction.
        """
        for name in sorted(tables & set(cls.table_names(connection))):
            connection.exec_driver_sql(f'ALTER TABLE "{name}" ADD COLUMN {definition}')

    @classmethod
    def table_names(cls, connection: Connection, schema: str | None = None) -> list[str]:
        """The tables of the database (or of one schema), leaving out the database's own."""
        return list(inspect(connection).get_table_names(schema=schema))

    @classmethod
    @abstractmethod
    def integrity_problems(cls, connection: Connection) -> list[str]:
        """The database's own check of its storage: one line per problem, none when sound."""

    @classmethod
    def integrity(cls, connection: Connection) -> Integrity:
        """The database's own check with notes on what it covered (``check`` reports both)."""
        return Integrity(cls.integrity_problems(connection))

    @classmethod
    @abstractmethod
    def foreign_key_violations(cls, connection: Connection) -> list[tuple[Any, ...]]:
        """Rows that break a foreign key (schema work may run with enforcement off)."""

    @classmethod
    def search_dialect(cls) -> SearchDialect:
        """How this database answers a full-text search (``StorageError``: it cannot yet)."""
        raise StorageError(f"search is not available on {cls.title} yet")

    @classmethod
    @abstractmethod
    def snapshot(cls, connection: Connection) -> dict[str, Any]:
        """The schema and every table's rows, in an order of their own: equal means unchanged.

        For tests that prove a refused call changed nothing.
        """


def backend_class(name: str) -> type[Backend]:
    """The backend registered for a dialect name; ``StorageError`` if there is none."""
    found = _REGISTRY.get(name)
    if found is None:
        known = ", ".join(cls.title for cls in _REGISTRY.values()) or "nothing"
        raise StorageError(
            f"unsupported database backend {name!r}: this version runs on {known}",
            backend=name,
        )
    return found


def open_backend(
    url: str | URL,
    *,
    durability: Durability = "normal",
    module: str | ModuleType | None = None,
    retry: RetryPolicy | None = None,
) -> Backend:
    """The backend of a URL's dialect, configured (no connection is made yet).

    Raises:
        InvalidArgument: ``url`` is not a database URL.
        StorageError: no backend is registered for its dialect.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise InvalidArgument(f"invalid database url {url!r}: {exc}", url=url) from exc
    cls = backend_class(parsed.get_backend_name())
    return cls(parsed, durability=durability, module=module, retry=retry)


def dialect_of(bind: Link | Engine) -> type[Backend]:
    """The backend of the database a connection or engine talks to."""
    return backend_class(bind.dialect.name)


def lock_session(connection: Connection, session_id: str) -> bool | None:
    """Take one session's write lock in the connection's transaction (its backend's hook).

    Returns whether the session's row exists, when the backend's lock tells (``None``: not known).
    """
    return dialect_of(connection).lock_session(connection, session_id)


def lock_files(connection: Connection) -> None:
    """Take the artifact-file lock in the connection's transaction (its backend's hook)."""
    dialect_of(connection).lock_files(connection)


def translate(exc: BaseException, dialect: type[Backend] | None = None) -> SoongStoreError:
    """The soong_store error that stands for ``exc`` (:func:`.translation.translate`).

    A driver error is classified by ``dialect``, or with none at hand by whichever registered
    backend recognises it.
    """
    return translation.translate(exc, _REGISTRY.values() if dialect is None else (dialect,))


def translated(dialect: type[Backend] | None = None) -> Translated:
    """Re-raise every error of the block as a soong_store error (see :class:`.Translated`)."""
    return Translated(_REGISTRY.values() if dialect is None else (dialect,))
