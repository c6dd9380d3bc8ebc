"""Many rows of one table written in one go: PostgreSQL's COPY, elsewhere one INSERT given to the driver's
executemany. The database layer's other half beside db.py (the engine): how many rows reach either database at once.
Ingestion writes a run's records so."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, String, Table, bindparam, insert
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement


class _StoredJSON(FunctionElement[Any]):
    """A JSON column's text, written as it is: the column's own type would serialise the text again."""

    type = JSON()
    inherit_cache = True


@compiles(_StoredJSON)
def _stored_json(element: _StoredJSON, compiler: SQLCompiler, **kw: Any) -> str:
    (text,) = element.clauses
    # SQLite keeps JSON as text. (PostgreSQL takes the rows by COPY, which never compiles this statement.)
    return compiler.process(text, **kw)


class BulkInsert:
    """Many rows of one table, each a plain tuple in the order of `columns` (a JSON column's value: its text), written
    in one go: PostgreSQL's COPY; elsewhere one INSERT made by the query builder, compiled once per dialect, given to
    the driver's executemany. SQLAlchemy's own executemany, and psycopg's, cost more per row than reading a metric
    line did. Either way a row that breaks a constraint (a line stored twice) fails them all, and with them the
    transaction."""

    def __init__(self, table: Table, columns: tuple[str, ...], json_columns: frozenset[str] = frozenset()) -> None:
        self.table, self.columns = table, columns
        # Binds named apart from their columns: the query builder keeps the columns' own names for itself.
        self.names = tuple(f"new_{column}" for column in columns)
        values: dict[str, Any] = {
            column: _StoredJSON(bindparam(name, type_=String)) if column in json_columns else bindparam(name)
            for column, name in zip(columns, self.names, strict=True)
        }
        # inline: no primary key fetched back, which would cost PostgreSQL a RETURNING per row.
        self.statement = insert(table).inline().values(values)
        self._compiled: dict[str, tuple[str, list[int] | None]] = {}

    def insert(self, connection: Connection, rows: list[tuple[Any, ...]]) -> None:
        if connection.dialect.name == "postgresql":
            self._copy(connection, rows)
            return
        sql, order = self._compiled.get(connection.dialect.name) or self._compile(connection.dialect)
        if order is None:  # the driver takes named parameters
            connection.exec_driver_sql(sql, [dict(zip(self.names, row, strict=True)) for row in rows])
        elif order == list(range(len(self.names))):
            connection.exec_driver_sql(sql, rows)
        else:
            connection.exec_driver_sql(sql, [tuple(row[i] for i in order) for row in rows])

    def _copy(self, connection: Connection, rows: list[tuple[Any, ...]]) -> None:
        # The query builder has no COPY: the statement names only the table and columns, quoted by the dialect.
        quote = connection.dialect.identifier_preparer
        into = f"{quote.format_table(self.table)} ({', '.join(quote.quote(column) for column in self.columns)})"
        statement = f"COPY {into} FROM STDIN"
        driver = connection.connection.driver_connection
        dialect = connection.dialect
        try:
            with driver.cursor() as cursor, cursor.copy(statement) as copy:  # type: ignore[union-attr]
                for row in rows:
                    copy.write_row(row)
        except dialect.loaded_dbapi.Error as exc:
            # Reported as SQLAlchemy reports the statements it runs (IntegrityError for a line stored twice), and a
            # connection lost on the way is not given back to the pool.
            lost = dialect.is_disconnect(exc, driver, None)
            if lost:
                connection.invalidate(exc)
            raise DBAPIError.instance(
                statement, None, exc, dialect.loaded_dbapi.Error, connection_invalidated=lost, dialect=dialect
            ) from exc

    def _compile(self, dialect: Dialect) -> tuple[str, list[int] | None]:
        compiled = self.statement.compile(dialect=dialect)
        positions = compiled.positiontup
        order = [self.names.index(name) for name in positions] if compiled.positional and positions else None
        self._compiled[dialect.name] = (str(compiled), order)
        return str(compiled), order
