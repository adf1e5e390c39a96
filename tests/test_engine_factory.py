"""Choosing and configuring engines; keys are named, never shown."""

from __future__ import annotations

import pytest

from rosterd import ConfigError
from rosterd.engines import AnthropicEngine, EchoEngine, OpenAIEngine, open_engine
from rosterd.org import EngineConfig, EngineKind

pytestmark = pytest.mark.anyio

SECRET = "sk-factory-secret-value-123"


@pytest.mark.parametrize(
    ("kind", "cls"),
    [("echo", EchoEngine), ("openai", OpenAIEngine), ("anthropic", AnthropicEngine)],
)
async def test_kind_selects_the_engine(kind: EngineKind, cls: type[object]) -> None:
    config = EngineConfig(kind=kind, model="m", api_key_env="PROVIDER_KEY")
    engine = open_engine(config, {"PROVIDER_KEY": SECRET})
    try:
        assert isinstance(engine, cls)
        assert engine.kind == kind
        assert SECRET not in repr(engine)
    finally:
        await engine.aclose()


@pytest.mark.parametrize("env", [{}, {"PROVIDER_KEY": ""}])
def test_missing_key_names_the_variable(env: dict[str, str]) -> None:
    config = EngineConfig(kind="anthropic", model="m", api_key_env="PROVIDER_KEY")
    with pytest.raises(ConfigError) as caught:
        open_engine(config, env)
    assert "$PROVIDER_KEY" in str(caught.value)
    assert caught.value.key == "engine.api_key_env"


@pytest.mark.parametrize("value", [f"sk-fac\ntory-{SECRET}", f"{SECRET}\x7f", f"{SECRET} x"])
def test_a_key_no_header_may_carry_is_refused_without_showing_it(value: str) -> None:
    # httpx would refuse the header quoting the key, and the key would
    # reach the turn's error, the transcript and the log.
    config = EngineConfig(kind="openai", model="m", api_key_env="PROVIDER_KEY")
    with pytest.raises(ConfigError) as caught:
        open_engine(config, {"PROVIDER_KEY": value})
    assert "$PROVIDER_KEY" in str(caught.value)
    assert SECRET not in str(caught.value) and "fac" not in str(caught.value)
    assert caught.value.key == "engine.api_key_env"


def test_a_key_in_another_variable_is_not_used() -> None:
    config = EngineConfig(kind="openai", model="m", api_key_env="PROVIDER_KEY")
    with pytest.raises(ConfigError) as caught:
        open_engine(config, {"OTHER_KEY": SECRET})
    assert SECRET not in str(caught.value)


async def test_no_key_is_needed_without_api_key_env() -> None:
    engine = open_engine(
        EngineConfig(kind="openai", model="llama", base_url="http://127.0.0.1:9/v1"), {}
    )
    assert isinstance(engine, OpenAIEngine)
    await engine.aclose()


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_provider_engine_needs_a_model(kind: EngineKind) -> None:
    with pytest.raises(ConfigError) as caught:
        open_engine(EngineConfig(kind=kind), {})
    assert caught.value.key == "engine.model"
