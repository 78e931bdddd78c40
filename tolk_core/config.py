"""Settings and where each value came from. Values only: device resolution lives in `plugins/`.

Public API (stable):
  get(name)             the effective, typed value of a setting
  override(**values)    a context manager that pins values (tests, notebooks)
  source(name)          where the effective value came from, e.g. "environment TOLK_DEVICE"
  layers(name)          every level that sets `name`, highest precedence first, as (Origin, value)
  files()               the config files consulted (project and user), found or not
  reset()               forget the cached files (tests)

Precedence, highest first: override > environment > project file > user file > default.
Project file: the nearest ``tolk.toml`` (top-level keys) or ``pyproject.toml`` with ``[tool.tolk]``, searched
upward from the working directory; ``tolk.toml`` wins within one directory. User file:
``$XDG_CONFIG_HOME/tolk/config.toml`` (default ``~/.config``). ``TOLK_NO_CONFIG=1`` skips both files.
File keys are the setting names in any case (``device`` or ``DEVICE``).

Every value is checked where it is read (a ConfigError names the file and key, or the environment variable, the
value and what is expected): a string setting takes a string; a number setting a number (from a file not a
string, nor a TOML boolean: ``true`` is not 1 there; an int setting no float); some settings a range
(``Setting.check``, e.g. REDUCEOP_SPLIT_SIZE >= 0) and CFLAGS balanced shell quoting. An override from Python
may pass a bool for an int setting (``override(NOOPT=True)``).
"""
from __future__ import annotations

import contextlib
import difflib
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tolk_core.errors import ConfigError


def in_range(low: float, high: float = math.inf) -> Callable[[Any], str | None]:
    """A `Setting.check`: the value must lie in [low, high]."""
    def check(v: Any) -> str | None:
        if low <= v <= high:
            return None
        return f"must be at least {low}" + (f" and at most {high}" if high != math.inf else "")
    return check


def seconds(v: Any) -> str | None:
    """A `Setting.check`: a time limit, a finite number of seconds above 0."""
    if math.isfinite(v) and v > 0:
        return None
    return "must be a finite number of seconds above 0 (e.g. 10)"


def start_choices(v: str) -> str | None:
    # the syntax only: the knobs' names are the optimizer's (codegen/choices.py), checked where they are read
    if re.fullmatch(r"\s*(\w+\s*=\s*-?\d+\s*)(,\s*\w+\s*=\s*-?\d+\s*)*", v) is None:
        return "must be KNOB=INTEGER[,KNOB=INTEGER...], e.g. 'MAX_ACCUMULATORS=4,UNROLL_MAX=1'"
    return None


def shell_words(v: str) -> str | None:
    """A `Setting.check`: the value splits into shell words (as the C backend splits CFLAGS)."""
    import shlex
    try:
        shlex.split(v)
    except ValueError as e:
        return f"is not valid shell words ({e}): balance its quotes, or escape a literal quote with a backslash"
    return None


