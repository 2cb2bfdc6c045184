"""What the node service lets a request name on this node: volume ids and paths, checked before
anything touches the disk (issue 29: an id `../../evil` plus a crafted state file once mounted the
whole namespace and wrote outside the state dir).

- A volume id is a plain name (letters, digits, `.`, `_`, `-`, `:`, at most 128 bytes, not `.` or
  `..`): never a path. Only ids of this driver's own form (`cv-` + 32 hex digits) ever name a state
  file or a log; another well-formed id is a volume this node does not know (NOT_FOUND, or nothing
  to do for unpublish/unstage).
- A staging or target path is absolute, without `.` or `..` parts or NUL, and lies (after
  symlinks are resolved) strictly below one of the node's path roots (`--path-root`, default the
  kubelet's /var/lib/kubelet), never in or above the plugin's state dir.
- A state file's contents are checked as strictly as a request (ids, paths, options, pids): a
  file that does not pass is reported and ignored, never acted on.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

from curvine_py.csi.errors import invalid

MAX_ID_BYTES = 128
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")
_OWN_ID = re.compile(r"^cv-[0-9a-f]{32}$")


def check_volume_id(value: str) -> str:
    """The id, or INVALID_ARGUMENT if it is missing or could be read as a path."""
    if not value:
        raise invalid("volume_id is required")
    if len(value.encode()) > MAX_ID_BYTES:
        raise invalid(f"volume_id longer than {MAX_ID_BYTES} bytes")
    if not _SAFE_ID.fullmatch(value) or value in (".", ".."):
        raise invalid(f"volume_id {value!r} is not a plain name: only letters, digits and . _ - : are allowed")
    return value


def is_own_volume_id(value: str) -> bool:
    """An id this driver hands out: the only ids that name files on the node."""
    return bool(_OWN_ID.fullmatch(value))


def normal_absolute(value: str, name: str) -> str:
    """`value` as a normalised absolute path, INVALID_ARGUMENT for a relative one, NUL, `.` or `..`."""
    if not value:
        raise invalid(f"{name} is required")
    if "\0" in value:
        raise invalid(f"{name} contains a NUL byte")
    if not value.startswith("/"):
        raise invalid(f"{name} {value!r} must be an absolute path")
    parts = [p for p in value.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise invalid(f"{name} {value!r} may not contain . or .. components")
    if not parts:
        raise invalid(f"{name} may not be /")
    return "/" + "/".join(parts)


def is_below(path: str, root: str) -> bool:
    """True if `path` is strictly inside `root` (both normalised absolute paths)."""
    return root != path and path.startswith(root.rstrip("/") + "/")


class PathPolicy:
    """The roots requests' paths must lie below, and the dirs they must stay out of."""

    def __init__(self, roots: Sequence[str], reserved: Iterable[str] = ()) -> None:
        if not roots:
            raise ValueError("at least one path root is needed")
        self.roots = tuple(os.path.realpath(normal_absolute(r, "path root")) for r in roots)
        self.reserved = tuple(os.path.realpath(r) for r in reserved)

    def check(self, value: str, name: str) -> str:
        """The normalised path, or INVALID_ARGUMENT if it leaves the roots or touches a reserved dir."""
        path = normal_absolute(value, name)
        real = os.path.realpath(path)         # a symlink inside a root may point anywhere
        if not any(is_below(real, root) for root in self.roots):
            where = f" (resolved to {real})" if real != path else ""
            raise invalid(f"{name} {path}{where} is not below the node's path roots {list(self.roots)}")
        for reserved in self.reserved:
            if real == reserved or is_below(real, reserved) or is_below(reserved, real):
                raise invalid(f"{name} {path} overlaps the plugin's own state dir {reserved}")
        return path

    def check_apart(self, staging: str, target: str) -> None:
        """A target inside the staging path (or the other way round) would mount the volume into itself."""
        s, t = os.path.realpath(staging), os.path.realpath(target)
        if s == t or is_below(t, s) or is_below(s, t):
            raise invalid(f"target_path {target} and staging_target_path {staging} overlap")


def validated_state(data: Any, volume_id: str, policy: PathPolicy, allowed_options: set[str],
                    valued_options: set[str]) -> dict[str, Any]:
    """The fields of a state file, checked; ValueError says what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("volume_id") != volume_id:
        raise ValueError(f"it names volume {data.get('volume_id')!r}")
    volume_path = data.get("volume_path")
    if not isinstance(volume_path, str) or normal_absolute(volume_path, "volume_path") != volume_path:
        raise ValueError(f"volume_path {volume_path!r} is not a normalised absolute path")
    staging = data.get("staging_path")
    if not isinstance(staging, str) or policy.check(staging, "staging_path") != staging:
        raise ValueError(f"staging_path {staging!r} is not a normalised path below the path roots")
    for key in ("pid", "pid_start"):
        if not isinstance(data.get(key), int) or isinstance(data.get(key), bool) or data[key] < 0:
            raise ValueError(f"{key} {data.get(key)!r} is not a process id")
    if not isinstance(data.get("read_only"), bool):
        raise ValueError("read_only is not a boolean")
    options = data.get("mount_options", [])
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise ValueError("mount_options is not a list of strings")
    for option in options:
        key, _, value = option.partition("=")
        if option not in allowed_options and not (key in valued_options and value.replace(".", "", 1).isdigit()):
            raise ValueError(f"mount option {option!r} is not allowed")
    targets = data.get("targets", [])
    if not isinstance(targets, list):
        raise ValueError("targets is not a list")
    for target in targets:
        if not isinstance(target, dict) or set(target) != {"path", "read_only"} \
                or not isinstance(target["read_only"], bool) or not isinstance(target["path"], str):
            raise ValueError(f"target {target!r} is malformed")
        if policy.check(target["path"], "target path") != target["path"]:
            raise ValueError(f"target {target['path']!r} is not normalised")
        policy.check_apart(staging, target["path"])
    extra = set(data) - {"volume_id", "volume_path", "staging_path", "read_only", "mount_options", "pid",
                         "pid_start", "targets", "device"}
    if extra:
        raise ValueError(f"unknown fields {sorted(extra)}")
    return data
