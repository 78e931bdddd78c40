"""Settings: precedence (override > environment > project file > user file > default), sources, file errors."""
from __future__ import annotations

import pytest

from tolk_core import config
from tolk_core.errors import ConfigError


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    config.reset()
    return path


def test_default_and_source(tolk_env):
    assert config.get("JIT_BATCH_SIZE") == 32
    assert config.source("JIT_BATCH_SIZE").kind == "default"


def test_each_level_wins_over_the_next(tolk_env, tmp_path, monkeypatch):
    user = write(tmp_path / "xdg" / "tolk" / "config.toml", "jit_batch_size = 1\n")
    assert config.get("JIT_BATCH_SIZE") == 1
    assert str(config.source("JIT_BATCH_SIZE")) == f"user file {user} [jit_batch_size]"
    proj = write(tolk_env / "tolk.toml", "JIT_BATCH_SIZE = 2\n")
    assert (config.get("JIT_BATCH_SIZE"), config.source("JIT_BATCH_SIZE").path) == (2, proj)
    monkeypatch.setenv("JIT_BATCH_SIZE", "3")
    assert (config.get("JIT_BATCH_SIZE"), str(config.source("JIT_BATCH_SIZE"))) == (3, "environment JIT_BATCH_SIZE")
    with config.override(JIT_BATCH_SIZE=4):
        assert (config.get("JIT_BATCH_SIZE"), config.source("JIT_BATCH_SIZE").kind) == (4, "override")
    assert config.get("JIT_BATCH_SIZE") == 3
    assert [o.kind for o, _ in config.layers("JIT_BATCH_SIZE")] == ["environment", "project", "user", "default"]


def test_get_many_follows_every_level_between_calls(tolk_env, tmp_path, monkeypatch):
    """get_many remembers its answer while nothing it read changed: each level changed between two identical
    calls is seen, as `get` sees it (the environment, an override, the working directory's project file)."""
    names = ("JIT_BATCH_SIZE", "DEBUG")

    def both() -> tuple:
        return config.get_many(names), tuple(config.get(n) for n in names)
    assert both() == ((32, 0), (32, 0)) and config.get_many(names) == (32, 0)
    monkeypatch.setenv("JIT_BATCH_SIZE", "3")
    assert both() == ((3, 0), (3, 0))
    with config.override(DEBUG=2):
        assert both() == ((3, 2), (3, 2))
    assert both() == ((3, 0), (3, 0))
    monkeypatch.delenv("JIT_BATCH_SIZE")
    other = write(tmp_path / "other" / "tolk.toml", "JIT_BATCH_SIZE = 5\n").parent
    assert both() == ((32, 0), (32, 0))
    monkeypatch.chdir(other)
    assert both() == ((5, 0), (5, 0))
    write(other / "tolk.toml", "JIT_BATCH_SIZE = 6\n")  # a file changed on disk is read after reset()
    assert both() == ((6, 0), (6, 0))


def test_pyproject_tool_tolk_searched_upward(tolk_env, monkeypatch):
    write(tolk_env / "pyproject.toml", '[project]\nname = "x"\n[tool.tolk]\ndevice = "CPU"\ncc = "gcc"\n')
    sub = tolk_env / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    config.reset()
    assert config.get("DEVICE") == "CPU" and config.get("CC") == "gcc"
    assert str(config.source("DEVICE")).endswith("pyproject.toml [tool.tolk.device]")


def test_pyproject_without_tool_tolk_is_skipped(tolk_env, tmp_path, monkeypatch):
    write(tolk_env / "tolk.toml", "cc = 'clang'\n")
    inner = tolk_env / "inner"
    write(inner / "pyproject.toml", '[project]\nname = "y"\n')
    monkeypatch.chdir(inner)
    config.reset()
    assert config.get("CC") == "clang"


@pytest.mark.parametrize("text", ['[tool]\ntolk = { cc = "tcc" }\n', 'tool.tolk.cc = "tcc"\n',
                                  '[ tool . "tolk" ]\ncc = "tcc"\n'])
def test_pyproject_tool_tolk_in_any_toml_spelling(tolk_env, text):
    # the pre-check that skips the TOML parser for pyproject files without a tolk table must not miss these
    write(tolk_env / "pyproject.toml", text + '[project]\nname = "tolk-user"\n')  # top-level keys come first
    assert config.get("CC") == "tcc"


def test_tolk_toml_wins_within_one_directory(tolk_env):
    write(tolk_env / "pyproject.toml", '[tool.tolk]\ncc = "from-pyproject"\n')
    write(tolk_env / "tolk.toml", 'cc = "from-tolk-toml"\n')
    assert config.get("CC") == "from-tolk-toml"


def test_unknown_key_names_file_and_key_and_suggests(tolk_env):
    path = write(tolk_env / "tolk.toml", "jit_batchsize = 3\n")
    with pytest.raises(ConfigError) as e:
        config.get("JIT")
    msg = str(e.value)
    assert str(path) in msg and "jit_batchsize" in msg and "did you mean 'jit_batch_size'" in msg


def test_wrong_type_names_file_and_key(tolk_env):
    path = write(tolk_env / "pyproject.toml", '[tool.tolk]\njit = "yes"\n')
    with pytest.raises(ConfigError) as e:
        config.get("JIT")
    assert str(path) in str(e.value) and "tool.tolk.jit" in str(e.value) and "must be a number" in str(e.value)
    write(tolk_env / "pyproject.toml", '[tool.tolk]\ndevice = 3\n')
    with pytest.raises(ConfigError, match="DEVICE = 3 must be a string"):
        config.get("DEVICE")


