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
