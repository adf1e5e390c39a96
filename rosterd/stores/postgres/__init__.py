"""The PostgreSQL backend: one database holds an org's state for every host."""

from ._reader import read_runs
from ._schema import SCHEMA_VERSION, migrate
from ._state import PostgresState

__all__ = ("SCHEMA_VERSION", "PostgresState", "migrate", "read_runs")
