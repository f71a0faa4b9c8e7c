"""``SqlProcessStore``: process instances in a table, saved in the use case's transaction.

Table ``<prefix>processes``, one row per instance::

    tenant    TEXT    the instance's tenant id, '' for none  }
    process   TEXT    the process manager's name             } primary key
    id        TEXT    the instance's id                      }
    version   INTEGER 1 at the first save, one more at each
    state     TEXT    the state, as JSON
    timeouts  TEXT    {timeout name: id of the job that fires it}, as JSON

A first save is ``INSERT ... ON CONFLICT DO NOTHING``, every later one ``UPDATE ... WHERE
version = :expected``: no row written means another step saved first, and the save is refused
(``StaleProcessVersionError``). Every statement names the whole key, so no call reaches an
instance of another tenant; ``''`` stands for no tenant, as ``""`` is never a tenant id. On
PostgreSQL the second of two racing updates waits for the first's commit, then finds the version
changed: one winner, no lost update, at READ COMMITTED. A load ``for_update`` in a unit of work
(the runner's retry of a step that lost such a race) is ``SELECT ... FOR UPDATE``: the row is
held until that unit ends, so the retry cannot lose again.

Create the table with ``create_process_tables(engine, prefix)`` (idempotent), or from
``process_ddl(dialect, prefix)`` in a migration; it is apart from ``create_tables`` so that the
process table only exists where process managers do. Built with ``unit_of_work=``, the store
reads and writes on the connection of the unit of work in progress: with ``SqlJobStore`` on the
same unit of work, the state, the timeouts it arms and its commands' outbox commit together.
"""

from __future__ import annotations

from sqlalchemy import (
    Column,
    Engine,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    inspect,
    select,
    update,
)
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.schema import CreateTable

from ddd_celery.processes.errors import StaleProcessVersionError
from ddd_celery.processes.store import (
    ProcessStore,
    StoredProcess,
    check_key,
    check_save,
    dump_json,
    load_json,
)
from ddd_celery.sql.connection import Connector
from ddd_celery.sql.dialects import upsert
from ddd_celery.sql.errors import StoreUnavailableError
from ddd_celery.sql.tables import DEFAULT_PREFIX, create_missing, tables
from ddd_celery.sql.unit_of_work import SqlAlchemyUnitOfWork


def process_table(prefix: str = DEFAULT_PREFIX) -> Table:
    """The table ``<prefix>processes`` on a metadata of its own."""
    tables(prefix)  # refuses a prefix the family refuses
    return Table(
        f"{prefix}processes",
        MetaData(),
        Column("tenant", Text, nullable=False),
        Column("process", Text, nullable=False),
        Column("id", Text, nullable=False),
        Column("version", Integer, nullable=False),
        Column("state", Text, nullable=False),
        Column("timeouts", Text, nullable=False),
        PrimaryKeyConstraint("tenant", "process", "id", name=f"{prefix}processes_pkey"),
    )


def create_process_tables(engine: Engine, prefix: str = DEFAULT_PREFIX) -> Table:
    """Create ``<prefix>processes`` if it does not exist yet; idempotent, and safe when several
    processes call it at once (``tables.create_missing``: on PostgreSQL they take turns on
    ddd_celery's DDL lock).

    Raises ``RuntimeError`` when the table exists without ``tenant`` (made before instances
    were keyed by tenant): ``docs/processes.md`` shows the statements that upgrade it.
    """
    table = process_table(prefix)
    create_missing(engine, table.metadata)
    columns = {column["name"] for column in inspect(engine).get_columns(table.name)}
    if "tenant" not in columns:
        raise RuntimeError(
            f"table {table.name} has no tenant column: it was made before process instances "
            "were keyed by tenant; upgrade it as docs/processes.md shows"
        )
    return table


def drop_process_tables(engine: Engine, prefix: str = DEFAULT_PREFIX) -> None:
    """Drop ``<prefix>processes`` (tests, teardown); a missing table is left alone."""
    process_table(prefix).metadata.drop_all(engine)


def process_ddl(dialect: Dialect, prefix: str = DEFAULT_PREFIX) -> str:
    """The ``CREATE TABLE`` statement ``create_process_tables`` runs, for a migration."""
    return str(CreateTable(process_table(prefix)).compile(dialect=dialect)).strip() + ";\n"


class SqlProcessStore(ProcessStore):
    """Every process instance a row of ``<prefix>processes``, on PostgreSQL or SQLite.

    ``unit_of_work`` (optional) is the ``SqlAlchemyUnitOfWork`` whose connection the store uses
    while one of its units is in progress; outside one, each call is a short transaction of its
    own. Raises ``StoreUnavailableError`` when the database cannot be asked.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        unit_of_work: SqlAlchemyUnitOfWork | None = None,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        self._connector = Connector(
            engine, unavailable=StoreUnavailableError, unit_of_work=unit_of_work
        )
        self._table = process_table(prefix)
        self.transactional = unit_of_work is not None

    def load(
        self, process: str, instance_id: str, *, tenant_id: str | None, for_update: bool = False
    ) -> StoredProcess | None:
        """``for_update`` inside a unit of work locks the row until it ends (PostgreSQL's
        ``FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE`` already holds the whole file)."""
        check_key(process, instance_id, tenant_id)
        table = self._table
        query = select(table.c.version, table.c.state, table.c.timeouts).where(
            table.c.tenant == (tenant_id or ""),
            table.c.process == process,
            table.c.id == instance_id,
        )
        if for_update and self._connector.in_unit_of_work():
            query = query.with_for_update()
        with self._connector.transaction(f"load the instance {instance_id!r}") as connection:
            row = connection.execute(query).first()
        if row is None:
            return None
        return load_json(
            process,
            instance_id,
            tenant_id=tenant_id,
            version=row.version,
            state=row.state,
            timeouts=row.timeouts,
        )

    def save(self, instance: StoredProcess, *, expected_version: int) -> None:
        check_save(instance, expected_version)
        state, timeouts = dump_json(instance)
        table = self._table
        with self._connector.transaction(f"save the instance {instance.id!r}") as connection:
            if expected_version == 0:
                written = connection.execute(
                    upsert(connection, table)
                    .values(
                        tenant=instance.tenant_id or "",
                        process=instance.process,
                        id=instance.id,
                        version=instance.version,
                        state=state,
                        timeouts=timeouts,
                    )
                    .on_conflict_do_nothing()
                    .returning(table.c.version)
                ).first()
            else:
                written = connection.execute(
                    update(table)
                    .where(
                        table.c.tenant == (instance.tenant_id or ""),
                        table.c.process == instance.process,
                        table.c.id == instance.id,
                        table.c.version == expected_version,
                    )
                    .values(version=instance.version, state=state, timeouts=timeouts)
                    .returning(table.c.version)
                ).first()
        if written is None:
            raise StaleProcessVersionError(
                f"instance {instance.id!r} is no longer at version {expected_version}",
                process=instance.process,
                instance_id=instance.id,
                version=expected_version,
            )
