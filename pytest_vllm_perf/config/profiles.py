"""Tuning profiles: YAML files of vLLM engine arguments, environment and thresholds.

A profile is the unit a user compares ("chunked vs default"), so it must be
explicit, composable (``extends:``) and strict: a typo in a key is an error that
names the file and the key, never a silently ignored setting.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pytest_vllm_perf.core import yamlfile
from pytest_vllm_perf.core.errors import ProfileError, ThresholdError
from pytest_vllm_perf.core.registry import threshold_target, validate_tolerances

__all__ = [
    "CPU_DEFAULTS",
    "SHIPPED",
    "EngineSettings",
    "Profile",
    "ProfileError",
    "available",
    "diff",
    "engine_settings",
    "load",
    "search_path",
    "to_argv",
]

PROFILE_KEYS = frozenset(
    {"description", "extends", "engine", "env", "cpu", "thresholds", "tolerances"}
)
EngineValue = str | int | float | bool | list[Any] | dict[str, Any] | None

# Engine settings that only mean something on a GPU; the CPU engine ignores them by design.
GPU_ONLY_KEYS = frozenset({"gpu_memory_utilization"})

# What the CPU engine needs to start at all on a small shared machine (README, "Profiles"):
# eager mode boots in seconds, and an explicit KV size stops vLLM reserving 92% of RAM.
CPU_DEFAULTS: Mapping[str, EngineValue] = {
    "enforce_eager": True,
    "kv_cache_memory_bytes": 256 * 1024 * 1024,
}


@dataclass(frozen=True)
class Profile:
    """One resolved profile: ``extends`` applied, values validated."""

    name: str
    path: Path
    description: str = ""
    engine: Mapping[str, EngineValue] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    cpu: Mapping[str, EngineValue] = field(default_factory=dict)
    thresholds: Mapping[str, float] = field(default_factory=dict)
    tolerances: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "engine": dict(self.engine),
            "env": dict(self.env),
            "cpu": dict(self.cpu),
            "thresholds": dict(self.thresholds),
            "tolerances": dict(self.tolerances),
        }

    @property
    def hash(self) -> str:
        """Content hash: two profiles with the same settings compare as the same."""
        body = self.to_dict()
        body.pop("name")
        body.pop("description")
        text = json.dumps(body, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class EngineSettings:
    """The engine arguments a profile resolves to on one platform, with what was adapted."""

    args: Mapping[str, EngineValue]
    notes: tuple[str, ...] = ()


# The profiles that ship with the package: they resolve by name from any repository.
SHIPPED: Final = Path(__file__).resolve().parent.parent / "profiles"


def search_path(user_dir: Path | None) -> tuple[Path, ...]:
    """Where profiles are looked up, first match wins: the user's folder, then the shipped ones."""
    if user_dir is None or user_dir.resolve() == SHIPPED:
        return (SHIPPED,)
    return (user_dir, SHIPPED)


def _folders(where: Path | Sequence[Path]) -> tuple[Path, ...]:
    return search_path(where) if isinstance(where, Path) else tuple(where)


def available(where: Path | Sequence[Path]) -> list[str]:
    """Names of the profiles on a search path (a user folder also searches the shipped ones)."""
    return sorted(
        {p.stem for folder in _folders(where) if folder.is_dir() for p in folder.glob("*.yaml")}
    )


def load(name: str, where: Path | Sequence[Path]) -> Profile:
    """Load the profile ``name`` with its ``extends`` chain.

    ``where`` is the user's profiles folder (searched before the shipped profiles)
    or an explicit search path. A profile may extend one of its own name: the
    user's ``chunked.yaml`` with ``extends: chunked`` builds on the shipped one.
    """
    return _load(name, _folders(where), 0, ())