@dataclass(frozen=True)
class Setting:
    name: str
    type: type
    default: Any
    doc: str
    env: str = ""  # environment variable; defaults to the setting's name
    check: Callable[[Any], str | None] | None = None  # what is wrong with a converted value, None if nothing

    @property
    def env_var(self) -> str:
        return self.env or self.name


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("DEBUG", int, 0, "1 device opens and kernel counts, 2 one line per kernel and per batched graph replay, "
            "3 scheduled graph, 4 rendered source, 5+ rewrites", check=in_range(0)),
    Setting("SPEC", int, 0, "validate each stage's graph against its spec", check=in_range(0)),
    Setting("JIT", int, 1, "0 runs jitted functions eagerly; 2 captures but never batches into graphs",
            check=in_range(0)),
    Setting("JIT_BATCH_SIZE", int, 32, "launches in the first graph batch; doubles per batch", check=in_range(0)),
    Setting("NO_MEMORY_PLANNER", int, 0, "1 gives every JIT intermediate its own storage instead of arena views",
            check=in_range(0)),
    Setting("SPLIT_REDUCEOP", int, 1, "split large reductions over few outputs in two kernels", check=in_range(0)),
    Setting("REDUCEOP_SPLIT_SIZE", int, 22, "log2 cap on the first stage's output of a split reduction",
            check=in_range(0, 62)),
    Setting("REDUCEOP_SPLIT_THRESHOLD", int, 32768, "input/output element ratio above which a reduction splits",
            check=in_range(0)),
    Setting("PLACEMENT_STACK_THRESHOLD", int, 16384, "bytes above which a value that must not be inlined gets a "
            "device buffer instead of kernel-local scratch; <= 0 turns the size check off (always kernel-local)"),
    Setting("FUSION_WORK_BOUND", float, 2.0, "the most an inlined value may multiply its kernel's work (executed "
            "over nominal operations, see docs/placements.md); a value broadcast past it is stored; <= 0: no bound"),
    Setting("FUSION_MIN_EXCESS", int, 32768, "extra operations below which recomputing an inlined value is always "
            "accepted, whatever its ratio (storing it would cost a kernel launch and a round trip through memory)",
            check=in_range(0)),
    Setting("KERNEL_MAX_OPS", int, 4096, "operations one fused kernel may hold before the scheduler stores an "
            "intermediate to split it (a compiler's time grows faster than the kernel); <= 0: no budget"),
    Setting("KERNEL_MAX_BUFFERS", int, 64, "buffers one fused kernel may read before the scheduler splits it; "
            "<= 0: no budget"),
    Setting("COMPILE_WARN_SECONDS", float, 10.0, "a compile taking longer warns, naming its largest kernels"),
    Setting("VIZ", int, 0, "1 records every schedule (graphs, placements, kernels, rewrites, sources, launches) "
            "and writes the HTML view at exit (docs/viz.md)", check=in_range(0)),
    Setting("VIZ_PATH", str, None, "where VIZ=1 writes its page (default viz/index.html in the cache directory)",
            env="TOLK_VIZ_PATH"),
    Setting("PROGRESS_SECONDS", float, 2.0, "seconds a schedule's compile runs before a one-line progress display "
            "shows on a terminal (stderr a TTY); <= 0: never", env="TOLK_PROGRESS_SECONDS"),
    Setting("COMPILE_TIMEOUT", float, 300.0, "seconds one compiler call may take before it is stopped and the "
            "compile fails with CompileTimeoutError; <= 0: no limit", env="TOLK_COMPILE_TIMEOUT"),
    Setting("NOOPT", int, 0, "disable kernel optimizations (upcast, unroll, threads, locals)", check=in_range(0)),
    Setting("BEAM", int, 0, "n > 0: search the plan of each kernel not tuned before at its first launch, a beam of "
            "n plans wide, and keep the result in the tuning cache (docs/tuning.md)", env="TOLK_BEAM",
            check=in_range(0)),
    Setting("TUNE_KERNEL_SECONDS", float, 30.0, "seconds one kernel's plan search may take", check=seconds),
    Setting("TUNE_PROGRAM_SECONDS", float, 600.0, "seconds all plan searches of a process may take together",
            check=seconds),
    Setting("TUNE_START", str, None, "optimizer choices KNOB=V[,KNOB=V...] that every kernel without a tuning entry "
            "is planned with and a search (BEAM) starts from; unset: the heuristics' own (to measure what the "
            "search recovers from a poor plan, docs/tuning.md)", env="TOLK_TUNE_START", check=start_choices),
    Setting("DEVICE", str, None, "device to use: NAME[:index]; from the environment a demand (a comma list means "
            "the first available), from a file a preference", env="TOLK_DEVICE"),
    Setting("CACHE_DIR", str, None, "compile cache directory (default $XDG_CACHE_HOME/tolk)", env="TOLK_CACHE_DIR"),
    Setting("DISABLE_COMPILER_CACHE", int, 0, "1 skips the on-disk compile cache", env="TOLK_DISABLE_COMPILER_CACHE",
            check=in_range(0)),
    Setting("CC", str, "cc", "C compiler for C-based backends", env="TOLK_CC"),
    Setting("CFLAGS", str, "-O2 -march=native -fno-math-errno", "C compiler flags (-shared -fPIC are always added)",
            env="TOLK_CFLAGS", check=shell_words),
    Setting("CUDA_ARCH", str, "sm_90", "CUDA target architecture the CUDA compiler emits a cubin for",
            env="TOLK_CUDA_ARCH"),
    Setting("CPU_DEVICES", int, 1, "virtual CPU devices the CPU plugin offers (CPU:0 .. CPU:n-1; 'CPU' is CPU:0)",
            env="TOLK_CPU_DEVICES", check=in_range(1, 64)),
    Setting("CPU_CACHE_SIZES", str, None, "L1,L2,L3 cache sizes the CPU matmul plan is sized from, e.g. "
            "32K,1M,32M (default: what the OS reports, docs/performance.md)", env="TOLK_CPU_CACHE_SIZES"),
    Setting("CPU_VECTOR_BYTES", int, 0, "vector register width (bytes: 16, 32, 64) CPU kernels are planned for "
            "(0: what the C compiler targets with CFLAGS)", env="TOLK_CPU_VECTOR_BYTES", check=in_range(0, 64)),
    Setting("CPU_THREADS", int, 0, "OpenMP threads of each virtual CPU device when CPU_DEVICES > 1 "
            "(0: the cores divided by CPU_DEVICES, at least 1)", env="TOLK_CPU_THREADS", check=in_range(0)),
    Setting("CPU_SPIN_COUNT", int, 0, "iterations a CPU kernel's OpenMP threads spin waiting for the next "
            "parallel loop before they sleep (libgomp's GOMP_SPINCOUNT; 0: they sleep at once). About 30000 helps a "
            "machine of one's own and costs processes that share the cores (docs/performance.md, "
            "\"Threads that sleep\")", env="TOLK_CPU_SPIN_COUNT", check=in_range(0)),
    Setting("CPU_KEEP_AWAKE", float, 1e-3, "seconds a bound CPU device's worker cores are kept awake after a "
            "parallel kernel, by one thread per core that yields it to any other thread and backs off where another "
            "thread wants the core (so the next kernel's workers start at once); 0: they go idle "
            "(docs/performance.md, \"Cores kept awake\")", env="TOLK_CPU_KEEP_AWAKE", check=in_range(0, 1)),
    Setting("CPU_BIND", int, 1, "1: a CPU device whose OpenMP team has all the cores (or its virtual device's "
            "share) keeps one thread per core while its parallel kernels run; 0: the OS places them "
            "(docs/performance.md, \"Threads that share a core\")", env="TOLK_CPU_BIND", check=in_range(0, 1)),
    Setting("CPU_ASYNC", int, 1, "1: a CPU device's batches of single-threaded kernels (an eager realize's "
            "replay) run on a thread of the device's own while Python goes on; everything that touches its memory "
            "waits for them. 0: every launch runs on the calling thread (docs/performance.md, \"Launches that do "
            "not wait\")", env="TOLK_CPU_ASYNC", check=in_range(0, 1)),
    Setting("DEVICE_THREADS", int, 2, "whether devices launch at the same time, each from its own thread: 1 always, "
            "0 never (one after another), 2 while the load average leaves a core free per device "
            "(docs/multi-device.md)", env="TOLK_DEVICE_THREADS", check=in_range(0, 2)),
    Setting("RING_ALLREDUCE_THRESHOLD", int, 262144, "elements above which an allreduce over more than 2 devices "
            "uses the ring algorithm instead of the naive one (docs/multi-device.md)", check=in_range(0)),
    Setting("PROBE_TIMEOUT", float, 10.0, "seconds a backend probe may take before it counts as unavailable",
            env="TOLK_PROBE_TIMEOUT", check=seconds),
    Setting("PLUGIN_IMPORT_TIMEOUT", float, 10.0, "seconds a plugin's entry-point module may take to import before "
            "the plugin counts as broken (the other plugins load meanwhile)", env="TOLK_PLUGIN_IMPORT_TIMEOUT",
            check=seconds),
    Setting("PLUGINS", str, None, "allow-list of plugins (entry-point or distribution names, comma separated)",
            env="TOLK_PLUGINS"),
    Setting("DISABLE_PLUGINS", str, None, "deny-list of plugins (entry-point or distribution names)",
            env="TOLK_DISABLE_PLUGINS"),
    Setting("COLLECTIVES", str, None, "collectives provider a process group joins (e.g. MPI, TCP); default: the "
            "highest-priority available one", env="TOLK_COLLECTIVES"),
    Setting("COLLECTIVES_TIMEOUT", float, 60.0, "seconds a collective operation (or joining a group) may wait for "
            "the other ranks before it raises CollectiveTimeoutError on this rank", env="TOLK_COLLECTIVES_TIMEOUT",
            check=seconds),
)}


