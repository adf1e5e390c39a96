"""Rollover keeps the cache, on a real llama.cpp ``llama-server``.

When a session reaches ``session_chars`` it continues in a new session whose
system part is compiled afresh: byte-identical to the old one, so the
provider's prompt cache still holds it. Here the provider is a real
``llama-server`` (built by tests/llama/build.sh; ``make test-llama``) with a
tiny random model, and its own ``cached_tokens`` say so.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from harness import REPO, daemon_in_process
from simulator import write_org

pytestmark = [pytest.mark.anyio, pytest.mark.llama]

LLAMA = Path(os.environ.get("ROSTER_LLAMA_DIR") or REPO / ".cache" / "llama")


@pytest.fixture
def llama_server() -> Iterator[str]:
    """A llama-server with one slot (so every request meets the last one's
    cache) and 8,192 tokens of context; its base URL."""
    binary, model = LLAMA / "bin" / "llama-server", LLAMA / "tiny.gguf"
    if not binary.exists() or not model.exists():
        pytest.fail(
            f"no llama-server or model in {LLAMA}: run tests/llama/build.sh (make test-llama does)",
            pytrace=False,
        )
    command = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", "0"]
    process = subprocess.Popen(
        [*command, "-c", "8192", "-np", "1"], stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    try:
        # It says where it listens once the model is loaded.
        for line in process.stderr:
            if found := re.search(r"listening on (http://127\.0\.0\.1:\d+)", line):
                yield found[1]
                break
        else:
            raise AssertionError(f"llama-server exited with {process.wait()}")
    finally:
        process.terminate()
        process.communicate(timeout=10)


async def test_the_first_request_after_a_rollover_reads_the_system_part_from_the_cache(
    tmp_path: Path, llama_server: str
) -> None:
    engine = f'kind = "openai"\nmodel = "tiny"\nbase_url = "{llama_server}/v1"\nmax_tokens = 8'
    write_org(tmp_path / "org", workers=1, channels=1, identity_chars=600, purpose_chars=200)
    toml = tmp_path / "org" / "org.toml"
    text = toml.read_text().replace('kind = "echo"', engine)
    toml.write_text(text + "\n[context]\nsession_chars = 4500\n")
    async with (
        daemon_in_process(tmp_path / "org", tmp_path / "state") as daemon,
        await daemon.client() as client,
    ):
        opened = await client.session_open("w0", "c0")
        for turn in range(40):
            result = await client.session_send(opened.session, f"turn {turn}: " + "x" * 300)
            if result.rolled_from is not None:
                break
        else:
            raise AssertionError("no rollover in 40 turns")
        old = await client.runs_context(result.rolled_from)
        new = await client.runs_context(result.run)
    system = new.turns[0].system
    assert new.turns[0].turn == 1 and old.turns[-1].system == system
    async with httpx.AsyncClient(base_url=llama_server) as llama:
        counted = await llama.post("/tokenize", json={"content": system})
    system_tokens = len(counted.json()["tokens"])
    assert result.usage is not None
    # What the server read from its cache for the new session's first request.
    assert result.usage.cached_input_tokens >= system_tokens > 1000, json.dumps(
        {"cached": result.usage.cached_input_tokens, "system": system_tokens}
    )
