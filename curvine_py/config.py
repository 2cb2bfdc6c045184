"""Configuration for every role, in one place: defaults < TOML file < CURVINE_* env < flags.

Each role has a frozen dataclass. `load(cls, section, toml_path, flags)` layers the sources and
validates types; an unknown key in the TOML file or a value of the wrong type is an error at start,
not a surprise later. Env names are CURVINE_<FIELD> (e.g. CURVINE_MASTER, CURVINE_TOKEN).
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import socket
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, get_type_hints

from curvine_py.core.errors import InvalidArgument
from curvine_py.core.addresses import is_loopback_address

log = logging.getLogger(__name__)

MiB = 1 << 20
GiB = 1 << 30

DEFAULT_MASTER_PORT = 8995   # Curvine's ports, so operators find what they expect
DEFAULT_WORKER_PORT = 8997
DEFAULT_LM_PORT = 0


@dataclass(frozen=True, slots=True)
class MasterConfig:
    data_dir: str = "/var/lib/curvine-py/master"
    host: str = "127.0.0.1"
    port: int = DEFAULT_MASTER_PORT
    token: str = field(default="", repr=False)   # never in a repr, so never in a log line
    token_file: str = ""              # the token read from this file (see load)
    tls_cert: str = ""                # PEM certificate: TLS on gRPC and the data plane (rpc/tls.py)
    tls_key: str = ""                 # its PEM private key
    tls_ca: str = ""                  # PEM CA: peers must present a certificate it signed
    insecure: bool = False
    block_size: int = 64 * MiB
    heartbeat_interval_ms: int = 1000
    lease_ms: int = 5000            # a worker silent this long leaves the membership view
    dir_lease_ms: int = 2000        # directory leases for mounts (master/leases.py); 0 = none
    unlink_grace_ms: int = 60_000   # a file without names stays readable this long (other nodes' readers)
    session_timeout_ms: int = 30_000  # a mount silent this long is gone: its kept orphans are released
    default_replicas_durable: int = 2
    root_policy_class: str = "durable"
    repair_rate: int = 64 * MiB     # bytes/s re-replication copies through the master; 0 = off
    metrics_port: int = 0           # Prometheus /metrics (observe/); 0 = off, -1 = any free port
    status_port: int = 0            # read-only HTML status page; 0 = off, -1 = any free port
    metrics_host: str = ""          # the address /metrics and the status page bind; "" = host
    advertise: str = ""             # HOST:PORT standby masters name for this one; default: host:port
    leader_lease_ms: int = 3000     # PostgreSQL: a leader that did not renew this long is replaced
    log_level: str = "INFO"         # DEBUG, INFO, WARNING...


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    master: str = "127.0.0.1:8995"
    data_dirs: tuple[str, ...] = ()   # "DIR[:CAPACITY]"
    host: str = "127.0.0.1"
    port: int = DEFAULT_WORKER_PORT
    lm_port: int = DEFAULT_LM_PORT
    node: str = ""                    # node name; default: hostname
    token: str = field(default="", repr=False)   # never in a repr, so never in a log line
    token_file: str = ""              # the token read from this file (see load)
    tls_cert: str = ""                # PEM certificate: TLS on gRPC and the data plane (rpc/tls.py)
    tls_key: str = ""                 # its PEM private key
    tls_ca: str = ""                  # PEM CA: peers must present a certificate it signed
    insecure: bool = False
    worker_id: str = ""               # default: persisted in the first data dir
    max_payload: int = 256 * MiB
    max_key_bytes: int = 1024
    high_watermark: float = 0.90
    low_watermark: float = 0.75
    pin_grace_ms: int = 30_000        # an EXISTS hit stays readable this long
    unix_socket: str = ""             # short-circuit socket; default: <first data dir>/worker.sock
    # Bounded resources of the worker's servers (data plane, short-circuit socket, lm://):
    max_connections: int = 0          # open connections in all; 0 = derived from the fd limit
    max_connections_per_peer: int = 0  # per peer address (unix: per process); 0 = half the above
    idle_timeout_s: float = 300.0     # a connection silent this long is closed; 0 = never
    header_timeout_s: float = 10.0    # a started frame header must be complete within this
    auth_timeout_s: float = 10.0      # with a token: HELLO must succeed within this of the accept
    # lm:// has no credentials: node-local by default, a reachable address only when told so.
    lm_host: str = "127.0.0.1"
    lm_insecure: bool = False
    lm_allow: tuple[str, ...] = ()    # peer networks (CIDR) allowed on the lm:// port; () = any
    lm_allow_uid: tuple[str, ...] = ()   # local uids allowed on lm:// over loopback (with a token: only these)
    free_space_ratio: float = 0.10    # each data dir leaves this share of its file system free
    scrub_rate: int = 0               # background scrub, bytes/s re-read and verified; 0 = off
    metrics_port: int = 0             # Prometheus /metrics (observe/); 0 = off, -1 = any free port
    metrics_host: str = ""            # the address /metrics binds; "" = host
    profile_dir: str = ""             # cProfile each data-plane connection into this dir; "" = off


@dataclass(frozen=True, slots=True)
class ClientConfig:
    master: str = "127.0.0.1:8995"
    token: str = field(default="", repr=False)   # never in a repr, so never in a log line
    token_file: str = ""              # the token read from this file (see load)
    tls_cert: str = ""                # PEM certificate: TLS on gRPC and the data plane (rpc/tls.py)
    tls_key: str = ""                 # its PEM private key
    tls_ca: str = ""                  # PEM CA: peers must present a certificate it signed
    node: str = ""
    rpc_timeout_s: float = 5.0
    data_timeout_s: float = 10.0
    # A KV get or exists gives up on one worker after this long, connect included, then tries the
    # next owner or misses (a partitioned worker must not hold a model's request for the bulk
    # data timeout).
    kv_deadline_s: float = 2.0
    # A file block read gives up on one worker when it has not answered (or stalls mid-reply) this
    # long, connect included, then tries the next replica (instead of the bulk data timeout).
    block_deadline_s: float = 2.0
    membership_refresh_s: float = 2.0
    kv_replicas: int = 1
    max_payload: int = 256 * MiB
    short_circuit: bool = True
    connections_per_worker: int = 4


@dataclass(frozen=True, slots=True)
class MountConfig:
    """`curvine-py mount` ([mount] in the TOML file). Mount options given with `-o` count as flags.
    The fuse_* knobs are tuning for benchmarks (env CURVINE_FUSE_*), not part of the CLI."""
    master: str = ""
    token: str = field(default="", repr=False)   # never in a repr, so never in a log line
    token_file: str = ""              # the token read from this file (see load)
    node: str = ""                    # default: hostname
    subdir: str = "/"
    attr_timeout: float = 1.0         # seconds the kernel (and the mount) caches attributes
    entry_timeout: float = 1.0        # seconds the kernel caches names
    negative_timeout: float = 0.0     # 0: never cache a missing name (LMCache polls for new ones)
    writeback_cache: bool = False
    direct_io: bool = False
    keep_cache: bool = False          # keep the page cache at every open, unvalidated
    validate_cache: bool = True       # keep it across opens of a file unchanged since (fuse/pagecache.py)
    deadline_s: float = 10.0          # any operation fails after this long
    read_ahead_kb: int = 16384        # the kernel's read-ahead: 1 MiB requests need >= 1024
    max_tasks: int = 64               # concurrent FUSE requests served
    max_background: int = 64
    log_level: str = "INFO"
    atime: str = "relatime"           # relatime, strictatime or noatime (-o); see fuse/atime.py
    fuse_read_ahead: int = 0          # bytes the mount itself fetches ahead of a sequential reader
    fuse_data_threads: int = 8        # concurrent data calls; 2-core machines gain nothing beyond
    fuse_trio_reads: bool = True      # reads on trio sockets (fuse/dataplane.py) when possible
    fuse_fetch_ahead: int = 32 * MiB  # bytes fetched ahead of each read in threads (fuse/prefetch.py); 0: off
    fuse_fetch_budget: int = 256 * MiB    # all the mount's fetched-ahead chunks together
    fuse_fetch_threads: int = 2       # runs received at once (fuse/threadfetch.py)
    fuse_fetch_local: bool = False    # fetch ahead also blocks stored on this node (by descriptor, in threads)
    fuse_switch_interval: float = 0.0005   # sys.setswitchinterval (see fuse/main.py)
    metrics_port: int = 0             # Prometheus /metrics (observe/); 0 = off, -1 = any free port
    metrics_host: str = "127.0.0.1"   # the address of that port

    def __post_init__(self) -> None:
        if self.atime not in ("relatime", "strictatime", "noatime"):
            raise InvalidArgument(f"config atime must be relatime, strictatime or noatime, not {self.atime!r}")
        for name in ("attr_timeout", "entry_timeout", "negative_timeout", "fuse_read_ahead", "fuse_fetch_ahead",
                     "fuse_fetch_budget"):
            if getattr(self, name) < 0:
                raise InvalidArgument(f"config {name} must be >= 0")
        for name in ("deadline_s", "fuse_switch_interval"):
            if getattr(self, name) <= 0:
                raise InvalidArgument(f"config {name} must be > 0")
        for name in ("read_ahead_kb", "max_tasks", "max_background", "fuse_data_threads", "fuse_fetch_threads"):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"config {name} must be >= 1")


T = TypeVar("T")


def _coerce(name: str, kind: Any, value: Any) -> Any:
    try:
        if kind is bool:
            if isinstance(value, str):
                if value.lower() in ("1", "true", "yes", "on"):
                    return True
                if value.lower() in ("0", "false", "no", "off", ""):
                    return False
                raise ValueError(value)
            return bool(value)
        if kind in (int, float, str):
            return kind(value)
        if kind == tuple[str, ...]:
            if isinstance(value, str):
                return tuple(v for v in value.split(",") if v)
            return tuple(str(v) for v in value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"config {name}: {value!r} is not a valid {kind}") from None
    raise InvalidArgument(f"config {name}: unsupported type {kind}")


def load(cls: type[T], *, section: str, toml_path: str | None = None,
         flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> T:
    """Layers defaults < TOML [section] < CURVINE_<FIELD> env < flags (None = not given).

    Secrets: `token_file` stands for `token` at the layer it is given (so `--token-file` beats
    CURVINE_TOKEN, and `--token` beats CURVINE_TOKEN_FILE); both at one layer is an error. The
    token never appears in a message, a repr, or (for children) a command line."""
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    layer: dict[str, int] = {}
    if toml_path:
        with open(toml_path, "rb") as fh:
            table = tomllib.load(fh).get(section, {})
        unknown = set(table) - names
        if unknown:
            raise InvalidArgument(f"unknown keys in [{section}] of {toml_path}: {sorted(unknown)}")
        values.update(table)
        layer.update(dict.fromkeys(table, 1))
    environ = os.environ if env is None else env
    for name in names:
        key = f"CURVINE_{name.upper()}"
        if key in environ:
            values[name] = environ[key]
            layer[name] = 2
    for name, value in (flags or {}).items():
        if name in names and value is not None:
            values[name] = value
            layer[name] = 3
    if values.get("token_file") and "token" in names:
        file_layer, token_layer = layer["token_file"], layer.get("token", 0)
        if file_layer == token_layer and values.get("token"):
            raise InvalidArgument(f"give a token or a token file, not both ({_LAYERS[file_layer]})")
        if file_layer > token_layer:
            values["token"] = read_token_file(str(values["token_file"]))
    warn_secrets_on_command_line(values, layer)
    return cls(**{k: _coerce(k, hints[k], v) for k, v in values.items()})


_LAYERS = {1: "in the TOML file", 2: "in the environment", 3: "as flags"}
_FLAGS = 3
# postgresql://user:PASSWORD@host/db: the password part of a URL's authority.
_URL_PASSWORD = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@:]*:[^/@]+@", re.IGNORECASE)


def warn_secrets_on_command_line(values: Mapping[str, Any], layer: Mapping[str, int]) -> None:
    """A token given as a flag is on the command line, which `ps` shows every local user: say so,
    and what to use instead (it is still accepted: a test or a one-off may mean it)."""
    if layer.get("token") == _FLAGS and values.get("token"):
        log.warning("the token was given with --token: every local user sees it in ps; "
                    "use --token-file FILE or CURVINE_TOKEN_FILE")


def warn_password_in_url_flag(url: str) -> None:
    """`--meta postgresql://user:PASSWORD@...` puts the password on the command line (see above)."""
    if _URL_PASSWORD.match(url):
        log.warning("the --meta URL holds a password: every local user sees it in ps; "
                    "use --meta-password-file FILE (or libpq's PGPASSFILE)")


def read_token_file(path: str) -> str:
    """The shared secret held in `path` (surrounding whitespace and the final newline dropped).
    Errors name the file, never its content."""
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"cannot read the token file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not token:
        raise InvalidArgument(f"the token file {path} is empty")
    if any(c.isspace() for c in token):
        raise InvalidArgument(f"the token in {path} contains whitespace")
    return token


def add_token_file_option(parser: argparse.ArgumentParser) -> None:
    """`--token-file F`: the shared secret from a file (or CURVINE_TOKEN_FILE / CURVINE_TOKEN in the
    environment), so it is never on a command line where `ps` shows it to every user."""
    parser.add_argument("--token-file", help="file holding the shared-secret token "
                                             "(env CURVINE_TOKEN_FILE; or the token itself in CURVINE_TOKEN)")


def split_address(address: str, default_port: int) -> tuple[str, int]:
    """'host:port', 'host' or '[v6]:port' -> (host, port)."""
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, sep, port = address.rpartition(":")
        if not sep:
            host, port = address, ""
    try:
        return host or "127.0.0.1", int(port) if port else default_port
    except ValueError:
        raise InvalidArgument(f"bad address {address!r}, expected HOST:PORT") from None


def parse_master_list(text: str, default_port: int = DEFAULT_MASTER_PORT) -> tuple[str, ...]:
    """'a:8995,b:8995' (--master, CURVINE_MASTER) -> ('a:8995', 'b:8995'), each HOST:PORT with the
    default port filled in; one address is a list of one. Leading and trailing spaces of an entry are
    dropped. Empty entries, bad ports and an address given twice are errors that name the entry."""
    entries = [entry.strip() for entry in text.split(",")]
    if not text.strip():
        raise InvalidArgument("no master address given: expected HOST:PORT[,HOST:PORT...]")
    addresses: list[str] = []
    for index, entry in enumerate(entries, 1):
        if not entry:
            raise InvalidArgument(f"master list {text!r}: entry {index} is empty "
                                  "(expected HOST:PORT[,HOST:PORT...])")
        addresses.append(normalize_address(entry, default_port, what="master address"))
    seen: set[str] = set()
    for address in addresses:
        if address in seen:
            raise InvalidArgument(f"master list {text!r}: {address} is given twice")
        seen.add(address)
    return tuple(addresses)


def normalize_address(entry: str, default_port: int, *, what: str = "address") -> str:
    """'host[:port]' or '[v6][:port]' -> 'host:port' ('[v6]:port'), the port checked (1-65535)."""
    if entry.startswith("["):
        host, closed, rest = entry[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            raise InvalidArgument(f"bad {what} {entry!r}, expected [ADDRESS]:PORT")
        port_text = rest[1:] if rest else None
    elif entry.count(":") > 1:
        raise InvalidArgument(f"bad {what} {entry!r}: write an IPv6 address as [ADDRESS]:PORT")
    else:
        host, colon, port_text_or_empty = entry.partition(":")
        port_text = port_text_or_empty if colon else None
    host = host or "127.0.0.1"        # ':PORT', as split_address reads it
    port = default_port
    if port_text is not None:
        if not (port_text.isascii() and port_text.isdigit()):
            raise InvalidArgument(f"bad {what} {entry!r}: the port must be a number, not {port_text!r}")
        port = int(port_text)
    if not 1 <= port <= 65535:
        raise InvalidArgument(f"bad {what} {entry!r}: port {port} is not in 1-65535")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_data_dir(spec: str) -> tuple[str, int]:
    """'DIR[:CAPACITY]' with CAPACITY a size as parse_size reads it (100GB, 512GiB or bytes);
    0 = the filesystem's size."""
    path, sep, cap = spec.rpartition(":")
    if not sep or "/" in cap:
        return spec, 0
    return path, parse_size(cap)


