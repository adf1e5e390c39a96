"""An org whose worker uses a named engine with a fallback: what the fault
and fallback tests share."""

from __future__ import annotations

from pathlib import Path

from simulator import write_org

__all__ = ("fallback_org",)


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
