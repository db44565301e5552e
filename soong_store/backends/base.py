"""The backend seam: everything that differs between databases, behind one small contract.

A :class:`Backend` subclass serves one SQLAlchemy dialect, named by its ``name``, and registers
itself under that name when it is defined (the shape of Alembic's ``DefaultImpl`` registry).
:func:`open_backend` picks the class by ``url.get_backend_name()``; a URL no backend is
registered for is refused with one :class:`~soong_store.errors.StorageError`.

What an engine can do is one record, :class:`Capabilities`, that each backend declares; the rest
of the package reads ``backend.capabilities`` rather than asking which database it runs on. The
contract has two halves, and one optional part:

- **A configured backend** (an instance, made from a URL, a durability and the store's
  :class:`~soong_store.backends.retry.RetryPolicy`): engines per role (``write``: the writer's one
  connection, whose transactions begin by taking the write lock; ``read``: a small pool, each
  read one snapshot; ``admin``: schema work, changing nothing it need not), whether the database
  exists, and where it is (for messages).
- **What the engine does on any connection** (class methods, so that code holding only a
  connection asks :func:`backend_class_of`): error classification, the per-session write lock
  (and the one lock of artifact-file removal), how a commit whose answer was lost is resolved,
  the write connection's lock wait and checkpoints, integrity checks, foreign-key violations,
  adding a column, and full-text search (:class:`~soong_store.backends.search.Searcher`).
- **Shard files** (:class:`ShardFiles`), only where :attr:`Capabilities.places_pairs`: attaching
  the files idle sessions' pairs move to, listing and removing them, and refusing one ahead of
  the database's revision.

Error translation is split the same way: a backend classifies a driver error into an
:class:`~.translation.ErrorKind` (by its own message patterns or codes);
:mod:`~soong_store.backends.translation` turns kinds into soong_store errors, the same for every
database, and :func:`translate` and :func:`translated` apply it with a backend's classification.
SQL itself is never here: statements are shared SQLAlchemy Core.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast, final

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
    from soong_store.backends.search import Searcher

Role = Literal["write", "read", "admin"]
Durability = Literal["normal", "full"]


_REGISTRY: dict[str, type[Backend]] = {}


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What one engine can do, declared once by its backend (``Backend.capabilities``).

    The store, the writer, the read path and the catalog ask this record instead of asking which
    database they run on. Every field's default is what an engine that cannot is given.
    """

    fold_case: bool = False
    """Whether the database treats table names that differ only in case as one name."""
    read_connections: int = 4
    """How many reader threads a store runs, and so the size of its read pool."""
    reads_on_loop: bool = False
    """Whether a small read may run on its caller's event loop (:mod:`soong_store.read.readers`), on
    an idle connection of the reader threads: only where a read waits for no server and
    :meth:`Backend.wait_for_locks` can stop it waiting for a lock."""
    loop_commits: frozenset[Durability] = frozenset()
    """The durabilities at which the writer may run a batch on its callers' event loop thread
    while idle (:attr:`Backend.commits_on_loop`): only where a commit waits for neither the disk
    nor a server, the write connection leaves its housekeeping (:meth:`Backend.checkpoint`) to
    the writer's thread, and no :meth:`Backend.commit_token` is kept (a lost answer to a commit
    is then taken as done, on the loop as on the thread)."""
    alters_by_rebuild: bool = False
    """Whether changing a table means rebuilding it (Alembic's batch mode in revisions)."""
    opens_on_reader: bool = False
    """Whether a store opens on one read connection: the read pool's first connection reads the
    schema's revision (inside :meth:`Backend.connecting_untouched`, then
    :meth:`Backend.settle_reader`) and then serves the first read, and an admin connection is
    made only to upgrade. Without it, opening reads the revision (and upgrades) on an admin
    connection. Either way the writer connects at its first write, and a store that only reads
    never does."""
    opens_on_loop: bool = False
    """Whether such an open may run on its caller's event loop when it waits for nothing: the
    database exists, its first connection (a :meth:`Backend.link`) takes no lock another holds,
    and it is at head with nothing to settle. Anything else opens on a reader thread, as without
    it (:meth:`~soong_store.store.runtime.StoreRuntime.open`)."""
    places_pairs: bool = False
    """Whether idle sessions' pairs move to files of their own (shards); else all stay put. A
    backend that says so is also a :class:`ShardFiles` (:func:`shard_files`)."""
    names_parameters: bool = False
    """Whether the driver runs SQL text with ``:name`` parameters given as a mapping, as it is
    (:meth:`~soong_store.backends.prepared.Prepared.written` then skips compiling it)."""
    orders_text_by_bytes: bool = False
    """Whether text compares byte by byte (a ``BINARY`` collation), so that the strings with a
    prefix are also a range of an index on them."""


