"""What the node plugin has staged and published, kept as one JSON file per volume under the
node-local state dir, so a restarted plugin knows which mount processes are its own, which
staging paths to watch and which bind mounts to re-establish. Files are replaced atomically
(temp file + rename), so a crash leaves the old or the new state, never half of one.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass

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

    def with_process(self, pid: int, pid_start: int) -> StagedVolume:
        return dataclasses.replace(self, pid=pid, pid_start=pid_start)

    def with_target(self, target: Target) -> StagedVolume:
        others = tuple(t for t in self.targets if t.path != target.path)
        return dataclasses.replace(self, targets=(*others, target))

    def without_target(self, path: str) -> StagedVolume:
        return dataclasses.replace(self, targets=tuple(t for t in self.targets if t.path != path))

    def target(self, path: str) -> Target | None:
        return next((t for t in self.targets if t.path == path), None)


class NodeState:
    def __init__(self, state_dir: str) -> None:
        self.dir = os.path.join(state_dir, "volumes")
        os.makedirs(self.dir, mode=0o700, exist_ok=True)

    def _file(self, volume_id: str) -> str:
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
        try:
            with open(self._file(volume_id)) as fh:
                data = json.load(fh)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.error("unreadable state of volume %s: %s", volume_id, exc)
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