def test_bad_toml_and_bad_environment(tolk_env, monkeypatch):
    path = write(tolk_env / "tolk.toml", "device = \n")
    with pytest.raises(ConfigError, match="invalid TOML") as e:
        config.get("DEVICE")
    assert str(path) in str(e.value)
    (tolk_env / "tolk.toml").unlink()
    config.reset()
    monkeypatch.setenv("DEBUG", "lots")
    with pytest.raises(ConfigError, match="environment DEBUG: DEBUG='lots' is not a valid int"):
        config.get("DEBUG")


def test_unknown_setting_name(tolk_env):
    with pytest.raises(ConfigError, match="did you mean 'DEBUG'"):
        config.get("DEBGU")
    with pytest.raises(ConfigError):
        with config.override(NOPE=1):
            pass


def test_no_config_skips_files(tolk_env, monkeypatch):
    write(tolk_env / "tolk.toml", "cc = 'x'\n")
    monkeypatch.setenv("TOLK_NO_CONFIG", "1")
    assert config.get("CC") == "cc" and config.files() == []


def test_files_lists_consulted_files(tolk_env, tmp_path):
    kinds = {k: status for k, _, status in config.files()}
    assert kinds["project"].startswith("not found") and kinds["user"] == "not found"
    write(tmp_path / "xdg" / "tolk" / "config.toml", "debug = 1\n")
    assert {k: s for k, _, s in config.files()}["user"] == "used"


# ---------------------------------------------------------------- malformed files and ill-typed values
def test_non_utf8_file_names_the_file(tolk_env):
    path = tolk_env / "tolk.toml"
    path.write_bytes(b"debug = 1  # caf\xe9\n")
    config.reset()
    with pytest.raises(ConfigError, match=rf"project file {path} is not UTF-8 text \(byte 16: invalid"):
        config.get("DEBUG")


@pytest.mark.parametrize("text, match", [
    ("debug = true\n", "DEBUG = true must be an integer, not a boolean \\(write 1\\)"),
    ("split_reduceop = false\n", "SPLIT_REDUCEOP = false must be an integer, not a boolean \\(write 0\\)"),
    ("fusion_work_bound = true\n", "FUSION_WORK_BOUND = true must be a number, not a boolean"),
    ("jit_batch_size = 2.5\n", "JIT_BATCH_SIZE = 2.5 must be an integer, not a float"),
    ("probe_timeout = nan\n", "PROBE_TIMEOUT = nan must be a number, not NaN"),
    ("debug = [1]\n", "DEBUG=\\[1\\] is not a valid int \\(got a list\\)"),
], ids=["bool-int", "bool-flag", "bool-float", "float-int", "nan", "list"])
def test_ill_typed_file_values_name_the_key_and_the_type(tolk_env, text, match):
    path = write(tolk_env / "tolk.toml", text)
    key = text.split()[0]
    with pytest.raises(ConfigError, match=rf"project file {path}: key {key}: {match}"):
        config.get(key.upper())


@pytest.mark.parametrize("text", ['[tool]\ntolk = 5\n', 'tool.tolk = "x"\n'])
def test_tool_tolk_that_is_not_a_table(tolk_env, text):
    path = write(tolk_env / "pyproject.toml", text)
    with pytest.raises(ConfigError, match=rf"{path}: key tool.tolk = .* must be a table of settings"):
        config.get("DEBUG")


def test_unbalanced_quote_in_cflags(tolk_env, monkeypatch):
    path = write(tolk_env / "tolk.toml", "cflags = '-O2 -DNAME=\"x'\n")
    with pytest.raises(ConfigError, match=rf"{path}: key cflags: CFLAGS = .* is not valid shell words "
                                          r"\(No closing quotation\): balance its quotes"):
        config.get("CFLAGS")
    (tolk_env / "tolk.toml").unlink()
    config.reset()
    monkeypatch.setenv("TOLK_CFLAGS", "-O2 'x")
    with pytest.raises(ConfigError, match="environment TOLK_CFLAGS: CFLAGS = .* is not valid shell words"):
        config.get("CFLAGS")
    monkeypatch.setenv("TOLK_CFLAGS", "-O2 '-DX=a b'")  # balanced quoting is taken as it is
    assert config.get("CFLAGS") == "-O2 '-DX=a b'"


@pytest.mark.parametrize("name, bad, good", [("REDUCEOP_SPLIT_SIZE", -1, 0), ("REDUCEOP_SPLIT_SIZE", 63, 62),
                                             ("JIT_BATCH_SIZE", -2, 0), ("DEBUG", -1, 0),
                                             ("REDUCEOP_SPLIT_THRESHOLD", -5, 0)])
def test_settings_out_of_range(tolk_env, monkeypatch, name, bad, good):
    path = write(tolk_env / "tolk.toml", f"{name.lower()} = {bad}\n")
    with pytest.raises(ConfigError, match=rf"{path}: key {name.lower()}: {name} = {bad} must be at least 0"):
        config.get(name)
    env = config.SETTINGS[name].env_var
    monkeypatch.setenv(env, str(bad))
    with pytest.raises(ConfigError, match=rf"environment {env}: {name} = '{bad}' must be at least 0"):
        config.get(name)
    with pytest.raises(ConfigError, match=f"override: {name} = {bad} must be at least"):
        with config.override(**{name: bad}):
            pass
    monkeypatch.setenv(env, str(good))
    assert config.get(name) == good  # the bounds themselves are allowed
