"""What the node plugin has staged and published, kept as one JSON file per volume under the
node-local state dir, so a restarted plugin knows which mount processes are its own, which
staging paths to watch and which bind mounts to re-establish. Files are replaced atomically
(temp file + rename), so a crash leaves the old or the new state, never half of one.

Only this driver's own ids (`cv-` + 32 hex digits) name a file, and a file's contents are checked
as strictly as a request (curvine_py.csi.paths) before anything acts on them.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Set
from dataclasses import dataclass

from curvine_py.csi.errors import CsiError
from curvine_py.csi.paths import PathPolicy, is_own_volume_id, validated_state

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Target:
    path: str
    read_only: bool


@dataclass(frozen=True, slots=True)
class StagedVolume:
    volume_id: str
    volume_path: str                 # the directory in the namespace (mount --subdir)
    staging_path: str
    read_only: bool
    mount_options: tuple[str, ...]
    pid: int                         # the mount process, told apart from a reused pid by its start time
    pid_start: int
    targets: tuple[Target, ...] = ()
    device: str = ""                 # major:minor of the FUSE mount (how its copies in pods are found)

    def with_process(self, pid: int, pid_start: int, device: str = "") -> StagedVolume:
        return dataclasses.replace(self, pid=pid, pid_start=pid_start, device=device)

    def with_target(self, target: Target) -> StagedVolume:
        others = tuple(t for t in self.targets if t.path != target.path)
        return dataclasses.replace(self, targets=(*others, target))

    def without_target(self, path: str) -> StagedVolume:
        return dataclasses.replace(self, targets=tuple(t for t in self.targets if t.path != path))

    def target(self, path: str) -> Target | None:
        return next((t for t in self.targets if t.path == path), None)


class NodeState:
    def __init__(self, state_dir: str, policy: PathPolicy, options: Set[str] = frozenset(),
                 valued_options: Set[str] = frozenset()) -> None:
        self.dir = os.path.join(state_dir, "volumes")
        self.policy = policy
        self.options = set(options)
        self.valued_options = set(valued_options)
        os.makedirs(self.dir, mode=0o700, exist_ok=True)

    def _file(self, volume_id: str) -> str:
        if not is_own_volume_id(volume_id):        # never a path: see curvine_py.csi.paths
            raise ValueError(f"{volume_id!r} is not a volume id of this driver")
        return os.path.join(self.dir, f"{volume_id}.json")

    def save(self, volume: StagedVolume) -> None:
        data = dataclasses.asdict(volume)
        temporary = self._file(volume.volume_id) + ".tmp"
        with open(temporary, "w") as fh:
            json.dump(data, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temporary, self._file(volume.volume_id))

    def remove(self, volume_id: str) -> None:
        try:
            os.unlink(self._file(volume_id))
        except FileNotFoundError:
            pass

    def load(self, volume_id: str) -> StagedVolume | None:
        """The state of a volume staged here; None for an id not of this driver, no file or a bad file."""
        if not is_own_volume_id(volume_id):
            return None
        try:
            with open(self._file(volume_id)) as fh:
                data = validated_state(json.load(fh), volume_id, self.policy, self.options, self.valued_options)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, CsiError) as exc:
            log.error("ignoring the state file of volume %s: %s", volume_id,
                      exc.message if isinstance(exc, CsiError) else exc)
            return None
        data["targets"] = tuple(Target(**t) for t in data.get("targets", ()))
        data["mount_options"] = tuple(data.get("mount_options", ()))
        return StagedVolume(**data)

    def all(self) -> list[StagedVolume]:
        found = []
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".json"):
                volume = self.load(name.removesuffix(".json"))
                if volume is not None:
                    found.append(volume)
        return found
