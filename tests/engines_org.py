"""An org whose worker uses a named engine with a fallback: what the fault
and fallback tests share."""

from __future__ import annotations

from pathlib import Path

from harness import daemon_in_process
from simulator import write_org

from rosterd.protocol import TurnResult, Wait

__all__ = ("fallback_org", "one_turn")


def fallback_org(
    root: Path,
    primary_url: str,
    fallback_url: str | None,
    *,
    settings: str = "max_retries = 0\n",
    channels: int = 2,
    extra: str = "",
) -> Path:
    """Worker w0 on engine ``claude`` (the Anthropic API at *primary_url*, with
    *settings*), falling back to ``local`` (the OpenAI API at *fallback_url*)
    when there is one; channels c0, c1, …"""
    write_org(root, workers=1, channels=channels, identity_chars=300, purpose_chars=100)
    claude = f'kind = "anthropic"\nmodel = "sim-claude"\nbase_url = "{primary_url}"\n{settings}'
    tables = [f"[engines.claude]\n{claude}"]
    if fallback_url is not None:
        tables[0] += 'fallback = ["local"]\n'
        local = f'kind = "openai"\nmodel = "sim-local"\nbase_url = "{fallback_url}"\n'
        tables.append(f"[engines.local]\n{local}max_retries = 0\n")
    toml = root / "org.toml"
    text = toml.read_text().replace(
        "[workers.w0]", '[workers.w0.engine]\nuse = "claude"\n\n[workers.w0]', 1
    )
    toml.write_text(text + "\n" + "\n".join(tables) + extra)
    return root


async def one_turn(org: Path, state: Path, text: str = "hello") -> tuple[TurnResult, list[Wait]]:
    """One session turn of w0 in c0 on a daemon of *org*: its result, and
    every ``turn.wait`` its client heard."""
    waits: list[Wait] = []

    async def heard(wait: Wait) -> None:
        waits.append(wait)

    async with daemon_in_process(org, state) as daemon, await daemon.client() as client:
        opened = await client.session_open("w0", "c0")
        result = await client.session_send(opened.session, text, on_wait=heard)
    return result, waits
