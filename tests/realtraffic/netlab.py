"""A throw-away network lab for real SMB traffic: namespaces, a bridge with a tc-mirred span
port, smbd on every cluster node, and a packet capture on the span.

Topology (names get a per-run prefix ``smbw-<pid>-<seq>-``)::

      n1 (198.18.0.1)   n2 (198.18.0.2)   c1 (198.18.0.10, optional)
         eth0              eth0              eth0
          |                 |                 |
        p-n1              p-n2              p-c1        <- ports of bridge br0, namespace "sw"
          \\________________|________________/
                     br0 (namespace sw)
        tc clsact ingress on every port: mirred egress mirror dev span0
                     span0 ==veth== span1 (namespace mon): tcpdump -i span1 -w FILE

Mirroring choice: only the *ingress* hook of every bridge port is mirrored. Every frame on the
segment enters the bridge through exactly one port (the sender's), so the span sees each frame
exactly once, including broadcasts (ARP), which egress mirroring would copy once per port they
are flooded to. The span port is not a bridge member and the monitor namespace has IPv6 off
and no address, so nothing but mirrored frames reaches the capture.

The senders' transmit offloads (checksum, TSO/GSO, scatter-gather) are turned off, so the
span carries what a hardware switch would copy: MTU-sized frames with valid checksums.

Everything is created inside namespaces this lab owns; ``Lab.__exit__`` kills every process
left in them (all started by this lab), deletes the namespaces and the temp dir, and removes
the ``smbwtest`` unix user if this lab created it. Failures are loud: no root, or no
smbd/tcpdump/tshark/tc/ip, raises ``LabError``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLIENT_SCRIPT = Path(__file__).with_name("client.py")
LAB_PREFIX = f"smbw-{os.getpid()}-"
TEST_USER = "smbwtest"
# Not a secret: a throw-away account that exists only in per-lab Samba passdbs.
TEST_PASSWORD = "Smbw-lab-only-1"
ADDRESSES = {"n1": "198.18.0.1", "n2": "198.18.0.2", "c1": "198.18.0.10"}
PREFIX_LEN = 24
REQUIRED_TOOLS = ("ip", "tc", "smbd", "smbpasswd", "tcpdump", "tshark", "ss", "useradd", "userdel")

_seq = itertools.count(1)


class LabError(RuntimeError):
    pass


def check_prerequisites() -> None:
    """Raise (never skip) when the lab cannot run: CI must notice a missing tool."""
    if os.geteuid() != 0:
        raise LabError("real-traffic lab needs root (network namespaces, smbd on port 445)")
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
    if missing:
        raise LabError(f"real-traffic lab needs these tools on PATH: {', '.join(missing)}")


def run(cmd: list[str], *, input: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, input=input, capture_output=True, timeout=60)
    if check and proc.returncode != 0:
        raise LabError(
            f"command failed ({proc.returncode}): {' '.join(cmd)}\n"
            f"{proc.stderr.decode(errors='replace').strip()}"
        )
    return proc


# --- the per-CPU receive backlog --------------------------------------------------------------
# Every veth hop (node -> bridge port, bridge -> node, mirred -> span) queues the frame on the
# per-CPU backlog (net.core.netdev_max_backlog, 1000 by default, not per namespace). A burst of
# READ responses on a busy 2-core machine can fill it: TCP recovers the nodes' own frames by
# retransmission, but a mirror copy dropped there is lost to the span for good. While any lab
# is up the backlog is raised; the last lab to close restores the old value.
BACKLOG_SYSCTL = Path("/proc/sys/net/core/netdev_max_backlog")
LAB_BACKLOG = 100_000
_backlog_users = 0
_backlog_saved: str | None = None


def _raise_backlog() -> None:
    global _backlog_users, _backlog_saved
    if _backlog_users == 0:
        _backlog_saved = BACKLOG_SYSCTL.read_text().strip()
        if int(_backlog_saved) < LAB_BACKLOG:
            BACKLOG_SYSCTL.write_text(f"{LAB_BACKLOG}\n")
    _backlog_users += 1


def _restore_backlog() -> None:
    global _backlog_users, _backlog_saved
    _backlog_users -= 1
    if _backlog_users == 0 and _backlog_saved is not None:
        BACKLOG_SYSCTL.write_text(f"{_backlog_saved}\n")
        _backlog_saved = None


def backlog_drops() -> int:
    """Frames the kernel dropped because a CPU's backlog was full (/proc/net/softnet_stat,
    second column, summed over CPUs)."""
    cols = Path("/proc/net/softnet_stat").read_text().splitlines()
    return sum(int(line.split()[1], 16) for line in cols if line.strip())


def lab_namespaces(prefix: str = "smbw-") -> list[str]:
    """Names of existing namespaces that start with ``prefix``."""
    out = run(["ip", "netns", "list"]).stdout.decode()
    return sorted(
        line.split()[0] for line in out.splitlines() if line.strip() and line.split()[0].startswith(prefix)
    )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has exited for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


@dataclasses.dataclass
class CaptureResult:
    path: Path
    packets_captured: int | None
    packets_dropped: int | None
    stderr: str
    backlog_drops: int = 0  # frames the kernel's receive backlog dropped while capturing
    # Frames the span port handed to the capture socket (tcpdump's "received by filter"):
    # every one must be in the file (captured) or counted as dropped.
    packets_received: int | None = None


@dataclasses.dataclass
class Node:
    name: str
    netns: str
    address: str
    smbd_conf: Path | None = None
    share_dir: Path | None = None
    smbd: subprocess.Popen | None = None


_PROBE_SNIPPET = r"""
import socket, sys
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"smbwire-lab-probe", (sys.argv[1], 9))
"""

# --- offloads, via the legacy ETHTOOL ioctls (no ethtool binary needed) --------------------
# linux/ethtool.h (struct ethtool_value {cmd, data}); linux/sockios.h: SIOCETHTOOL 0x8946.
# Set commands turn a feature off (data 0); get commands give its state in data.
ETHTOOL_STXCSUM, ETHTOOL_SSG, ETHTOOL_STSO, ETHTOOL_SGSO = 0x17, 0x19, 0x1F, 0x24
ETHTOOL_GTSO, ETHTOOL_GGSO, ETHTOOL_GGRO = 0x1E, 0x23, 0x2B
# TSO, GSO, SG, TX checksum off.
OFFLOADS_OFF = (ETHTOOL_STSO, ETHTOOL_SGSO, ETHTOOL_SSG, ETHTOOL_STXCSUM)
# The segmentation offloads libpcap looks at when it sizes its ring's slots.
SEGMENTATION_OFFLOADS = (ETHTOOL_GTSO, ETHTOOL_GGSO, ETHTOOL_GGRO)

# Runs inside the namespace via `ip netns exec`: DEV CMD..., prints each command's data.
_ETHTOOL_SNIPPET = r"""
import ctypes, fcntl, socket, struct, sys
dev = sys.argv[1].encode()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
out = []
for cmd in map(int, sys.argv[2:]):
    buf = ctypes.create_string_buffer(struct.pack("II", cmd, 0))
    ifr = struct.pack("16sP", dev, ctypes.addressof(buf)).ljust(40, b"\0")
    fcntl.ioctl(s.fileno(), 0x8946, ifr)
    out.append(struct.unpack("II", buf.raw[:8])[1])