@dataclass(frozen=True)
class Origin:
    """Where a value came from. kind: override | environment | project | user | default."""
    kind: str
    path: Path | None = None
    key: str = ""

    def __str__(self) -> str:
        if self.kind == "environment":
            return f"environment {self.key}"
        if self.kind in ("project", "user"):
            return f"{self.kind} file {self.path} [{self.key}]"
        return self.kind

    @property
    def is_demand(self) -> bool:
        """Values given for this run (override, environment) are demands; file values are preferences."""
        return self.kind in ("override", "environment")


_overrides: dict[str, Any] = {}
# what _files() returns: the consulted files as (kind, path, status), and each setting's values from them
_FileValues = tuple[list[tuple[str, Path, str | None]], dict[str, list[tuple[Origin, Any]]]]
_file_cache: dict[tuple[str, str, str], _FileValues] = {}


def _convert(setting: Setting, raw: Any, where: str) -> Any:
    """`raw` (from `where`: a file and key, an environment variable, an override) as `setting`'s type, checked
    against its range; a ConfigError naming `where`, the value and what is expected otherwise."""
    if raw is None:
        return None
    from_file = where.startswith(("project", "user"))
    kind = "an integer" if setting.type is int else "a number"
    if setting.type is str and not isinstance(raw, str):
        raise ConfigError(f"{where}: {setting.name} = {raw!r} must be a string")
    if setting.type in (int, float) and isinstance(raw, str) and from_file:
        raise ConfigError(f"{where}: {setting.name} = {raw!r} must be a number, not a string")
    if setting.type in (int, float) and isinstance(raw, bool) and from_file:  # bool is an int to Python, not to us
        raise ConfigError(f"{where}: {setting.name} = {str(raw).lower()} must be {kind}, not a boolean "
                          f"(write {int(raw)})")
    if setting.type is int and isinstance(raw, float):  # int() would truncate it without a word
        raise ConfigError(f"{where}: {setting.name} = {raw!r} must be an integer, not a float")
    try:
        value = setting.type(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {setting.name}={raw!r} is not a valid {setting.type.__name__} "
                          f"(got a {type(raw).__name__})") from None
    if setting.type is float and math.isnan(value):
        problem = setting.check(value) if setting.check is not None else None
        raise ConfigError(f"{where}: {setting.name} = {raw!r} must be a number, not NaN"
                          + (f"; it {problem}" if problem else ""))
    if setting.check is not None and (problem := setting.check(value)) is not None:
        raise ConfigError(f"{where}: {setting.name} = {raw!r} {problem}")
    return value


