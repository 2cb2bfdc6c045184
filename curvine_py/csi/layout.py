"""How a staged volume is laid out in mounts, so that a remount reaches every pod (issue 23).

A container holds a copy of the target mount made when it started; unmounting and re-binding the
target on the node never reaches that copy. What does reach it is mount propagation: a mount
stacked on a *shared* mount is copied onto every peer and slave of it. So, per volume, under the
plugin's private `<state>/mounts/<id>/`:

    fuse       the FUSE mount itself (private: nothing follows it)
    staging    bind of fuse, made shared (peer group S)      <- the CO's staging_target_path
    rw         bind of staging, made a slave of S
    ro-shared  a read-only bind of fuse, shared (group R)    <- read-only targets' source
    ro         bind of ro-shared, a slave of R
    target     bind of rw (or ro): born a slave of S (or R), and so is the container's copy of it
               when the container asks for HostToContainer (rslave) propagation

A remount after the FUSE process died detaches only the dead `fuse` (private), mounts a new one
there and stacks a new bind of it on `staging` and on `ro-shared`: propagation copies it onto the
carriers, onto every target and into every rslave container. Nothing is ever unmounted from a
target while its pod runs, so during the window a target is a dead mount answering ENOTCONN and no
write can land in the bare directory under it. Targets are slaves, not peers, so unmounting one
target's layers never propagates to the staging path or to other targets. Read-only targets come
from a read-only source, because a propagated copy keeps the flags of the mount it copies.

Containers with private propagation (the Kubernetes default) receive nothing: curvine_py.csi.nsbind
stacks the new mount inside their namespaces instead.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from curvine_py.csi import bindmounts
from curvine_py.csi.bindmounts import MS_PRIVATE, MS_SHARED, MS_SLAVE
from curvine_py.csi.paths import is_own_volume_id
from curvine_py.fuse.mountpoint import is_mounted

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class VolumeMounts:
    fuse: str
    rw: str
    ro_shared: str
    ro: str
    scratch: str

    def source(self, read_only: bool) -> str:
        """Where a target is bound from."""
        return self.ro if read_only else self.rw


class Layout:
    def __init__(self, state_dir: str) -> None:
        self.base = os.path.join(state_dir, "mounts")
        os.makedirs(self.base, mode=0o700, exist_ok=True)
        if not is_mounted(self.base):
            # a private mount of its own: the volumes' private mounts never propagate to the host
            bindmounts.bind(self.base, self.base, read_only=False)
        bindmounts.set_propagation(self.base, MS_PRIVATE)

    def of(self, volume_id: str) -> VolumeMounts:
        if not is_own_volume_id(volume_id):        # never a path: see curvine_py.csi.paths
            raise ValueError(f"{volume_id!r} is not a volume id of this driver")
        root = os.path.join(self.base, volume_id)
        return VolumeMounts(*(os.path.join(root, leaf) for leaf in ("fuse", "rw", "ro-shared", "ro", "scratch")))

    def prepare(self, volume_id: str) -> str:
        """Makes the volume's dirs, detaches whatever an earlier life left on `fuse`, returns it."""
        mounts = self.of(volume_id)
        for path in (mounts.fuse, mounts.rw, mounts.ro_shared, mounts.ro, mounts.scratch):
            try:
                os.makedirs(path, mode=0o700)
            except FileExistsError:       # also a dead mount on it, which exist_ok would not accept
                pass
        bindmounts.detach_all(mounts.scratch)
        bindmounts.detach_all(mounts.fuse)
        return mounts.fuse

    def ensure_carriers(self, volume_id: str, staging: str) -> None:
        """Remakes the carriers from the (healthy) staging path when they are missing: a restarted
        plugin container has a new mount namespace, where only the kubelet dir's mounts (staging,
        targets: Bidirectional) were kept, not those under the state dir."""
        mounts = self.of(volume_id)
        if not is_mounted(mounts.ro_shared):
            bindmounts.bind(staging, mounts.scratch, read_only=True)
            try:
                bindmounts.bind(mounts.scratch, mounts.ro_shared, read_only=True)
            finally:
                bindmounts.detach(mounts.scratch)
            bindmounts.set_propagation(mounts.ro_shared, MS_SHARED)
        for carrier, source in ((mounts.rw, staging), (mounts.ro, mounts.ro_shared)):
            if not is_mounted(carrier) or bindmounts.broken(carrier):
                bindmounts.bind(source, carrier, read_only=carrier == mounts.ro)
                bindmounts.set_propagation(carrier, MS_SLAVE)

    def attach(self, volume_id: str, staging: str) -> None:
        """Once a (new) FUSE mount serves `fuse`: stacks it on the staging path and the read-only
        source (propagation takes it on to the carriers, targets and rslave containers), and makes
        the carriers on first use."""
        mounts = self.of(volume_id)
        bindmounts.set_propagation(mounts.fuse, MS_PRIVATE)
        bindmounts.bind(mounts.fuse, staging, read_only=False)
        bindmounts.set_propagation(staging, MS_SHARED)
        # the read-only source: a read-only bind first, then stacked, so every copy is read-only
        bindmounts.bind(mounts.fuse, mounts.scratch, read_only=True)
        try:
            bindmounts.bind(mounts.scratch, mounts.ro_shared, read_only=True)
        finally:
            bindmounts.detach(mounts.scratch)
        bindmounts.set_propagation(mounts.ro_shared, MS_SHARED)
        self.ensure_carriers(volume_id, staging)

    def publish(self, volume_id: str, target: str, *, read_only: bool) -> None:
        """Binds (or stacks, on a dead target) the volume on `target`."""
        bindmounts.bind(self.of(volume_id).source(read_only), target, read_only=read_only)

    def target_needs_repair(self, target: str) -> bool:
        return not is_mounted(target) or bindmounts.broken(target)

    def detach_volume(self, volume_id: str, staging: str) -> None:
        """Every layer of the volume's mounts (its targets are already unpublished), and its dirs."""
        mounts = self.of(volume_id)
        for path in (mounts.ro, mounts.rw, mounts.ro_shared, mounts.scratch, staging, mounts.fuse):
            bindmounts.detach_all(path)
        root = os.path.dirname(mounts.fuse)
        for path in (mounts.fuse, mounts.rw, mounts.ro_shared, mounts.ro, mounts.scratch, root):
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("left %s in place: %s", path, exc.strerror)