def _load(name: str, folders: tuple[Path, ...], start: int, chain: tuple[Path, ...]) -> Profile:
    found = next(
        (i for i in range(start, len(folders)) if (folders[i] / f"{name}.yaml").is_file()), None
    )
    if found is None:
        where = f" (extended by {chain[-1]})" if chain else ""
        close = difflib.get_close_matches(name, available(folders), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ProfileError(f"unknown vLLM profile {name!r}{where}{hint}; {_listing(folders)}")
    path = folders[found] / f"{name}.yaml"
    if path in chain:
        raise ProfileError(f"{path}: extends: cycle {' -> '.join(p.stem for p in (*chain, path))}")
    raw = _read_yaml(path)
    parent = raw.get("extends")
    base = None
    if parent:
        parent = _expect(path, "extends", parent, str)
        # a profile extending its own name continues the search after its own folder
        base = _load(parent, folders, found + 1 if parent == name else 0, (*chain, path))
    return _merge(name, path, raw, base)


def _listing(folders: tuple[Path, ...]) -> str:
    parts = []
    for folder in folders:
        names = sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []
        label = "shipped" if folder == SHIPPED else str(folder)
        found = ", ".join(names) or ("none" if folder.is_dir() else "no such folder")
        parts.append(f"{label}: {found}")
    return "available: " + "; ".join(parts)


def _read_yaml(path: Path) -> dict[str, Any]:
    raw = yamlfile.load(path, ProfileError, "the profile")
    if raw is None or raw == {}:  # an empty file ran as vLLM's defaults, unsaid
        raise ProfileError(
            f"{path}: an empty profile; give it a key ('extends: default' for vLLM's "
            "defaults, or a description)"
        )
    if not isinstance(raw, dict):
        raise ProfileError(f"{path}: a profile is a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - PROFILE_KEYS)
    if unknown:
        raise ProfileError(
            f"{path}: unknown key {unknown[0]!r}; allowed keys: {', '.join(sorted(PROFILE_KEYS))}"
        )
    return raw


def _merge(name: str, path: Path, raw: dict[str, Any], base: Profile | None) -> Profile:
    def section(key: str) -> dict[str, Any]:
        inherited = dict(getattr(base, key)) if base else {}
        inherited.update(_expect(path, key, raw.get(key) or {}, dict))
        return inherited

    engine = _engine_section(path, "engine", section("engine"))
    cpu = _engine_section(path, "cpu", section("cpu"))
    env = {str(k): _env_value(path, k, v) for k, v in section("env").items()}
    thresholds = _numbers(path, "thresholds", section("thresholds"))
    tolerances = _numbers(path, "tolerances", section("tolerances"))
    try:
        for key in thresholds:
            threshold_target(key)
    except ThresholdError as exc:
        raise ProfileError(f"{path}: thresholds: {exc}") from None
    try:
        validate_tolerances(tolerances)
    except ThresholdError as exc:
        raise ProfileError(f"{path}: tolerances: {exc}") from None
    description = _expect(path, "description", raw.get("description", ""), str)
    return Profile(name, path, description, engine, env, cpu, thresholds, tolerances)


def _expect(path: Path, key: str, value: Any, kind: type) -> Any:
    if not isinstance(value, kind):
        raise ProfileError(
            f"{path}: {key}: expected {kind.__name__}, got {type(value).__name__} ({value!r})"
        )
    return value


# engine arguments the plugin sets on every boot: a profile's own was found only after
# a boot, naming the wrong port
OWNED_ARGS: Final = {
    "port": "the plugin picks a free port for each server",
    "host": "the plugin binds every server to 127.0.0.1",
    "model": "the model comes from --vllm-model or the embedded preset",
}


def _engine_section(path: Path, key: str, values: dict[str, Any]) -> dict[str, EngineValue]:
    for arg, value in values.items():
        if arg in OWNED_ARGS:
            raise ProfileError(f"{path}: {key}.{arg}: not a profile's to set ({OWNED_ARGS[arg]})")
        if not isinstance(arg, str) or not arg.replace("_", "a").isalnum() or arg != arg.lower():
            raise ProfileError(f"{path}: {key}.{arg}: engine arguments are snake_case names")
        if not isinstance(value, str | int | float | bool | list | dict | type(None)):
            raise ProfileError(f"{path}: {key}.{arg}: unsupported value {value!r}")
    return values


def _env_value(path: Path, key: Any, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ProfileError(f"{path}: env.{key}: expected a string or number, got {value!r}")
    return str(value)


def _numbers(path: Path, key: str, values: dict[str, Any]) -> dict[str, float]:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ProfileError(f"{path}: {key}.{name}: expected a number, got {value!r}")
    return {str(k): float(v) for k, v in values.items()}


def engine_settings(
    profile: Profile,
    *,
    platform: str,
    model_max_len: int | None = None,
    native_bf16: bool = True,
) -> EngineSettings:
    """The engine arguments for ``platform`` ("cpu" or "cuda"), adapted where they cannot apply.

    On the CPU engine GPU-only keys are dropped and ``cpu:`` overrides apply over
    :data:`CPU_DEFAULTS`; where the CPU has no native bfloat16 (``native_bf16``
    False: an embedded model on a CPU without AVX-512 BF16 or AMX) the model runs in
    float32 unless a ``dtype`` is set. A ``max_model_len`` beyond the model's context
    is clamped. Every adaptation is returned as a note, so reports show what really ran.
    """
    args: dict[str, EngineValue] = {}
    notes: list[str] = []
    if platform == "cpu":
        args.update(CPU_DEFAULTS)
        for key, value in profile.engine.items():
            if key in GPU_ONLY_KEYS:
                notes.append(f"{key}={value} dropped: it has no meaning on the CPU engine")
            else:
                args[key] = value
        args.update(profile.cpu)
        if not native_bf16 and "dtype" not in args:
            notes.append(_float32(args))
    else:
        args.update(profile.engine)
    wanted = args.get("max_model_len")
    if model_max_len and isinstance(wanted, int) and wanted > model_max_len:
        args["max_model_len"] = model_max_len
        notes.append(f"max_model_len {wanted} clamped to {model_max_len}, the model's context")
    return EngineSettings(args, tuple(notes))


def _float32(args: dict[str, EngineValue]) -> str:
    """Float32 in ``args``, the KV cache's bytes doubled where they are the default, so
    that it holds the same tokens; the note. A bf16 matmul of a decode step's shape took
    x25-x31 a float32 one on an AVX2-only EPYC (bench/results/cpu/bf16-avx2.txt), and the
    small preset decoded at about 25 tokens/s there."""
    args["dtype"] = "float32"
    note = "dtype float32: this CPU has no native bfloat16 (AVX-512 BF16 or AMX)"
    default_kv = CPU_DEFAULTS["kv_cache_memory_bytes"]
    if args.get("kv_cache_memory_bytes") == default_kv and isinstance(default_kv, int):
        args["kv_cache_memory_bytes"] = 2 * default_kv
        note += (
            f"; KV cache {2 * default_kv >> 20} MiB, the tokens of {default_kv >> 20} MiB of bf16"
        )
    return note


def to_argv(args: Mapping[str, EngineValue]) -> list[str]:
    """Engine arguments as vLLM CLI flags: ``max_num_seqs: 4`` -> ``--max-num-seqs 4``."""
    argv: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value, sort_keys=True)]
        elif isinstance(value, list):
            argv += [flag, *(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


def diff(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Human-readable changes between two profile dicts: ``engine.max_num_seqs 256 -> 1``."""
    lines: list[str] = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        name = f"{prefix}{key}"
        if isinstance(before, Mapping) and isinstance(after, Mapping):
            lines += diff(before, after, name + ".")
        elif before != after:
            lines.append(f"{name} {_show(before)} -> {_show(after)}")
    return lines


def _show(value: Any) -> str:
    return "(unset)" if value is None else json.dumps(value, sort_keys=True)