# Units as written (case-insensitive): KB/MB/GB/TB are decimal (10^3 ... 10^12), as disks are sold;
# KiB/MiB/GiB/TiB binary (2^10 ... 2^40); a bare K/M/G/T is binary, as in GNU coreutils (dd, du).
SIZE_UNITS_HELP = "GB = 10^9 bytes, GiB = 2^30 (also KB/KiB, MB/MiB, TB/TiB; a bare G is GiB)"
_UNITS = {"": 1, "b": 1,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "k": 1 << 10, "kib": 1 << 10, "m": MiB, "mib": MiB, "g": GiB, "gib": GiB, "t": 1 << 40,
          "tib": 1 << 40}


def parse_size(text: str) -> int:
    """'2GB' -> 2_000_000_000, '2GiB' -> 2_147_483_648, '2G' -> 2 GiB, '4096' -> 4096 (see
    SIZE_UNITS_HELP); fractions are allowed ('1.5TB') and rounded down to whole bytes."""
    raw = text.strip().lower()
    digits = raw.rstrip("kmgtib")
    unit = raw[len(digits):]
    if unit not in _UNITS:
        raise InvalidArgument(f"bad size {text!r} (units: {SIZE_UNITS_HELP})")
    try:
        value = float(digits)
    except ValueError:
        raise InvalidArgument(f"bad size {text!r} (units: {SIZE_UNITS_HELP})") from None
    if value < 0 or value != value or value == float("inf"):
        raise InvalidArgument(f"bad size {text!r}: must be a finite number >= 0")
    return int(value * _UNITS[unit])


Resolver = Callable[[str], list[str]]


def resolve_host(host: str) -> list[str]:
    """Every address a listen host stands for (what bind() may take); [] when it does not resolve."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return []
    return [str(info[4][0]) for info in infos]


def is_loopback(host: str, resolve: Resolver = resolve_host) -> bool:
    """True when every address the host resolves to is loopback, decided on the addresses, not the
    name: '127.cluster.example' may resolve to a routable address. The wildcard ('', 0.0.0.0, ::)
    and a name that does not resolve are not loopback."""
    if host in ("", "0.0.0.0", "::"):
        return False
    addresses = resolve(host)
    return bool(addresses) and all(is_loopback_address(a) for a in addresses)


def require_secure(host: str, token: str, insecure: bool, role: str, resolve: Resolver = resolve_host) -> None:
    """Cluster mode refuses to start open on a non-loopback address unless told --insecure."""
    if not token and not insecure and not is_loopback(host, resolve):
        raise InvalidArgument(f"{role}: refusing to listen on {host} without --token: it resolves to "
                              f"{', '.join(resolve(host)) or 'no address'}, not only loopback "
                              "(pass --insecure to run an open cluster)")