class Backend(ABC):
    """The base contract every database backend implements (see the module docstring)."""

    name: ClassVar[str]
    """The SQLAlchemy dialect name served (``url.get_backend_name()``); defining it registers."""
    title: ClassVar[str]
    """The database's name for people ("SQLite")."""
    capabilities: ClassVar[Capabilities] = Capabilities()
    """What this engine can do (:class:`Capabilities`); one record per backend."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.capabilities.places_pairs and not issubclass(cls, ShardFiles):
            raise TypeError(f"{cls.__name__} places pairs: it must be a ShardFiles too")
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

    @final
    @property
    def commits_on_loop(self) -> bool:
        """Whether the writer may run a batch on its callers' event loop thread while idle.

        At this backend's durability, as its capabilities say (:attr:`Capabilities.loop_commits`).
        """
        return self.durability in self.capabilities.loop_commits

    # -- what the engine does on any connection -------------------------------------------
    # (classify is the hook; the six after it derive from it and are the same for every engine)

    @classmethod
    def classify(cls, exc: BaseException) -> ErrorKind | None:
        """What a driver error (or SQLAlchemy's wrapper of one) means; ``None``: nothing known."""
        return None

    @final
    @classmethod
    def is_busy(cls, exc: BaseException) -> bool:
        """Whether ``exc`` means "another connection holds the lock: try again"."""
        return cls.classify(exc) is ErrorKind.BUSY

    @final
    @classmethod
    def is_transient(cls, exc: BaseException) -> bool:
        """Whether the same work may succeed when tried again: busy, or the connection was lost.

        Every retry loop (the writer's batches, reads, the open-time upgrade) asks this. A lost
        connection at ``COMMIT`` is the writer's to resolve (:meth:`commit_outcome`), never a
        blind retry.
        """
        return cls.classify(exc) in (ErrorKind.BUSY, ErrorKind.LOST)

    @final
    @classmethod
    def is_lost(cls, exc: BaseException) -> bool:
        """Whether ``exc`` says the connection to the database failed or was cut."""
        return cls.classify(exc) is ErrorKind.LOST

    @final
    @classmethod
    def is_missing_table(cls, exc: BaseException) -> bool:
        """Whether ``exc`` says a statement named a table that does not exist."""
        return cls.classify(exc) is ErrorKind.MISSING_TABLE

    @final
    @classmethod
    def translate(cls, exc: BaseException) -> SoongStoreError:
        """The soong_store error that stands for ``exc`` (see :func:`translate`)."""
        return translation.translate(exc, (cls,))

    @final
    @classmethod
    def translated(cls) -> Translated:
        """Re-raise every error of the block as a soong_store error (see :func:`translated`)."""
        return Translated((cls,))

    @classmethod
    def lock_session(cls, connection: Connection, session_id: str) -> bool | None:
        """Take the write lock of one session for the rest of the transaction.

        Called by every writer job that writes to a session or creates one, before it reads the
        session's counters or checks a rule, so that seqs stay dense and rules hold with writers
        in other processes and hosts. Returns whether the session's row exists when taking the
        lock tells (``None``: not known). The default takes nothing, which is right only where
        the writer's transaction already locks the whole database (SQLite's ``BEGIN
        IMMEDIATE``); a database that runs writers of different sessions at once must override
        it (PostgreSQL: the session's row).
        """
        return None

    @classmethod
    def data_version(cls, connection: Link) -> DataVersion | None:
        """Where ``connection``'s transaction stands (read caches check it); ``None``: unknown.

        Must be the first statement of a read transaction, so that it names the snapshot the
        rest of the transaction reads. ``None`` (the default) means no cache is kept.
        """
        return None

    @classmethod
    def nodes_changed(cls, connection: Connection) -> None:
        """Stored nodes were changed in place (a redaction): every read cache must let go.

        Read caches keep nodes as never changing (:meth:`data_version`); this makes each one,
        in every process, drop what it holds at its next read. Nothing where no cache is kept.
        """
        return None

    def truncate_log(self, connection: Connection) -> None:
        """Empty the write-ahead log into the database and cut it to nothing (at close).

        ``connection``: the store's last, outside any transaction.

        After an erasure the log still holds the pages as they were before it; nothing to do
        where the database keeps no log in the home.
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
        Only a backend whose :attr:`commits_on_loop` or :attr:`Capabilities.reads_on_loop` is
        true is asked.
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
        writes held, for what was committed meanwhile (:mod:`soong_store.write.writer`).
        """
        return False

    @classmethod
    def driver_in_transaction(cls, connection: Connection) -> bool:
        """Whether the driver still holds the transaction open (some end it on their own)."""
        return True

    @classmethod
    def add_column(cls, connection: Connection, tables: set[str], definition: str) -> None:
        """Add the nullable column ``definition`` to those of ``tables`` that exist.

        One ``ALTER TABLE`` each, in the caller's transaction.
        """
        for name in sorted(tables & set(inspect(connection).get_table_names())):
            connection.exec_driver_sql(f'ALTER TABLE "{name}" ADD COLUMN {definition}')

    @classmethod
    @abstractmethod
    def integrity(cls, connection: Connection) -> Integrity:
        """The database's own check of its storage, with notes on what it covered.

        One problem per line, none when sound; ``check`` reports the problems and the notes.
        """

    @classmethod
    @abstractmethod
    def foreign_key_violations(cls, connection: Connection) -> list[tuple[Any, ...]]:
        """Rows that break a foreign key (schema work may run with enforcement off)."""

    @classmethod
    def searcher(cls) -> Searcher:
        """How this database answers a full-text search (``StorageError``: it cannot yet)."""
        raise StorageError(f"search is not available on {cls.title} yet")


class ShardFiles(ABC):
    """The optional part of a backend whose pairs move to files of their own (shards).

    A backend whose :attr:`Capabilities.places_pairs` is true derives from this too (defining it
    otherwise fails); :func:`shard_files` and :func:`shard_files_of` hand it out. Files are named
    relative to the database's folder (``shards/0001.sqlite``), as the catalog names them. A
    connection reads a shard by attaching it, outside any transaction.
    """

    @classmethod
    @abstractmethod
    def attached_as(cls, connection: Connection, file: str) -> str | None:
        """The schema name under which ``file`` is attached to ``connection`` (``None``: not)."""

    @classmethod
    @abstractmethod
    def attached_files(cls, connection: Connection) -> list[str]:
        """The files attached to ``connection``, least recently used first."""

    @classmethod
    @abstractmethod
    def attach(cls, connection: Connection, file: str) -> str:
        """Attach ``file`` outside any transaction; the schema name it is attached under."""

    @classmethod
    @abstractmethod
    def detach(cls, connection: Connection, file: str) -> None:
        """Detach ``file`` if it is attached (outside any transaction)."""

    @classmethod
    @abstractmethod
    def linked_files(cls, connection: Connection) -> list[str]:
        """The links standing where shard files live (the store refuses them; check reports)."""

    @abstractmethod
    def file_engine(self, file: str, main_as: str) -> Engine:
        """An engine on ``file`` beside the database, the database attached as ``main_as``."""

    @abstractmethod
    def files_on_disk(self) -> list[str]:
        """The shard files beside the database, those SQLite's leftovers name included."""

    @abstractmethod
    def remove_file(self, file: str) -> None:
        """Remove a shard file no catalog row, journal row or ``shard_files`` row names."""

    @abstractmethod
    def marked_at(self, revision: str) -> bool:
        """Whether, without reading them, no shard file can be past ``revision`` (cheap)."""

    @abstractmethod
    def refuse_ahead(self, revision: str) -> None:
        """Refuse (``SchemaVersionError``) a shard file past ``revision``, the database's."""


def shard_files(backend: Backend) -> ShardFiles | None:
    """The shard part of a backend; ``None`` where it keeps every pair in its database."""
    return cast(ShardFiles, backend) if backend.capabilities.places_pairs else None


def shard_files_of(bind: Link | Engine) -> type[ShardFiles] | None:
    """:func:`shard_files` of the backend a connection or engine talks to, for its connections."""
    cls = backend_class(bind.dialect.name)  # as backend_class_of: this runs on the writer's path
    return cast(type[ShardFiles], cls) if cls.capabilities.places_pairs else None


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


def backend_class_of(bind: Link | Engine) -> type[Backend]:
    """The backend of the database a connection or engine talks to."""
    return backend_class(bind.dialect.name)


_searchers: dict[type[Backend], Searcher] = {}


def searcher_of(bind: Link | Engine) -> Searcher:
    """How the database ``bind`` talks to answers a search (``StorageError``: it cannot yet).

    Each backend's :meth:`Backend.searcher` is asked once (it loads its module then): a write
    notes its search rows through this on every commit.
    """
    cls = backend_class(bind.dialect.name)
    found = _searchers.get(cls)
    if found is None:
        found = _searchers[cls] = cls.searcher()
    return found


def lock_session(connection: Connection, session_id: str) -> bool | None:
    """Take one session's write lock in the connection's transaction (its backend's hook).

    Returns whether the session's row exists, when the backend's lock tells (``None``: not known).
    """
    return backend_class_of(connection).lock_session(connection, session_id)


def lock_files(connection: Connection) -> None:
    """Take the artifact-file lock in the connection's transaction (its backend's hook)."""
    backend_class_of(connection).lock_files(connection)


def translate(exc: BaseException, backend: type[Backend] | None = None) -> SoongStoreError:
    """The soong_store error that stands for ``exc`` (:func:`.translation.translate`).

    A driver error is classified by ``backend``, or with none at hand by whichever registered
    backend recognises it.
    """
    return translation.translate(exc, _REGISTRY.values() if backend is None else (backend,))


def translated(backend: type[Backend] | None = None) -> Translated:
    """Re-raise every error of the block as a soong_store error (see :class:`.Translated`)."""
    return Translated(_REGISTRY.values() if backend is None else (backend,))