def _lookup(name: str) -> Setting:
    setting = SETTINGS.get(name)
    if setting is None:
        close = difflib.get_close_matches(name.upper(), SETTINGS, n=1)
        raise ConfigError(f"unknown setting {name!r}" + (f"; did you mean {close[0]!r}?" if close else ""))
    return setting


def _user_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tolk" / "config.toml"


def _project_candidates() -> list[Path]:
    """Files consulted for the project level, nearest first (tolk.toml before pyproject.toml per dir)."""
    out = []
    d = Path.cwd().resolve()
    for parent in (d, *d.parents):
        out += [parent / "tolk.toml", parent / "pyproject.toml"]
    return out


# a [tool.tolk] table in any TOML spelling: a `tool.tolk` key path (headers, dotted keys, quotes, spaces) or a
# bare [tool] table whose keys may include tolk
_MAY_HAVE_TOOL_TOLK = re.compile(r"""\btool["']?\s*\.\s*["']?tolk\b|^\s*\[\s*["']?tool["']?\s*\]""", re.M)


def _read_table(path: Path, kind: str) -> dict[str, Any] | None:
    """The tolk table of `path`, or None when the file does not configure tolk."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{kind} file {path} is not UTF-8 text (byte {e.start}: {e.reason}): TOML files are "
                          "UTF-8; save it in that encoding") from None
    if path.name == "pyproject.toml" and not _MAY_HAVE_TOOL_TOLK.search(text):  # skip the TOML parser
        return None
    import tomllib  # only for a file that may configure tolk: the import is ~5 ms of a start-up

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{kind} file {path}: invalid TOML: {e}") from None
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        table = tool.get("tolk") if isinstance(tool, dict) else None
        if table is not None and not isinstance(table, dict):
            raise ConfigError(f"{kind} file {path}: key tool.tolk = {table!r} must be a table of settings (a "
                              "[tool.tolk] section of key = value lines)")
        return table
    return data


def _validate(table: dict[str, Any], path: Path, kind: str) -> dict[str, tuple[Origin, Any]]:
    out: dict[str, tuple[Origin, Any]] = {}
    for key, raw in table.items():
        name = key.upper()
        prefix = "tool.tolk." if path.name == "pyproject.toml" else ""
        where = f"{kind} file {path}: key {prefix}{key}"
        if name not in SETTINGS:
            close = difflib.get_close_matches(name, SETTINGS, n=1)
            raise ConfigError(f"{where}: unknown setting" + (f"; did you mean {close[0].lower()!r}?" if close else "")
                              + f" (known: {', '.join(k.lower() for k in SETTINGS)})")
        out[name] = (Origin(kind, path, prefix + key), _convert(SETTINGS[name], raw, where))
    return out


def _files() -> _FileValues:
    """(consulted files as (kind, path, status), values per setting from the files, project first)."""
    cache_key = (os.getcwd(), os.environ.get("XDG_CONFIG_HOME", ""), os.environ.get("TOLK_NO_CONFIG", ""))
    if cache_key in _file_cache:
        return _file_cache[cache_key]
    consulted: list[tuple[str, Path, str | None]] = []
    values: dict[str, list[tuple[Origin, Any]]] = {}
    if os.environ.get("TOLK_NO_CONFIG", "") not in ("", "0"):
        result = (consulted, values)
        _file_cache[cache_key] = result
        return result
    project = None
    for cand in _project_candidates():
        if cand.is_file() and (table := _read_table(cand, "project")) is not None:
            project = (cand, table)
            break
    consulted.append(("project", project[0] if project else Path.cwd() / "tolk.toml",
                      "used" if project else "not found (searched upward for tolk.toml / [tool.tolk])"))
    user = _user_file()
    user_table = _read_table(user, "user") if user.is_file() else None
    consulted.append(("user", user, "used" if user_table is not None else "not found"))
    for kind, found in (("project", project), ("user", (user, user_table) if user_table is not None else None)):
        if found:
            for name, ov in _validate(found[1], found[0], kind).items():
                values.setdefault(name, []).append(ov)
    result = (consulted, values)
    _file_cache[cache_key] = result
    return result


def layers(name: str) -> list[tuple[Origin, Any]]:
    """Every level that sets `name`, highest precedence first (the default is always last)."""
    setting = _lookup(name)
    out: list[tuple[Origin, Any]] = []
    if name in _overrides:
        out.append((Origin("override"), _overrides[name]))
    if (raw := os.environ.get(setting.env_var)) is not None and raw != "":
        out.append((Origin("environment", key=setting.env_var),
                    _convert(setting, raw, f"environment {setting.env_var}")))
    out += _files()[1].get(name, [])
    out.append((Origin("default"), setting.default))
    return out


def get(name: str) -> Any:
    """The effective value of setting `name`: override > environment > project file > user file > default
    (`layers(name)[0][1]`, without building every layer: passes read settings on every call); answered from
    `get_many`'s memo while nothing it reads from changed (a jitted call reads two settings)."""
    if _ENV_DATA is not None:
        return get_many((name,))[0]
    if name in _overrides:
        return _overrides[name]
    setting = _lookup(name)
    if (raw := os.environ.get(setting.env_var)) is not None and raw != "":
        return _convert(setting, raw, f"environment {setting.env_var}")
    found = _files()[1].get(name)
    return found[0][1] if found else setting.default


