"""Loading an org directory through ``load_org`` (docs/configuration.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rosterd import ConfigError, InvalidIdError, NotFoundError, RosterError
from rosterd.org import ContextBudget, Org, Surface, load_org

BASE_TOML = """\
[context]
total = 48000

[workers.ada]
connections = ["github"]

[workers.ada.context]
memory = 4000

[workers.grace]

[channels.general]
workers = ["ada", "grace"]

[channels.releases]
workers = ["ada"]

[connections.github]
hosts = ["api.github.com"]
methods = ["GET", "POST"]
env = "GITHUB_TOKEN"
"""


def make_org(
    root: Path, toml: str = BASE_TOML, workers: tuple[str, ...] = ("ada", "grace")
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "org.toml").write_text(toml)
    for worker in workers:
        (root / "workers" / worker).mkdir(parents=True, exist_ok=True)
        (root / "workers" / worker / "identity.md").write_text(f"I am {worker}.\n")
    (root / "channels" / "general").mkdir(parents=True, exist_ok=True)
    (root / "channels" / "general" / "purpose.md").write_text("Everyday talk.\n")
    return root


def load_error(root: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_org(root)
    return caught.value


def test_example_org_loads(example_org: Path) -> None:
    org = load_org(example_org)
    assert sorted(org.workers) == ["ada", "grace"]
    assert sorted(org.channels) == ["general", "releases"]
    assert org.workers["ada"].connections == ["github"]
    assert org.connections["github"].env == "GITHUB_TOKEN"
    assert org.budget_for("ada").memory == 4000
    assert org.budget_for("grace") == org.context
    assert org.identities["ada"] == (example_org / "workers/ada/identity.md").read_text()
    assert org.purposes["general"] == (example_org / "channels/general/purpose.md").read_text()
    assert org.engine.kind == "echo"


def test_tmp_org_loads_with_optional_purpose_and_defaults(tmp_path: Path) -> None:
    org = load_org(make_org(tmp_path))
    assert set(org.purposes) == {"general"}
    assert org.identities == {"ada": "I am ada.\n", "grace": "I am grace.\n"}
    assert org.context == ContextBudget()
    budget = org.budget_for("ada")
    assert (budget.total, budget.memory, budget.task) == (48000, 4000, 24000)


def test_bad_toml_names_the_file_and_line(tmp_path: Path) -> None:
    root = make_org(tmp_path, "[context]\ntotal = 1\n[workers.ada\n")
    error = load_error(root)
    assert str(root / "org.toml") in str(error)
    assert "line 3" in str(error)
    assert error.path == str(root / "org.toml")


def test_missing_org_toml_names_the_file(tmp_path: Path) -> None:
    error = load_error(tmp_path)
    assert str(tmp_path / "org.toml") in str(error)
    assert "missing" in str(error)


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        (BASE_TOML + "\n[contxt]\ntotal = 1\n", "contxt"),
        (
            BASE_TOML.replace("[workers.grace]\n", "[workers.grace]\nconections = []\n"),
            "workers.grace.conections",
        ),
        (
            BASE_TOML.replace("memory = 4000", "memory = 4000\nmemroy = 1"),
            "workers.ada.context.memroy",
        ),
        (BASE_TOML.replace("total = 48000", "total = 48000\nhistroy = 3"), "context.histroy"),
        (BASE_TOML + '\n[engine]\nkind = "echo"\nmodle = "x"\n', "engine.modle"),
        (BASE_TOML + '\n[connections.jira]\nhosts = []\nsecret = "x"\n', "connections.jira.secret"),
    ],
)
def test_unknown_key_is_an_error_naming_it(tmp_path: Path, toml: str, key: str) -> None:
    error = load_error(make_org(tmp_path, toml))
    assert error.key == key
    assert key.rsplit(".", 1)[-1] in str(error)
    assert key in str(error)
    assert str(tmp_path / "org.toml") in str(error)


@pytest.mark.parametrize(
    ("old", "new", "key", "expected"),
    [
        ("total = 48000", 'total = "big"', "context.total", "int"),
        ("memory = 4000", "memory = 4.5", "workers.ada.context.memory", "int"),
        ('connections = ["github"]', 'connections = "github"', "workers.ada.connections", "array"),
        ('workers = ["ada"]', "workers = [1]", "channels.releases.workers[0]", "str"),
        ('env = "GITHUB_TOKEN"', "env = 7", "connections.github.env", "str"),
    ],
)
def test_wrong_type_names_the_key_and_expected_type(
    tmp_path: Path, old: str, new: str, key: str, expected: str
) -> None:
    assert old in BASE_TOML
    error = load_error(make_org(tmp_path, BASE_TOML.replace(old, new, 1)))
    assert error.key == key
    assert key in str(error)
    assert f"Expected `{expected}" in str(error)


def test_out_of_range_budget_names_the_key(tmp_path: Path) -> None:
    error = load_error(make_org(tmp_path, BASE_TOML.replace("total = 48000", "total = 0")))
    assert error.key == "context.total"
    assert ">= 1" in str(error)


# Every table that takes durations, by one of its keys.
DURATION_KEYS = [
    *("daemon.session_idle_s", "daemon.drain_s", "daemon.lease_s", "daemon.idle_timeout_s"),
    *("engine.timeout_s", "workers.ada.engine.breaker_cooldown_s", "engines.big.timeout_s"),
    *("gateway.timeout_s", "telemetry.timeout_s"),
]
PAST_A_WEEK = [("inf", "<= 604800"), ("1e300", "<= 604800"), ("604801", "<= 604800")]
# Under the least a key takes: 0, or a second for a lease.
NOT_POSITIVE = [("nan", "Expected `float` >"), ("-inf", "Expected `float` >")]
COUNTS = [("daemon.task_workers", "4000000", "<= 1024"), ("engine.max_retries", "100000", "<= 100")]


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [(key, *bad) for key in DURATION_KEYS for bad in PAST_A_WEEK + NOT_POSITIVE] + COUNTS,
)
def test_a_duration_or_count_past_its_bound_is_an_error_naming_the_key(
    tmp_path: Path, key: str, value: str, says: str
) -> None:
    table, name = key.rsplit(".", 1)
    error = load_error(make_org(tmp_path, f"{BASE_TOML}\n[{table}]\n{name} = {value}\n"))
    assert error.key == key
    assert f"`{key}`" in str(error) and says in str(error)


def test_durations_and_counts_at_their_bounds_load(tmp_path: Path) -> None:
    bounds = "[daemon]\nsession_idle_s = 604800\nlease_s = 604800\ntask_workers = 1024\n"
    org = load_org(make_org(tmp_path, BASE_TOML + "\n" + bounds + "[engine]\nmax_retries = 100\n"))
    assert (org.daemon.session_idle_s, org.daemon.lease_s) == (604800, 604800)
    assert (org.daemon.task_workers, org.engine.max_retries) == (1024, 100)


@pytest.mark.parametrize(
    ("toml", "key", "says"),
    [
        ('[engine]\nkind = "openai"\n', "engine.model", "needs a model"),
        ('[engines.big]\nkind = "anthropic"\n', "engines.big.model", "needs a model"),
        ('[workers.ada.engine]\nkind = "openai"\n', "workers.ada.engine.model", "needs a model"),
        (
            '[engine]\nkind = "openai"\nmodel = "m"\nbase_url = "127.0.0.1:8080/v1"\n',
            "engine.base_url",
            "http:// or https://",
        ),
        (
            '[workers.grace.engine]\nbase_url = "ftp://models.example/v1"\n',
            "workers.grace.engine.base_url",
            "http:// or https://",
        ),
    ],
)
def test_an_engine_that_cannot_be_reached_is_an_error_naming_the_key(
    tmp_path: Path, toml: str, key: str, says: str
) -> None:
    error = load_error(make_org(tmp_path, BASE_TOML + "\n" + toml))
    assert error.key == key
    assert f"`{key}`" in str(error) and says in str(error)


def test_named_section_must_be_a_table(tmp_path: Path) -> None:
    error = load_error(make_org(tmp_path, "workers = 3\n"))
    assert error.key == "workers"


@pytest.mark.parametrize("name", ["../etc", "a/b", ".hidden", "-dash", "x" * 65, ""])
def test_unsafe_worker_name_is_refused_before_any_path_is_used(tmp_path: Path, name: str) -> None:
    root = tmp_path / "org"
    toml = BASE_TOML.replace("[workers.grace]", f'[workers."{name}"]').replace(
        '"grace"', f'"{name}"'
    )
    make_org(root, toml, workers=("ada",))
    # Were the name joined into a path, these files would make the load succeed.
    for planted in (root / "etc", root / "workers" / "a" / "b", root / "workers" / name):
        if planted.resolve().is_relative_to(tmp_path):
            planted.mkdir(parents=True, exist_ok=True)
            (planted / "identity.md").write_text("planted\n")
    with pytest.raises((ConfigError, InvalidIdError)) as caught:
        load_org(root)
    assert repr(name) in str(caught.value)


def test_unsafe_channel_name_is_refused(tmp_path: Path) -> None:
    toml = BASE_TOML.replace("[channels.releases]", '[channels."../releases"]')
    error = load_error(make_org(tmp_path, toml))
    assert "'../releases'" in str(error)
    assert error.key == "channels.../releases"


def test_missing_identity_names_the_file(tmp_path: Path) -> None:
    root = make_org(tmp_path, workers=("ada",))
    error = load_error(root)
    expected = root.resolve() / "workers" / "grace" / "identity.md"
    assert error.path == str(expected)
    assert str(expected) in str(error)
    assert "missing" in str(error)


def test_symlinked_identity_outside_the_org_is_refused(tmp_path: Path) -> None:
    root = make_org(tmp_path / "org")
    outside = tmp_path / "secret.md"
    outside.write_text("not an identity\n")
    identity = root / "workers" / "grace" / "identity.md"
    identity.unlink()
    identity.symlink_to(outside)
    error = load_error(root)
    assert "outside the org directory" in str(error)
    assert "grace" in str(error)


def test_symlinked_worker_directory_outside_the_org_is_refused(tmp_path: Path) -> None:
    root = make_org(tmp_path / "org", workers=("ada",))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "identity.md").write_text("I am grace.\n")
    (root / "workers" / "grace").symlink_to(elsewhere)
    error = load_error(root)
    assert "outside the org directory" in str(error)


def test_symlink_inside_the_org_is_allowed(tmp_path: Path) -> None:
    root = make_org(tmp_path / "org")
    shared = root / "shared.md"
    shared.write_text("shared identity\n")
    identity = root / "workers" / "grace" / "identity.md"
    identity.unlink()
    identity.symlink_to(shared)
    assert load_org(root).identities["grace"] == "shared identity\n"


def test_non_utf8_identity_is_refused(tmp_path: Path) -> None:
    root = make_org(tmp_path)
    (root / "workers" / "ada" / "identity.md").write_bytes(b"\xff\xfe broken")
    error = load_error(root)
    assert "UTF-8" in str(error)
    assert error.path.endswith(os.path.join("workers", "ada", "identity.md"))


def test_line_ends_are_read_as_newlines(tmp_path: Path) -> None:
    root = make_org(tmp_path)
    (root / "workers" / "ada" / "identity.md").write_bytes(b"I am ada.\r\nOld Mac line.\rEnd.\n")
    assert load_org(root).identities["ada"] == "I am ada.\nOld Mac line.\nEnd.\n"


def test_a_byte_order_mark_is_no_part_of_a_file(tmp_path: Path) -> None:
    # Some editors start a UTF-8 file with one: the worker must not see it,
    # nor a cached prefix change for it.
    plain = load_org(make_org(tmp_path / "plain"))
    root = make_org(tmp_path / "marked")
    bom = b"\xef\xbb\xbf"
    (root / "org.toml").write_bytes(bom + BASE_TOML.encode())
    (root / "workers" / "ada" / "identity.md").write_bytes(bom + b"I am ada.\r\n")
    (root / "channels" / "general" / "purpose.md").write_bytes(bom + b"Everyday talk.\n")
    marked = load_org(root)
    assert (marked.identities, marked.purposes) == (plain.identities, plain.purposes)
    assert marked.workers == plain.workers


def test_worker_connection_naming_an_unknown_service(tmp_path: Path) -> None:
    toml = BASE_TOML.replace('connections = ["github"]', 'connections = ["github", "jira"]')
    error = load_error(make_org(tmp_path, toml))
    assert error.key == "workers.ada.connections"
    assert "'jira', expected one of [connections.*]: ['github']" in str(error)


def test_channel_listing_an_unknown_worker(tmp_path: Path) -> None:
    toml = BASE_TOML.replace('workers = ["ada"]', 'workers = ["ada", "zoe"]')
    error = load_error(make_org(tmp_path, toml))
    assert error.key == "channels.releases.workers"
    assert "'zoe', expected one of [workers.*]:" in str(error)


# --- Org.scope -------------------------------------------------------------------------------


@pytest.fixture
def org(tmp_path: Path) -> Org:
    return load_org(make_org(tmp_path))


def test_scope_accepts_members_and_direct_runs(org: Org) -> None:
    scope = org.scope(Surface.SESSION, "grace", "general")
    assert (scope.surface, scope.worker, scope.channel) == (Surface.SESSION, "grace", "general")
    assert org.scope(Surface.TASK, "ada", "releases").channel == "releases"
    assert org.scope(Surface.DIRECT, "grace", None).channel is None


@pytest.mark.parametrize(
    ("surface", "worker", "channel", "error"),
    [
        (Surface.SESSION, "zoe", "general", NotFoundError),
        (Surface.TASK, "ada", "random", NotFoundError),
        (Surface.TASK, "grace", "releases", NotFoundError),
        (Surface.SESSION, "../ada", "general", InvalidIdError),
        (Surface.SESSION, "ada", "../general", InvalidIdError),
        (Surface.SESSION, "ada", "general/../releases", InvalidIdError),
        (Surface.DIRECT, "ada/..", None, InvalidIdError),
        (Surface.DIRECT, "ada", "general", RosterError),
        (Surface.TASK, "ada", None, RosterError),
    ],
)
def test_scope_refuses(
    org: Org, surface: Surface, worker: str, channel: str | None, error: type[RosterError]
) -> None:
    with pytest.raises(error) as caught:
        org.scope(surface, worker, channel)
    assert isinstance(caught.value, RosterError)


def test_scope_names_the_channel_a_worker_is_not_in(org: Org) -> None:
    with pytest.raises(NotFoundError) as caught:
        org.scope(Surface.TASK, "grace", "releases")
    assert caught.value.name == "grace"
    assert "releases" in str(caught.value)


def test_the_secrets_an_org_names_are_every_key_and_connection_env(tmp_path: Path) -> None:
    toml = BASE_TOML.replace(
        "[workers.grace]",
        '[workers.grace]\n[workers.grace.engine]\nkind = "openai"\nmodel = "m"\n'
        'api_key_env = "GRACE_KEY"',
    )
    toml += (
        '\n[engine]\nkind = "anthropic"\nmodel = "m"\napi_key_env = "MAIN_KEY"\n'
        '[engines.backup]\nkind = "openai"\nmodel = "m"\napi_key_env = "BACKUP_KEY"\n'
    )
    org = load_org(make_org(tmp_path, toml))
    assert org.secret_env_names() == {"GITHUB_TOKEN", "MAIN_KEY", "BACKUP_KEY", "GRACE_KEY"}
    assert load_org(make_org(tmp_path / "plain", BASE_TOML)).secret_env_names() == {"GITHUB_TOKEN"}