print(*out)
"""


class Lab:
    """Context manager: ``with Lab(client=True, capture_dir=tmp_path) as lab: ...``."""

    def __init__(self, *, client: bool = False, capture_dir: Path | None = None, capture: bool = True,
                 mirror_egress: bool = False, encrypted_share: bool = False, remote_span: str | None = None):
        self.seq = next(_seq)
        # "vxlan": the switch sends its mirror copies to the monitor inside a VXLAN tunnel
        # (the kernel's encapsulation, VNI 42, UDP 4789, 198.19.0.1 -> 198.19.0.2 on span0),
        # as a remote mirror session does; None: the copies go out of span0 as they are.
        if remote_span not in (None, "vxlan"):
            raise LabError(f"unknown remote span {remote_span!r} (this kernel has VXLAN, not GRE)")
        self.remote_span = remote_span
        # Also offer share [enc] (same directory as [data]) with `server smb encrypt = required`:
        # every message of a session on it is encrypted (SMB3 TRANSFORM).
        self.encrypted_share = encrypted_share
        self.prefix = f"{LAB_PREFIX}{self.seq}-"
        self.want_client = client
        self.want_capture = capture
        # Also mirror what leaves each port: every unicast frame then reaches the span twice
        # (in at the sender's port, out at the receiver's), like a badly set up SPAN session.
        # Only for tests of mirror-duplicate handling.
        self.mirror_egress = mirror_egress
        self.capture_dir = Path(capture_dir) if capture_dir else None
        self.tmp: Path | None = None
        self.nodes: dict[str, Node] = {}
        self.namespaces: list[str] = []
        self.pids: list[int] = []  # every process this lab started (for the teardown check)
        self.created_user = False
        self.backlog_raised = False
        self.backlog_drops_at_start = 0
        self.capture_proc: subprocess.Popen | None = None
        self.capture_path: Path | None = None
        self.capture_result: CaptureResult | None = None
        self.sw = self.prefix + "sw"
        self.mon = self.prefix + "mon"

    # --- context manager -------------------------------------------------------------------
    def __enter__(self) -> "Lab":
        check_prerequisites()
        try:
            self.tmp = Path(tempfile.mkdtemp(prefix=self.prefix))
            # smbd drops to the test user for share access: it must traverse the temp dir.
            self.tmp.chmod(0o755)
            _raise_backlog()
            self.backlog_raised = True
            self._ensure_user()
            self._build_network()
            for name in ("n1", "n2"):
                self._start_smbd(self.nodes[name])
            for name in ("n1", "n2"):
                self._wait_listening(self.nodes[name])
            if self.want_capture:
                self._start_capture()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- building --------------------------------------------------------------------------
    def _ns(self, ns: str, *cmd: str, check: bool = True, input: bytes | None = None):
        return run(["ip", "netns", "exec", ns, *cmd], check=check, input=input)

    def ethtool(self, ns: str, dev: str, cmds: tuple[int, ...]) -> list[int]:
        """Run ETHTOOL value commands on `dev` in `ns`; each one's data (a get's state)."""
        out = self._ns(ns, sys.executable, "-c", _ETHTOOL_SNIPPET, dev, *map(str, cmds)).stdout
        return [int(v) for v in out.split()]

    def _add_netns(self, name: str) -> None:
        run(["ip", "netns", "add", name])
        self.namespaces.append(name)
        self._ns(name, "ip", "link", "set", "lo", "up")
        # No IPv6: no router solicitations, DAD or MLD chatter on the segment or the span.
        self._ns(name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                 "net.ipv6.conf.default.disable_ipv6=1")

    def _build_network(self) -> None:
        self._add_netns(self.sw)
        self._add_netns(self.mon)
        sw = ["ip", "-n", self.sw]
        run([*sw, "link", "add", "br0", "type", "bridge"])
        # No STP and no forwarding delay: ports forward as soon as they are up. No multicast
        # snooping: the bridge itself then sends no IGMP queries/reports onto the segment.
        run([*sw, "link", "set", "br0", "type", "bridge", "stp_state", "0", "forward_delay", "0",
             "mcast_snooping", "0"])
        run([*sw, "link", "set", "br0", "up"])
        run([*sw, "link", "add", "span0", "type", "veth", "peer", "name", "span1", "netns", self.mon])
        run([*sw, "link", "set", "span0", "up"])
        run(["ip", "-n", self.mon, "link", "set", "span1", "up"])
        # The capture port too: libpcap sizes its ring's slots by the MTU only when the device
        # has no segmentation offload, else for 64 KiB frames. A veth has TSO/GSO on, so the
        # 128 MiB ring (-B) held about 2,000 frames instead of 80,000, and a tcpdump kept off
        # the CPU for a few milliseconds on a busy machine dropped frames (42-72 in a CI run
        # beside a fuzzing campaign).
        self.ethtool(self.mon, "span1", OFFLOADS_OFF)
        self.mirror_dev = "span0"
        if self.remote_span == "vxlan":
            self._build_remote_span()
        names = ["n1", "n2"] + (["c1"] if self.want_client else [])
        for name in names:
            ns = self.prefix + name
            self._add_netns(ns)
            node = Node(name=name, netns=ns, address=ADDRESSES[name])
            self.nodes[name] = node
            port = f"p-{name}"
            run([*sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns])
            run([*sw, "link", "set", port, "master", "br0"])
            run([*sw, "link", "set", port, "up"])
            run(["tc", "-n", self.sw, "qdisc", "add", "dev", port, "clsact"])
            self._mirror(port, "ingress")
            if self.mirror_egress:
                self._mirror(port, "egress")
            n = ["ip", "-n", ns]
            run([*n, "addr", "add", f"{node.address}/{PREFIX_LEN}", "dev", "eth0"])
            run([*n, "link", "set", "eth0", "up"])
            self.ethtool(ns, "eth0", OFFLOADS_OFF)

    def _build_remote_span(self) -> None:
        """A VXLAN device in the switch whose underlay is span0: the mirror copies leave span0
        inside UDP, and the monitor (no address: nothing answers) captures the tunnel. The
        underlay's MTU holds a whole mirrored frame plus the 50 bytes of the tunnel, and stays
        within a page, where XDP on the monitor's veth can attach."""
        sw = ["ip", "-n", self.sw]
        for ns, dev in ((self.sw, "span0"), (self.mon, "span1")):
            run(["ip", "-n", ns, "link", "set", dev, "mtu", "2000"])
        run([*sw, "addr", "add", "198.19.0.1/30", "dev", "span0"])
        # The collector's MAC, fixed: no ARP on the span.
        run([*sw, "neigh", "add", "198.19.0.2", "lladdr", "02:00:c6:13:00:02", "dev", "span0", "nud", "permanent"])
        run([*sw, "link", "add", "vx0", "type", "vxlan", "id", "42", "local", "198.19.0.1", "remote", "198.19.0.2",
             "dstport", "4789", "dev", "span0"])
        run([*sw, "link", "set", "vx0", "mtu", "1950"])
        run([*sw, "link", "set", "vx0", "up"])
        self.mirror_dev = "vx0"

    def _mirror(self, port: str, hook: str) -> None:
        """Copy every frame entering (``ingress``) or leaving (``egress``) ``port`` to the span
        (matchall when the kernel has it, else u32 matching zero bits, which matches every
        frame)."""
        base = ["tc", "-n", self.sw, "filter", "add", "dev", port, hook]
        action = ["action", "mirred", "egress", "mirror", "dev", self.mirror_dev]
        tried = []
        for cls in (["matchall"], ["protocol", "all", "u32", "match", "u32", "0", "0"]):
            proc = run([*base, *cls, *action], check=False)
            if proc.returncode == 0:
                return
            tried.append(f"{cls[0] if cls[0] != 'protocol' else 'u32'}: {proc.stderr.decode().strip()}")
        raise LabError(f"cannot add tc mirred rule on {port}: " + "; ".join(tried))

    def _ensure_user(self) -> None:
        try:
            pwd.getpwnam(TEST_USER)
        except KeyError:
            run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", TEST_USER])
            self.created_user = True

    def _smb_conf(self, node: Node) -> str:
        d = self.tmp / node.name
        return f"""[global]
    netbios name = SMBW{node.name.upper()}
    workgroup = SMBWLAB
    server role = standalone server
    security = user
    map to guest = never
    passdb backend = tdbsam:{d}/private/passdb.tdb
    private dir = {d}/private
    lock directory = {d}/lock
    state directory = {d}/state
    cache directory = {d}/cache
    pid directory = {d}/pid
    ncalrpc dir = {d}/ncalrpc
    binddns dir = {d}/binddns
    log file = {d}/log.smbd
    max log size = 0
    log level = 1
    smb ports = 445
    disable netbios = yes
    interfaces = {node.address}/{PREFIX_LEN}
    bind interfaces only = yes
    server min protocol = SMB2_10
    server signing = disabled
    server smb encrypt = {"if_required" if self.encrypted_share else "off"}
    server multi channel support = no
    load printers = no
    printing = bsd
    printcap name = /dev/null
    disable spoolss = yes
    registry shares = no
    usershare path =
    kernel oplocks = no

[data]
    path = {d}/share
    read only = no
    guest ok = no
    valid users = {TEST_USER}
""" + (f"""
[enc]
    path = {d}/share
    read only = no
    guest ok = no
    valid users = {TEST_USER}
    server smb encrypt = required
""" if self.encrypted_share else "")

    def _start_smbd(self, node: Node) -> None:
        d = self.tmp / node.name
        for sub in ("private", "lock", "state", "cache", "pid", "ncalrpc", "binddns", "share"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
        (d / "private").chmod(0o700)
        uid = pwd.getpwnam(TEST_USER).pw_uid
        os.chown(d / "share", uid, -1)
        node.share_dir = d / "share"
        node.smbd_conf = d / "smb.conf"
        node.smbd_conf.write_text(self._smb_conf(node))
        pw = f"{TEST_PASSWORD}\n{TEST_PASSWORD}\n".encode()
        run(["smbpasswd", "-c", str(node.smbd_conf), "-s", "-a", TEST_USER], input=pw)
        log = open(d / "smbd.stdout", "wb")
        node.smbd = subprocess.Popen(
            ["ip", "netns", "exec", node.netns, "smbd", "--foreground", "--no-process-group",
             "-s", str(node.smbd_conf)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            # Own session: when smbd stops it signals its whole process group (kill(0, ..)),
            # which must not be ours.
            start_new_session=True,
        )
        log.close()
        self.pids.append(node.smbd.pid)

    def _wait_listening(self, node: Node, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node.smbd.poll() is not None:
                raise LabError(f"smbd on {node.name} exited with {node.smbd.returncode}: {self._smbd_log(node)}")
            out = self._ns(node.netns, "ss", "-Hltn", "sport = :445", check=False).stdout.decode()
            if f"{node.address}:445" in out:
                return
            time.sleep(0.1)
        raise LabError(f"smbd on {node.name} not listening on {node.address}:445 after {timeout}s: "
                       f"{self._smbd_log(node)}")

    def _smbd_log(self, node: Node) -> str:
        d = self.tmp / node.name
        parts = []
        for f in ("smbd.stdout", "log.smbd"):
            p = d / f
            if p.exists():
                parts.append(p.read_text(errors="replace")[-2000:])
        return "\n".join(parts)

    # --- capture ---------------------------------------------------------------------------
    def _start_capture(self) -> None:
        out_dir = self.capture_dir or self.tmp
        self.capture_path = out_dir / f"{self.prefix}span.pcap"
        self.backlog_drops_at_start = backlog_drops()
        self._cap_err = open(self.tmp / "capture.stderr", "w+b")
        # pcap, whole frames (-s 0), each packet flushed to the file (-U), handed over at once
        # (--immediate-mode: no TPACKET_V3 blocks that sit in the ring until they fill or
        # time out, and whose partial last block can be lost at SIGINT), a 128 MiB kernel
        # buffer (-B, KiB) larger than a whole workload so a burst on a busy machine cannot
        # overrun it, no privilege drop (-Z root: the file is in a root-owned dir).
        self.capture_proc = subprocess.Popen(
            ["ip", "netns", "exec", self.mon, "tcpdump", "-n", "-i", "span1", "-s", "0", "-U",
             "--immediate-mode",
             "-B", "131072", "-Z", "root", "-w", str(self.capture_path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._cap_err,
            start_new_session=True,
        )
        self.pids.append(self.capture_proc.pid)
        deadline = time.monotonic() + 20
        while "listening on" not in self._cap_stderr():
            if self.capture_proc.poll() is not None:
                raise LabError(f"tcpdump exited with {self.capture_proc.returncode}: {self._cap_stderr()}")
            if time.monotonic() > deadline:
                raise LabError(f"tcpdump did not start: {self._cap_stderr()}")
            time.sleep(0.05)
        # "listening on" can precede the moment frames are really kept: send probe datagrams
        # n1 -> n2 (UDP discard port) through the switch until one lands in the file.
        while self.capture_path.stat().st_size <= 24:  # pcap file header only
            if time.monotonic() > deadline:
                raise LabError(f"capture saw no probe frame: {self._cap_stderr()}")
            self._ns(self.nodes["n1"].netns, sys.executable, "-c", _PROBE_SNIPPET, self.nodes["n2"].address)
            time.sleep(0.05)

    def _cap_stderr(self) -> str:
        self._cap_err.flush()
        return Path(self._cap_err.name).read_bytes().decode(errors="replace")

    def stop_capture(self, settle: float = 0.5) -> CaptureResult:
        """Stop tcpdump cleanly (SIGINT by PID) and return the capture path and its counters."""
        if self.capture_result is not None:
            return self.capture_result
        if self.capture_proc is None:
            raise LabError("no capture running")
        # Let the last ACKs/FINs of the workload reach the span before stopping, then let
        # tcpdump write out what its socket still holds: at SIGINT it stops reading, so on a
        # busy machine frames the span received but tcpdump had not yet read would be missing
        # from the file. It writes every frame as it reads it (-U), so the file stops growing
        # when it has caught up.
        time.sleep(settle)
        self._wait_capture_drained()
        self.capture_proc.send_signal(signal.SIGINT)
        try:
            self.capture_proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.capture_proc.kill()
            self.capture_proc.wait()
            raise LabError("tcpdump ignored SIGINT")
        err = self._cap_stderr()
        captured = dropped = None
        m = re.search(r"(\d+) packets? captured", err)
        if m:
            captured = int(m.group(1))
        m = re.search(r"(\d+) packets? dropped by kernel", err)
        if m:
            dropped = int(m.group(1))
        m = re.search(r"(\d+) packets? received by filter", err)
        received = int(m.group(1)) if m else None
        if self.capture_proc.returncode != 0:
            raise LabError(f"tcpdump exited with {self.capture_proc.returncode}: {err}")
        self.capture_result = CaptureResult(self.capture_path, captured, dropped, err,
                                            backlog_drops() - self.backlog_drops_at_start, received)
        return self.capture_result

    def _wait_capture_drained(self, quiet: float = 0.3, limit: float = 30.0) -> None:
        """Return once the capture file has not grown for `quiet` seconds (or after `limit`)."""
        assert self.capture_path is not None
        deadline = time.monotonic() + limit
        size, since = self.capture_path.stat().st_size, time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = self.capture_path.stat().st_size
            if now != size:
                size, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return

    # --- workloads -------------------------------------------------------------------------
    def put_file(self, node: str, name: str, data: bytes) -> Path:
        """Place a file directly in a node's share (no SMB traffic), e.g. for read workloads."""
        path = self.nodes[node].share_dir / name
        path.write_bytes(data)
        os.chown(path, pwd.getpwnam(TEST_USER).pw_uid, -1)
        return path

    def share_path(self, node: str, name: str) -> Path:
        return self.nodes[node].share_dir / name

    def run_client(self, node: str, server: str, ops: list[dict], *, dialect: str = "3.1.1",
                   timeout: float = 120.0, share: str = "data", encrypt: bool = False) -> dict:
        """Run the smbprotocol client inside ``node``'s namespace against ``server``'s share
        ``share``; return the client's JSON summary. With ``encrypt`` the session requires
        encryption and the summary holds its keys (``keys``)."""
        workload = {
            "server": self.nodes[server].address,
            "share": share,
            "encrypt": encrypt,
            "username": TEST_USER,
            "password": TEST_PASSWORD,
            "dialect": dialect,
            "ops": ops,
        }
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.nodes[node].netns, sys.executable, str(CLIENT_SCRIPT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            # The client needs only smbprotocol; keep it from importing the repo's tests.
            cwd=str(self.tmp),
            start_new_session=True,
        )
        self.pids.append(proc.pid)
        try:
            out, err = proc.communicate(json.dumps(workload).encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise LabError(f"client in {node} timed out after {timeout}s")
        if proc.returncode != 0:
            raise LabError(f"client in {node} → {server} failed ({proc.returncode}):\n"
                           f"{err.decode(errors='replace')[-3000:]}")
        return json.loads(out)

    def topology_toml(self, members: tuple[str, ...] = ("n1", "n2")) -> str:
        """The analyzer's topology file for this lab: one [nodes.NAME] table per namespace."""
        lines = []
        for name, node in self.nodes.items():
            lines += [f"[nodes.{name}]", f'addresses = ["{node.address}"]',
                      f"member = {'true' if name in members else 'false'}", ""]
        return "\n".join(lines)

    # --- teardown --------------------------------------------------------------------------
    def close(self) -> None:
        """Tear everything down; safe to call twice and after a partial build."""
        errors = []
        if self.capture_proc is not None and self.capture_proc.poll() is None:
            self.capture_proc.send_signal(signal.SIGINT)
            try:
                self.capture_proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.capture_proc.kill()
                self.capture_proc.wait()
        for node in self.nodes.values():
            if node.smbd is not None and node.smbd.poll() is None:
                node.smbd.terminate()
        for node in self.nodes.values():
            if node.smbd is not None:
                try:
                    node.smbd.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    node.smbd.kill()
                    node.smbd.wait()
        # Whatever still lives in our namespaces (smbd connection children, helpers) was
        # started by this lab: the namespaces exist only for it.
        for ns in self.namespaces:
            for pid in self._netns_pids(ns):
                self._kill_pid(pid)
        for ns in reversed(self.namespaces):
            proc = run(["ip", "netns", "del", ns], check=False)
            if proc.returncode != 0:
                errors.append(f"ip netns del {ns}: {proc.stderr.decode().strip()}")
        self.namespaces = []
        if getattr(self, "_cap_err", None) is not None:
            self._cap_err.close()
            self._cap_err = None
        if self.tmp is not None and self.tmp.exists():
            shutil.rmtree(self.tmp, ignore_errors=True)
        if self.backlog_raised:
            _restore_backlog()
            self.backlog_raised = False
        if self.created_user:
            # Only when this lab created it, and only when no other lab run still uses it.
            if not lab_namespaces("smbw-"):
                proc = run(["userdel", TEST_USER], check=False)
                if proc.returncode != 0:
                    errors.append(f"userdel {TEST_USER}: {proc.stderr.decode().strip()}")
            self.created_user = False
        if errors:
            raise LabError("teardown: " + "; ".join(errors))

    @staticmethod
    def _netns_pids(ns: str) -> list[int]:
        proc = run(["ip", "netns", "pids", ns], check=False)
        return [int(p) for p in proc.stdout.decode().split() if p.isdigit()]

    @staticmethod
    def _kill_pid(pid: int) -> None:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.05)
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