# get_many's answers per tuple of names, with what they were read from: the overrides, the process environment
# and the working directory (where the project file is looked up). CPython keeps os.environ's data in a dict,
# which compares with a snapshot in C; reading each setting through os.environ cost ~1 us a name, and the
# schedule cache reads a dozen on every realize (docs/performance.md, "Eager steps").
_ENV_DATA: dict | None = getattr(os.environ, "_data", None)
_many_memo: dict[tuple[str, ...], tuple[dict, dict[str, Any], str, tuple[Any, ...]]] = {}


def get_many(names: tuple[str, ...]) -> tuple[Any, ...]:
    """`tuple(get(n) for n in names)`, consulting the config files once, and answered again without reading
    anything while the overrides, the environment and the working directory are what they were (the schedule
    cache's key reads its settings on every realize)."""
    if _ENV_DATA is not None:
        hit = _many_memo.get(names)
        cwd = os.getcwd()
        if hit is not None and hit[2] == cwd and hit[1] == _overrides and hit[0] == _ENV_DATA:
            return hit[3]
        out = _read_many(names)
        _many_memo[names] = (dict(_ENV_DATA), dict(_overrides), cwd, out)
        return out
    return _read_many(names)


def _read_many(names: tuple[str, ...]) -> tuple[Any, ...]:
    files = None
    out = []
    for name in names:
        if name in _overrides:
            out.append(_overrides[name])
            continue
        setting = _lookup(name)
        if (raw := os.environ.get(setting.env_var)) is not None and raw != "":
            out.append(_convert(setting, raw, f"environment {setting.env_var}"))
            continue
        if files is None:
            files = _files()[1]
        found = files.get(name)
        out.append(found[0][1] if found else setting.default)
    return tuple(out)


def source(name: str) -> Origin:
    """Where the effective value of `name` came from."""
    return layers(name)[0][0]


def files() -> list[tuple[str, Path, str | None]]:
    """The config files consulted, as (level, path, status)."""
    return list(_files()[0])


def reset() -> None:
    """Forget cached config files (they are re-read on next use)."""
    _file_cache.clear()
    _many_memo.clear()


@contextlib.contextmanager
def override(**values: Any) -> Iterator[None]:
    """Pin settings for the duration of a `with` block."""
    for k in values:
        _lookup(k)
    saved = dict(_overrides)
    _overrides.update({k: _convert(SETTINGS[k], v, "override") for k, v in values.items()})
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)
