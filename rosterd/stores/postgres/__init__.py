"""The PostgreSQL backend: one database holds an org's state for every host."""

from ._channels import PostgresChannels
from ._gates import PostgresGates
from ._memory import PostgresMemory
from ._prefixes import PostgresPrefixes
from ._reader import read_runs
from ._runs import PostgresRun, PostgresRuns
from ._schema import SCHEMA_VERSION, migrate
from ._state import PostgresState, redact
from ._tasks import PostgresTasks

__all__ = (
    "SCHEMA_VERSION",
    "PostgresChannels",
    "PostgresGates",
    "PostgresMemory",
    "PostgresPrefixes",
    "PostgresRun",
    "PostgresRuns",
    "PostgresState",
    "PostgresTasks",
    "migrate",
    "read_runs",
    "redact",
)
