"""What operators see of rosterd in their own tools: Prometheus and OpenTelemetry.

prometheus-client and opentelemetry-sdk are optional extras
(``rosterd[metrics]``, ``rosterd[telemetry]``), imported only by a daemon
whose org asks for them.
"""

from ._open import open_telemetry, tracing_wanted
from ._telemetry import (
    NO_TELEMETRY,
    CallWatch,
    OutcomeLabel,
    RolloverReason,
    Telemetry,
    TurnWatch,
)

__all__ = (
    "NO_TELEMETRY",
    "CallWatch",
    "OutcomeLabel",
    "RolloverReason",
    "Telemetry",
    "TurnWatch",
    "open_telemetry",
    "tracing_wanted",
)
