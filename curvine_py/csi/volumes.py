"""What a CSI volume is, as pure values: StorageClass parameters, capacity ranges, capabilities,
the opaque volume id, the directory a volume lives in, and the record kept on that directory.

A volume is a directory `<basePath>/<dir>` in the namespace. Its id is `cv-` + 32 hex digits of
sha256(name): stable (the same name always gives the same id, which makes CreateVolume idempotent
even after a crash), opaque, and far below the spec's 128 bytes whatever the name or base path.
The record (JSON, in an xattr of the directory) says which name and id own the directory, its
capacity and its parameters; the controller's index maps ids to directories.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from curvine_py.csi.errors import internal, invalid
from curvine_py.proto.csi.v1 import csi_pb2 as csi

DEFAULT_BASE_PATH = "/csi"
RECORD_XATTR = "trusted.curvine.csi.volume"
MAX_NAME_BYTES = 128            # the spec's limit on names and ids
MAX_REPLICAS = 100
CLASSES = ("cache", "durable")
ON_DELETE = ("delete", "retain")
# Added by external-provisioner (--extra-create-metadata) and by Kubernetes itself: informative only.
KUBERNETES_PREFIX = "csi.storage.k8s.io/"
KNOWN_PARAMETERS = {"class", "replicas", "ttl", "basePath", "onDelete", "maxInodes"}

_ID = re.compile(r"^cv-[0-9a-f]{32}$")
_SAFE_DIR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)?$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

Mode = csi.VolumeCapability.AccessMode
SUPPORTED_MODES = frozenset({Mode.SINGLE_NODE_WRITER, Mode.SINGLE_NODE_READER_ONLY, Mode.MULTI_NODE_READER_ONLY,
                             Mode.MULTI_NODE_MULTI_WRITER})
READ_ONLY_MODES = frozenset({Mode.SINGLE_NODE_READER_ONLY, Mode.MULTI_NODE_READER_ONLY})
# What a CO may name as fs_type: ours is a FUSE file system, not a block device to format.
FS_TYPES = frozenset({"", "fuse", "fuse.curvine", "curvine"})


@dataclass(frozen=True, slots=True)
class Parameters:
    """StorageClass parameters, validated."""

    storage_class: str = "cache"
    replicas: int = 0                    # 0: the class default
    ttl_ms: int = 0                      # 0: no TTL
    base_path: str = DEFAULT_BASE_PATH
    on_delete: str = "delete"
    max_inodes: int = 0                  # 0: no inode quota


def parse_duration_ms(text: str) -> int:
    match = _DURATION.match(text.strip())
    if not match:
        raise invalid(f"ttl={text!r}: expected a duration such as 3600, 90s, 30m, 12h or 7d")
    return int(match.group(1)) * _UNIT_MS[match.group(2) or "s"]


def normalize_path(path: str) -> str:
    if not path.startswith("/"):
        raise invalid(f"basePath={path!r} must be an absolute path")
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise invalid(f"basePath={path!r} may not contain . or ..")
    return "/" + "/".join(parts)


def parse_parameters(raw: dict[str, str], default_base: str = DEFAULT_BASE_PATH) -> Parameters:
    unknown = sorted(k for k in raw if k not in KNOWN_PARAMETERS and not k.startswith(KUBERNETES_PREFIX))
    if unknown:
        raise invalid(f"unknown StorageClass parameters {unknown}; known: {sorted(KNOWN_PARAMETERS)}")
    storage_class = raw.get("class", "cache")
    if storage_class not in CLASSES:
        raise invalid(f"class={storage_class!r}: expected one of {list(CLASSES)}")
    replicas = _int_parameter(raw, "replicas", 1, MAX_REPLICAS, f"expected 1..{MAX_REPLICAS}")
    ttl_ms = parse_duration_ms(raw["ttl"]) if "ttl" in raw else 0
    base = normalize_path(raw.get("basePath", default_base))
    on_delete = raw.get("onDelete", "delete")
    if on_delete not in ON_DELETE:
        raise invalid(f"onDelete={on_delete!r}: expected one of {list(ON_DELETE)}")
    max_inodes = _int_parameter(raw, "maxInodes", 1, None, "expected at least 1 (leave it out for no limit)")
    return Parameters(storage_class, replicas, ttl_ms, base, on_delete, max_inodes)


def _int_parameter(raw: dict[str, str], name: str, low: int, high: int | None, expected: str) -> int:
    """An integer parameter within [low, high] (no upper bound when None); 0 when absent."""
    if name not in raw:
        return 0
    try:
        value = int(raw[name])
    except ValueError:
        raise invalid(f"{name}={raw[name]!r} is not a number") from None
    if value < low or (high is not None and value > high):
        raise invalid(f"{name}={value}: {expected}")
    return value


def capacity_of(capacity: csi.CapacityRange | None, *, required_field: bool = False) -> int:
    """The quota for a capacity range: the required bytes, else the limit, else 0 (no quota)."""
    if capacity is None or (capacity.required_bytes == 0 and capacity.limit_bytes == 0):
        if required_field:
            raise invalid("capacity_range is required")
        return 0
    required, limit = capacity.required_bytes, capacity.limit_bytes
    if required < 0 or limit < 0:
        raise invalid("capacity_range bytes must not be negative")
    if limit and required > limit:
        raise invalid(f"capacity_range: required_bytes {required} > limit_bytes {limit}")
    return required or limit


def capacity_fits(capacity: int, wanted: csi.CapacityRange | None) -> bool:
    """Whether an existing volume's capacity satisfies a (repeated) request's range."""
    if wanted is None:
        return True
    if wanted.required_bytes and capacity < wanted.required_bytes:
        return False
    return not (wanted.limit_bytes and (capacity == 0 or capacity > wanted.limit_bytes))


def check_capability(capability: csi.VolumeCapability) -> str:
    """'' when the capability is supported, else why not (for ValidateVolumeCapabilities)."""
    if capability.HasField("block"):
        return "block access is not supported: curvine volumes are file systems (use mount access)"
    if not capability.HasField("mount"):
        return "an access type (mount) is required"
    if capability.mount.fs_type not in FS_TYPES:
        return f"fs_type {capability.mount.fs_type!r} is not supported (curvine volumes are FUSE)"
    if not capability.HasField("access_mode") or capability.access_mode.mode not in SUPPORTED_MODES:
        mode = Mode.Mode.Name(capability.access_mode.mode) if capability.HasField("access_mode") else "missing"
        return f"access mode {mode} is not supported"
    return ""


def require_capabilities(capabilities: Any) -> None:
    """Raises INVALID_ARGUMENT unless every capability is present and supported."""
    if not capabilities:
        raise invalid("volume_capabilities are required")
    for capability in capabilities:
        require_capability(capability)


def require_capability(capability: csi.VolumeCapability | None) -> None:
    if capability is None or capability.ByteSize() == 0:
        raise invalid("volume_capability is required")
    why = check_capability(capability)
    if why:
        raise invalid(why)


def volume_id(name: str) -> str:
    return "cv-" + hashlib.sha256(name.encode()).hexdigest()[:32]


def is_volume_id(text: str) -> bool:
    return bool(_ID.fullmatch(text))


def check_name(name: str) -> None:
    if not name:
        raise invalid("name is required")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise invalid(f"name longer than {MAX_NAME_BYTES} bytes")


def directory_for(name: str, base_path: str) -> str:
    """Names that are plain file names keep their name (pvc-<uid> stays readable); others use the id."""
    leaf = name if _SAFE_DIR.match(name) else volume_id(name)
    return f"{base_path.rstrip('/')}/{leaf}"


@dataclass(frozen=True, slots=True)
class VolumeRecord:
    """Stored on the volume's directory: who owns it and how it was made."""

    volume_id: str
    name: str
    path: str
    capacity: int
    storage_class: str
    replicas: int
    ttl_ms: int
    on_delete: str
    max_inodes: int = 0

    @classmethod
    def new(cls, name: str, path: str, capacity: int, params: Parameters) -> VolumeRecord:
        return cls(volume_id(name), name, path, capacity, params.storage_class, params.replicas, params.ttl_ms,
                   params.on_delete, params.max_inodes)

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> VolumeRecord:
        try:
            fields = json.loads(raw)
            # fields added later have defaults: records written before them still read
            return cls(**{k: fields[k] for k in cls.__dataclass_fields__ if k in fields})
        except (ValueError, KeyError, TypeError) as exc:
            raise internal(f"unreadable volume record: {exc}") from None

    def with_capacity(self, capacity: int) -> VolumeRecord:
        return dataclasses.replace(self, capacity=capacity)

    def same_parameters(self, params: Parameters) -> bool:
        return (self.storage_class, self.replicas, self.ttl_ms, self.on_delete, self.max_inodes) == (
            params.storage_class, params.replicas, params.ttl_ms, params.on_delete, params.max_inodes)

    def context(self) -> dict[str, str]:
        """volume_context handed to the node (informative: the node resolves the id itself)."""
        return {"path": self.path, "class": self.storage_class}

    def to_volume(self) -> csi.Volume:
        return csi.Volume(volume_id=self.volume_id, capacity_bytes=self.capacity, volume_context=self.context())
