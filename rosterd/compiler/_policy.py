"""The versioned host policy template shipped inside the package."""

from __future__ import annotations

import hashlib
from importlib import resources

POLICY_VERSION = "1"
# Read once at import: the compiler itself never touches a file.
POLICY_TEXT = (
    resources.files(__package__).joinpath(f"policy/v{POLICY_VERSION}.md").read_text("utf-8")
)
POLICY_SHA256 = hashlib.sha256(POLICY_TEXT.encode()).hexdigest()
