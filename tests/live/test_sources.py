"""Live capture sources (dissectors/src/live) against real traffic on a veth pair.

Two namespaces A (198.18.0.1) and B (198.18.0.2) joined by a veth pair; the `livecat`
example captures on B's end. Counts are checked against what was sent and against B's own
TCP stack (Tcp InSegs), for the eBPF backend at each of its hooks (TCX, XDP) and for AF_PACKET.
For eBPF, nothing of ours may stay in the kernel after livecat exits, is terminated, or is killed.

Needs root (network namespaces, BPF). Run: pytest tests/live
"""

import hashlib
import json
import re
import os
import signal
import socket
import struct
import subprocess
import time
from collections import Counter

import pytest

from paths import ROOT
from live.test_metrics import pcap_frames
LIVECAT = ROOT / "target" / "release" / "examples" / "livecat"
#: bpftool's name of the program at each hook.
PROGRAMS = {"tcx": "smbwire_tc", "xdp": "smbwire_xdp"}
HOOKS = ["tcx", "xdp"]
#: A capture source: the eBPF program at one of its hooks, or AF_PACKET. `xdp-loop` is the XDP
#: entry point with the copy older kernels get (8-byte loads; SMBWIRE_XDP_COPY=loop): this
#: kernel has bpf_xdp_load_bytes (5.18+), which `xdp` uses, and Debian 12's 6.1 has it too.
BACKENDS = [*HOOKS, "xdp-loop", "af-packet"]
#: The copy each XDP backend must report (livecat's `xdp_copy`).
XDP_COPY = {"xdp": "helper", "xdp-loop": "loop"}
#: `tcx-staged` is TCX with each frame copied through a per-CPU slot into the ring
#: (SMBWIRE_BPF_COPY=staged), as xdp-loop copies; the others copy straight into a ring
#: reservation. Only the tests of the copy itself run it.
STAGED = "tcx-staged"
#: How each eBPF backend must say it copies into the ring (livecat's `ring_copy`).
RING_COPY = {"tcx": "direct", "xdp": "direct", "xdp-loop": "staged", STAGED: "staged"}


def hook_of(backend):
    """The eBPF hook a backend attaches to (None for AF_PACKET)."""
    return None if backend == "af-packet" else backend.split("-")[0]



@pytest.fixture(autouse=True)
def _root():
    # CI runs as root: a missing privilege is a failure, never a skip.
    assert os.geteuid() == 0, "tests/live needs root: network namespaces and BPF"


def sh(*args, check=True, **kw):
    return subprocess.run(args, check=check, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def livecat():
    sh("cargo", "build", "--quiet", "--example", "livecat", "--release", cwd=ROOT)
    assert LIVECAT.exists()
    return LIVECAT


class Lab:
    """Namespaces A and B joined by a veth pair; IPv6 off and static neighbours, so the only
    frames on the wire are the ones a test sends."""

    def __init__(self):
        tag = f"{os.getpid() % 100000}"
        self.a, self.b = f"swl{tag}a", f"swl{tag}b"
        self.va, self.vb = f"swl{tag}va", f"swl{tag}vb"

    def ns(self, ns, *args, **kw):
        return sh("ip", "netns", "exec", ns, *args, **kw)

    def up(self):
        sh("ip", "netns", "add", self.a)
        sh("ip", "netns", "add", self.b)
        for ns in (self.a, self.b):
            self.ns(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        sh("ip", "link", "add", self.va, "netns", self.a, "type", "veth", "peer", "name", self.vb, "netns", self.b)
        for ns, dev, last in ((self.a, self.va, 1), (self.b, self.vb, 2)):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", f"198.18.0.{last}/24", "dev", dev)
            # One wire packet per skb, so the kernel's segment counters equal packet counts.
            sh("ip", "-n", ns, "link", "set", dev, "gso_max_segs", "1", "up")
        self.mac_a, self.mac_b = self.mac(self.a, self.va), self.mac(self.b, self.vb)
        sh("ip", "-n", self.a, "neigh", "replace", "198.18.0.2", "lladdr", self.mac_b, "dev", self.va, "nud", "permanent")
        sh("ip", "-n", self.b, "neigh", "replace", "198.18.0.1", "lladdr", self.mac_a, "dev", self.vb, "nud", "permanent")

    def allow_gso(self):
        """Back to the default: the veth peer hands over whole GSO frames of many segments."""
        sh("ip", "-n", self.a, "link", "set", self.va, "gso_max_segs", "65535")

    @staticmethod
    def mac(ns, dev):
        return json.loads(sh("ip", "-n", ns, "-j", "link", "show", dev).stdout)[0]["address"]

    def inject(self, frames):
        """Sends raw Ethernet frames out of A's end (the kernel takes tags off on B's side)."""
        code = (
            "import socket,sys\n"
            "s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\n"
            f"s.bind(('{self.va}',0))\n"
            "for line in sys.stdin: s.send(bytes.fromhex(line.strip()))\n"
        )
        self.ns(self.a, "python3", "-c", code, input="".join(f.hex() + "\n" for f in frames))

    def down(self):
        sh("ip", "netns", "del", self.a, check=False)
        sh("ip", "netns", "del", self.b, check=False)

    def tcp_counter(self, ns, name):
        lines = [l.split() for l in self.ns(ns, "cat", "/proc/net/snmp").stdout.splitlines() if l.startswith("Tcp:")]
        return int(lines[1][lines[0].index(name)])

    def tcp_insegs(self):
        """Tcp InSegs of namespace B (RFC 1213 tcpInSegs): one per received skb."""
        return self.tcp_counter(self.b, "InSegs")

    def tcp_outsegs(self):
        """Segments namespace A put on the wire: Tcp OutSegs (every segment of a GSO skb, but
        not retransmissions: Linux counts those in RetransSegs only) plus RetransSegs."""
        return self.tcp_counter(self.a, "OutSegs") + self.tcp_counter(self.a, "RetransSegs")

    def tx_dropped(self):
        """Frames A's veth could not hand to B (B's backlog full): sent, never seen by B."""
        stats = json.loads(sh("ip", "-n", self.a, "-s", "-j", "link", "show", self.va).stdout)[0]["stats64"]
        return stats["tx"]["dropped"]

    def udp(self, dst, port, count, size=100):
        code = (
            "import socket,sys\n"
            "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
            f"for i in range({count}): s.sendto(bytes({size}),('{dst}',{port}))\n"
        )
        self.ns(self.a, "python3", "-c", code)

    def tcp_transfer(self, port, nbytes):
        """Sends `nbytes` from A to a listener in B and waits until both sides closed."""
        server = (
            "import socket\n"
            "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
            f"s.bind(('198.18.0.2',{port})); s.listen(1); print('up',flush=True)\n"
            "c,_=s.accept(); n=0\n"
            "while True:\n"
            "    b=c.recv(65536)\n"
            "    if not b: break\n"
            "    n+=len(b)\n"
            "c.sendall(n.to_bytes(8,'big')); c.close(); print(n,flush=True)\n"
        )
        srv = subprocess.Popen(["ip", "netns", "exec", self.b, "python3", "-c", server], stdout=subprocess.PIPE, text=True)
        try:
            assert srv.stdout.readline().strip() == "up"
            # struct tcp_info (linux/tcp.h): tcpi_bytes_retrans is the u64 at offset 208.
            client = (
                "import socket,struct\n"
                f"c=socket.create_connection(('198.18.0.2',{port}),timeout=20)\n"
                f"c.sendall(bytes({nbytes})); c.shutdown(socket.SHUT_WR)\n"
                "n=int.from_bytes(c.recv(8),'big'); c.recv(1)\n"
                "ti=c.getsockopt(socket.IPPROTO_TCP,socket.TCP_INFO,232)\n"
                "print(n, struct.unpack_from('<Q',ti,208)[0]); c.close()\n"
            )
            got, retrans_bytes = map(int, self.ns(self.a, "python3", "-c", client, timeout=60).stdout.split())
            assert got == nbytes
            assert int(srv.stdout.readline()) == nbytes
            srv.wait(timeout=20)
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait()
        time.sleep(0.3)  # the last ACK
        return retrans_bytes




def ready_line(backend):
    """What livecat prints once `backend` (a hook, xdp-loop, or af-packet) is attached."""
    return "ready af-packet" if backend == "af-packet" else f"ready ebpf {hook_of(backend)}"


def backend_env(backend):
    """The environment livecat needs for `backend` (NAME=VALUE words for `env`)."""
    return {"xdp-loop": ["SMBWIRE_XDP_COPY=loop"], STAGED: ["SMBWIRE_BPF_COPY=staged"]}.get(backend, [])


def backend_args(backend):
    return ["--af-packet"] if backend == "af-packet" else ["--require-ebpf", "--hook", hook_of(backend)]


class Capture:
    def __init__(self, livecat, lab, backend, *extra):
        args = ["ip", "netns", "exec", lab.b, "env", *backend_env(backend), str(livecat), lab.vb,
                "--seconds", "120", "--stdin-stop", *extra, *backend_args(backend)]
        self.backend = backend
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stderr.readline()
        assert line.strip() == ready_line(backend), line + self.p.stderr.read()

    def finish(self):
        out, err = self.p.communicate(timeout=30)
        assert self.p.returncode == 0, err
        r = json.loads(out)
        assert r["hook"] == hook_of(self.backend), r
        if hook_of(self.backend) == "xdp":
            assert r["xdp_mode"] == "native", r  # veth has native XDP
        assert r["xdp_copy"] == XDP_COPY.get(self.backend), r
        assert r["ring_copy"] == RING_COPY.get(self.backend), r
        return r


def check_invariants(r, shed=False):
    """The counters agree; with `shed` (livecat --shed) frames of shed connections are counted
    apart, else there are none."""
    assert r["numbers_ok"] and r["ts_ok"] and r["all_delivered_match"], r
    st = r["stats"]
    assert st["packets_delivered"] == r["delivered"]
    assert sum(f["packets"] for f in st["flows"]) == st["packets_matched"]
    assert sum(f["bytes"] for f in st["flows"]) == st["bytes_matched"]
    assert st["packets_seen"] >= st["packets_matched"] >= st["frames_matched"]
    if not shed:
        assert st["shed_frames"] == st["shed_chosen"] == r["marked"] == 0, st
    if r["backend"] == "ebpf":
        assert r["delivered"] + st["ring_drops"] + st["copy_errors"] + st["shed_frames"] == st["frames_matched"]
    else:
        assert r["delivered"] == st["frames_matched"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_rocev2_udp_exact_and_other_udp_not_copied(livecat, lab, backend):
    cap = Capture(livecat, lab, backend)
    lab.udp("198.18.0.2", 4791, 200)
    lab.udp("198.18.0.2", 4792, 70)
    time.sleep(0.2)
    r = cap.finish()
    check_invariants(r)
    st = r["stats"]
    frame = 14 + 20 + 8 + 100
    assert st["packets_matched"] == 200 and r["delivered"] == 200
    assert st["bytes_matched"] == 200 * frame == r["delivered_wire_bytes"]
    assert st["packets_seen"] == 270 and st["bytes_seen"] == 270 * frame
    assert st["flow_count"] == 1 and st["flows"][0]["flow"].endswith("> 198.18.0.2:4791 rocev2")
    assert st["ring_drops"] == 0 and st["kernel_drops"] == 0


def udp_counters(lab):
    """UDP datagrams B's stack received: delivered to a socket, or to no port (ICMP sent)."""
    lines = [l.split() for l in lab.ns(lab.b, "cat", "/proc/net/snmp").stdout.splitlines() if l.startswith("Udp:")]
    return sum(int(lines[1][lines[0].index(k)]) for k in ("InDatagrams", "NoPorts", "InErrors"))


def test_xdp_drop_takes_only_storage_frames_from_the_stack(livecat, lab):
    """--xdp-drop: storage frames are counted and copied, then dropped before the stack;
    other traffic still reaches it."""
    cap = Capture(livecat, lab, "xdp", "--xdp-drop")
    before, dropped_before = udp_counters(lab), rx_dropped(lab)
    lab.udp("198.18.0.2", 4791, 200)
    lab.udp("198.18.0.2", 4792, 70)
    time.sleep(0.2)
    r = cap.finish()
    check_invariants(r)
    st = r["stats"]
    assert st["packets_matched"] == 200 == r["delivered"] and st["packets_seen"] == 270
    assert udp_counters(lab) - before == 70, "only the 4792 datagrams reached B's stack"
    # The driver counts XDP_DROP in its XDP statistics, not in rx_dropped: no "kernel drops".
    assert rx_dropped(lab) - dropped_before == st["interface_drops"] == st["kernel_drops"] == 0, st


@pytest.mark.parametrize("backend", BACKENDS)
def test_tcp_445_exact_against_kernel_and_8080_not_copied(livecat, lab, backend):
    cap = Capture(livecat, lab, backend)
    before, dropped_before = lab.tcp_insegs(), rx_dropped(lab)
    lab.tcp_transfer(445, 1 << 20)
    segs_445 = lab.tcp_insegs() - before
    lab.tcp_transfer(8080, 1 << 20)
    segs_8080 = lab.tcp_insegs() - before - segs_445
    r = cap.finish()
    check_invariants(r)
    st = r["stats"]
    assert segs_445 > (1 << 20) // 1500
    assert st["packets_matched"] == segs_445 == r["delivered"]
    assert st["bytes_matched"] > 1 << 20
    assert st["flow_count"] == 1 and st["flows"][0]["flow"].endswith("> 198.18.0.2:445 tcp")
    # The 8080 transfer was seen, not copied. Every segment B's TCP received passed the hook
    # first (a frame the hook saw may still be dropped before TCP, hence >=). Its segment count
    # is measured, not assumed equal to port 445's: segmentation of the same 1 MiB varies.
    assert segs_8080 > (1 << 20) // 1500
    assert st["packets_seen"] >= segs_445 + segs_8080
    # A frame B's full receive backlog refused (another busy process on the machine can cause
    # it; TCP then resends it) never reached either counter above, and must be reported as
    # exactly that interface drop; the capture itself loses nothing.
    dropped = rx_dropped(lab) - dropped_before
    assert st["kernel_drops"] == st["interface_drops"] == dropped, (st, dropped)
    assert st["ring_drops"] == 0 and r["truncated"] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_gso_frames_count_as_their_wire_packets(livecat, lab, backend):
    """With GSO allowed one frame carries up to 64 KiB; counters must still be in wire
    packets (as TCP's InSegs counts them) and wire bytes, and copies must be whole. With a
    native XDP program on its peer, veth turns GSO off on the sending side (veth_fix_features),
    so XDP sees, counts and copies each wire packet, as on a NIC where it runs before GRO."""
    lab.allow_gso()
    nbytes = 4 << 20
    # A frame dropped between A and B (B's backlog full: a busy machine) was counted by A's
    # TCP but never reached the hook; the byte check below cannot account for it, so such a
    # run proves nothing about the counters: it is run again with a fresh capture, up to three
    # times (one of a full CI run's was lost on a machine also running a fuzzing campaign).
    for _ in range(3):
        cap = Capture(livecat, lab, backend)
        before, frames_before, dropped_before = lab.tcp_outsegs(), lab.tcp_insegs(), lab.tx_dropped()
        retrans_bytes = lab.tcp_transfer(445, nbytes)
        segs, frames = lab.tcp_outsegs() - before, lab.tcp_insegs() - frames_before
        r = cap.finish()
        check_invariants(r)
        if lab.tx_dropped() == dropped_before:
            break
    st = r["stats"]
    assert lab.tx_dropped() == dropped_before, "frames were lost on the veth in 3 runs: rerun on a quieter machine"
    if hook_of(backend) == "xdp":
        assert st["frames_matched"] == segs == r["delivered"] + st["ring_drops"], "one frame per wire packet"
    else:
        assert st["frames_matched"] == frames < segs // 4, "the peer did hand over GSO frames"
    # Retransmitted segments (a busy machine makes a few) were on the wire: counted again.
    assert st["packets_matched"] == segs
    # Linux defaults: SYN 74 bytes (MSS, SACK-permitted, timestamps, window scale); every
    # other segment A->B carries the timestamp option: 14 + 20 + 32 = 66 bytes of headers.
    assert st["bytes_matched"] == nbytes + retrans_bytes + 66 * segs + 8
    assert r["truncated"] == 0 and r["captured_bytes"] == r["delivered_wire_bytes"]
    assert r["delivered_wire_bytes"] == nbytes + retrans_bytes + 66 * st["frames_matched"] + 8


@pytest.mark.parametrize("backend", BACKENDS)
def test_configured_port_adds_to_defaults(livecat, lab, backend):
    cap = Capture(livecat, lab, backend, "--ports", "8080")
    before = lab.tcp_insegs()
    lab.tcp_transfer(8080, 100_000)
    lab.tcp_transfer(445, 100_000)
    segs = lab.tcp_insegs() - before
    lab.tcp_transfer(8081, 100_000)  # not configured: not copied
    r = cap.finish()
    check_invariants(r)
    assert r["stats"]["packets_matched"] == segs == r["delivered"]
    ends = sorted(f["flow"].rsplit(":", 1)[1] for f in r["stats"]["flows"])
    assert ends == ["445 tcp", "8080 tcp"], r["stats"]["flows"]


def ether(lab, *tags_and_type):
    """Ethernet header A->B; `tags_and_type` is (tpid, vid)* then the EtherType."""
    h = bytes.fromhex(lab.mac_b.replace(":", "")) + bytes.fromhex(lab.mac_a.replace(":", ""))
    *tags, ethertype = tags_and_type
    for tpid, vid in tags:
        h += struct.pack("!HH", tpid, vid)
    return h + struct.pack("!H", ethertype)


def ipv4(proto, l4, frag=0x4000):
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 1, frag, 64, proto, 0,
                      socket.inet_aton("198.18.0.1"), socket.inet_aton("198.18.0.2"))
    return hdr + l4


def ipv6(next_header, rest):
    return struct.pack("!IHBB16s16s", 0x6 << 28, len(rest), next_header, 64,
                       socket.inet_pton(socket.AF_INET6, "2001:db8::1"),
                       socket.inet_pton(socket.AF_INET6, "2001:db8::2")) + rest


def udp(sport, dport, n=64):
    return struct.pack("!HHHH", sport, dport, 8 + n, 0) + bytes(n)


def tcp(sport, dport, n=64):
    return struct.pack("!HHIIHHHH", sport, dport, 1, 0, 0x5010, 65535, 0, 0) + bytes(n)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("snaplen", [None, 101])
def test_copies_are_the_frames_byte_for_byte(livecat, lab, backend, snaplen):
    """Each delivered frame is the frame on the wire (or its first `--snaplen` bytes), byte for
    byte, whichever way it was copied: bpf_skb_load_bytes at TC, bpf_xdp_load_bytes or the
    8-byte load loop with its byte tail at XDP, AF_PACKET's ring. Lengths cover every
    remainder modulo 8, the shortest frame and a full 1500-byte MTU."""
    lengths = [60, 61, 62, 63, 64, 65, 66, 67, 68, 127, 129, 1001, 1514]
    frames = []
    for i, total in enumerate(lengths):
        n = total - 14 - 20 - 20
        body = bytes((i * 31 + j * 7 + (j >> 8)) & 0xFF for j in range(n))
        frames.append(ether(lab, 0x0800) + ipv4(6, tcp(50000 + i, 445, 0) + body))
    assert [len(f) for f in frames] == lengths
    extra = ("--digests",) + (("--snaplen", str(snaplen)) if snaplen else ())
    cap = Capture(livecat, lab, backend, *extra)
    lab.inject(frames)
    time.sleep(0.2)
    r = cap.finish()
    check_invariants(r)
    want = [hashlib.sha256(f[:snaplen] if snaplen else f).hexdigest() for f in frames]
    assert r["digests"] == want
    assert r["truncated"] == (sum(len(f) > snaplen for f in frames) if snaplen else 0)


#: The sizes of a TC frame's record in its ring (bpf/smbwire.bpf.c, `copy_direct`): a frame
#: of at most n bytes is copied into a record with room for n.
COPY_CLASSES = [64, 96, 128, 192, 256, 384, 512, 768, 1024, 1280, 1536, 2048, 3072, 4096, 6144,
                9216, 13824, 20736, 31104, 46656]


@pytest.mark.parametrize("backend", ["tcx", STAGED])
def test_tc_copies_of_every_record_size_are_the_frames(livecat, lab, backend):
    """TC copies a frame straight into a ring reservation of the smallest size class it fits
    (or, staged, through a per-CPU slot): frames of each class's size and one byte more, up
    to the largest a 64 KiB MTU lets through, arrive whole and byte for byte, and nothing is
    copied from beyond a frame's end (the record is larger than the frame)."""
    lengths = sorted({60, 65535 + 14} | {n for c in COPY_CLASSES for n in (c, c + 1) if n >= 60})
    frames = []
    for i, total in enumerate(lengths):
        n = total - 14 - 20 - 20
        body = bytes((i * 37 + j * 11 + (j >> 9)) & 0xFF for j in range(n))
        frames.append(ether(lab, 0x0800) + ipv4(6, tcp(51000, 445, 0) + body))
    assert [len(f) for f in frames] == lengths
    for dev, ns in ((lab.va, lab.a), (lab.vb, lab.b)):
        sh("ip", "-n", ns, "link", "set", dev, "mtu", "65535")
    try:
        cap = Capture(livecat, lab, backend, "--digests")
        lab.inject(frames)
        time.sleep(0.3)
        r = cap.finish()
    finally:
        for dev, ns in ((lab.va, lab.a), (lab.vb, lab.b)):
            sh("ip", "-n", ns, "link", "set", dev, "mtu", "1500")
    check_invariants(r)
    assert r["stats"]["copy_errors"] == 0 and r["stats"]["ring_drops"] == 0, r["stats"]
    assert r["delivered"] == len(frames) and r["truncated"] == 0
    assert r["digests"] == [hashlib.sha256(f).hexdigest() for f in frames]


@pytest.mark.parametrize("backend", BACKENDS)
def test_tags_ipv6_rocev1_fragments_exact(livecat, lab, backend):
    """Crafted frames, one class at a time, with exact expected counts; tags the kernel took
    off must be back in the delivered frames (`all_delivered_match` re-classifies them)."""
    hop_by_hop = bytes([44, 0]) + bytes(6)
    first_fragment = bytes([6, 0, 0, 1]) + bytes(4)  # offset 0, more fragments
    grh = struct.pack("!IHBB16s16s", 0x6 << 28, 76, 0x1B, 1, bytes(15) + b"\x01", bytes(15) + b"\x02")
    matched = [
        ether(lab, (0x8100, 100), 0x0800) + ipv4(17, udp(49152, 4791)),  # 802.1Q
        ether(lab, (0x88A8, 10), (0x8100, 20), 0x0800) + ipv4(6, tcp(50000, 445)),  # QinQ
        ether(lab, 0x86DD) + ipv6(0, hop_by_hop + first_fragment + tcp(50001, 5445)),
        ether(lab, 0x8915) + grh + bytes(76),  # RoCEv1
        ether(lab, 0x0800) + ipv4(6, tcp(445, 50002)),  # server to client direction
        # Cisco MetaData (TrustSec's in-line SGT 17), alone and after a tag.
        ether(lab, 0x8909) + cmd(0x0800) + ipv4(6, tcp(50010, 445)),
        ether(lab, (0x8100, 100), 0x8909) + cmd(0x86DD) + ipv6(6, tcp(50011, 445)),
    ]
    unmatched = [
        ether(lab, 0x8909) + cmd(0x0800, version=2) + ipv4(6, tcp(50012, 445)),  # a form not walked
        ether(lab, 0x0800) + ipv4(6, tcp(50000, 446)),
        ether(lab, 0x0800) + ipv4(17, udp(4791, 49152)),  # RoCEv2 is matched on destination
        ether(lab, 0x0800) + ipv4(6, tcp(50000, 445), frag=0x0010),  # non-first fragment
        ether(lab, 0x0806) + bytes(28),
        ether(lab, 0x86DD) + ipv6(6, tcp(50003, 8080)),
    ]
    cap = Capture(livecat, lab, backend)
    lab.inject(matched * 7 + unmatched * 3)
    time.sleep(0.2)
    r = cap.finish()
    check_invariants(r)
    st = r["stats"]
    # On the wire a tag is 4 bytes; frames shorter than 60 bytes are not padded on a veth.
    wire = [len(f) for f in matched]
    assert st["packets_matched"] == 7 * len(matched) == r["delivered"]
    assert st["bytes_matched"] == 7 * sum(wire) == r["delivered_wire_bytes"] == r["captured_bytes"]
    assert st["packets_seen"] == 7 * len(matched) + 3 * len(unmatched)
    assert st["bytes_seen"] == 7 * sum(wire) + 3 * sum(len(f) for f in unmatched)
    assert st["flow_count"] == len(matched)
    names = sorted(f["flow"] for f in st["flows"])
    assert names == sorted([
        "198.18.0.1:49152 > 198.18.0.2:4791 rocev2",
        "198.18.0.1:50000 > 198.18.0.2:445 tcp",
        "[2001:db8::1]:50001 > [2001:db8::2]:5445 tcp",
        "::1 > ::2 rocev1",
        "198.18.0.1:445 > 198.18.0.2:50002 tcp",
        "198.18.0.1:50010 > 198.18.0.2:445 tcp",
        "[2001:db8::1]:50011 > [2001:db8::2]:445 tcp",
    ])
    assert all(f["packets"] == 7 for f in st["flows"])


def cmd(ethertype, version=1, sgt=17):
    """A Cisco MetaData header after its EtherType (0x8909): version, length 1, the SGT
    option, the SGT, then the EtherType of what follows."""
    return struct.pack("!BBHHH", version, 1, 1, sgt, ethertype)


def inner_ipv4(src, dst, proto, l4):
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 1, 0x4000, 64, proto, 0,
                       socket.inet_aton(src), socket.inet_aton(dst)) + l4


def inner_ether(ethertype=0x0800):
    return bytes.fromhex("020000000b02020000000b01") + struct.pack("!H", ethertype)


def gre(proto, flags=0x00, words=b""):
    return struct.pack("!BBH", flags, 0, proto) + words


def erspan2():
    return gre(0x88BE, 0x10, struct.pack("!I", 1)) + struct.pack("!HHI", 0x1000, 42, 1)


def erspan3(frame_type=0):
    return gre(0x22EB, 0x10, struct.pack("!I", 1)) + struct.pack("!HHIHH", 0x2000, 42, 5, 0, frame_type << 10)


def vxlan(inner, port=4789):
    return udp(49152, port, 0)[:4] + struct.pack("!HH", 16 + len(inner), 0) + struct.pack("!II", 0x08000000, 42 << 8) + inner


def geneve(inner, protocol=0x6558, version=0, options=b"\x01\x02\x01\x01\x00\x00\x00\x07"):
    """GENEVE (RFC 8926) to port 6081: version, options length in words, the payload's
    EtherType, VNI 42, then the options (one by default, as OVN adds)."""
    header = struct.pack("!BBHI", (version << 6) | len(options) // 4, 0, protocol, 42 << 8) + options
    return udp(49152, 6081, 0)[:4] + struct.pack("!HH", 8 + len(header) + len(inner), 0) + header + inner


def check_matched_by_the_frame_inside(livecat, lab, backend, matched, unmatched, flows):
    """Sends each matched frame 5 times and each unmatched one 3 times: exactly the matched
    frames are copied and counted, whole, under `flows` (one per matched frame)."""
    cap = Capture(livecat, lab, backend)
    lab.inject(matched * 5 + unmatched * 3)
    time.sleep(0.2)
    r = cap.finish()
    check_invariants(r)
    st = r["stats"]
    assert st["packets_matched"] == 5 * len(matched) == r["delivered"]
    assert st["bytes_matched"] == 5 * sum(len(f) for f in matched) == r["delivered_wire_bytes"]
    assert st["packets_seen"] == 5 * len(matched) + 3 * len(unmatched)
    assert sorted(f["flow"] for f in st["flows"]) == sorted(flows)
    assert all(f["packets"] == 5 for f in st["flows"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_remote_mirror_tunnels_are_matched_by_the_frame_inside(livecat, lab, backend):
    """A remote mirror session's copies (gretap, ERSPAN II and III, GRE over IP, VXLAN, GENEVE) are
    storage traffic when the frame inside is, counted whole (the tunnel's bytes are on the
    wire) under the inner frame's flow, also two deep (ERSPAN inside VXLAN) as `analyze` opens
    them; a tunnel of something else, a GRE this program does not follow, and a third tunnel
    are not copied."""
    t445 = inner_ipv4("198.18.5.1", "198.18.5.2", 6, tcp(50000, 445))
    matched = [
        ether(lab, 0x0800) + ipv4(47, gre(0x6558) + inner_ether() + t445),  # gretap
        ether(lab, 0x0800) + ipv4(47, erspan2() + inner_ether() + inner_ipv4("198.18.6.1", "198.18.6.2", 17, udp(49152, 4791))),
        ether(lab, 0x0800) + ipv4(47, erspan3() + inner_ether(0x86DD) + ipv6(6, tcp(50001, 5445))),
        ether(lab, 0x0800) + ipv4(47, erspan3(2) + inner_ipv4("198.18.7.1", "198.18.7.2", 6, tcp(50002, 445))),
        ether(lab, 0x0800) + ipv4(47, gre(0x0800, 0x20, struct.pack("!I", 9)) + inner_ipv4("198.18.8.1", "198.18.8.2", 6, tcp(445, 50003))),
        ether(lab, 0x0800) + ipv4(17, vxlan(inner_ether() + inner_ipv4("198.18.9.1", "198.18.9.2", 6, tcp(50004, 445)))),
        ether(lab, 0x0800) + ipv4(17, vxlan(inner_ether() + inner_ipv4("198.18.10.1", "198.18.10.2", 6, tcp(50005, 445)), 8472)),
        ether(lab, 0x0800) + ipv4(17, geneve(inner_ether() + inner_ipv4("198.18.11.1", "198.18.11.2", 6, tcp(50006, 445)))),
        ether(lab, 0x0800) + ipv4(17, geneve(inner_ipv4("198.18.12.1", "198.18.12.2", 6, tcp(50007, 445)), 0x0800, options=b"")),
        # An ERSPAN session copying a link with TrustSec in-line tagging (Cisco MetaData).
        ether(lab, 0x0800) + ipv4(47, erspan2() + inner_ether(0x8909) + cmd(0x0800)
                                  + inner_ipv4("198.18.14.1", "198.18.14.2", 6, tcp(50009, 445))),
        # Two deep, as `analyze` opens them: an ERSPAN session carried across a VXLAN fabric.
        ether(lab, 0x0800) + ipv4(17, vxlan(inner_ether() + inner_ipv4("198.18.3.1", "198.18.3.2", 47, erspan2() + inner_ether()
                                                                       + inner_ipv4("198.18.13.1", "198.18.13.2", 6, tcp(50008, 445))))),
    ]
    unmatched = [
        ether(lab, 0x0800) + ipv4(17, vxlan(inner_ether() + inner_ipv4("198.18.9.1", "198.18.9.2", 6, tcp(50004, 8080)))),
        ether(lab, 0x0800) + ipv4(47, erspan2() + inner_ether() + inner_ipv4("198.18.6.1", "198.18.6.2", 17, udp(49152, 4792))),
        ether(lab, 0x0800) + ipv4(47, gre(0x8847) + bytes(4) + t445),  # MPLS
        ether(lab, 0x0800) + ipv4(47, struct.pack("!BBH", 0x30, 0x01, 0x880B) + bytes(8) + t445),  # PPTP (version 1)
        # Three deep: not looked into.
        ether(lab, 0x0800) + ipv4(47, gre(0x6558) + inner_ether() + inner_ipv4("198.18.4.1", "198.18.4.2", 17, vxlan(
            inner_ether() + inner_ipv4("198.18.3.1", "198.18.3.2", 47, gre(0x6558) + inner_ether() + t445)))),
        ether(lab, 0x0800) + ipv4(17, geneve(inner_ether() + t445, version=1)),  # a GENEVE version that does not exist
        ether(lab, 0x0800) + ipv4(17, geneve(bytes(4) + t445, protocol=0x8847)),  # MPLS in GENEVE
    ]
    check_matched_by_the_frame_inside(livecat, lab, backend, matched, unmatched, [
        "198.18.5.1:50000 > 198.18.5.2:445 tcp",
        "198.18.6.1:49152 > 198.18.6.2:4791 rocev2",
        "[2001:db8::1]:50001 > [2001:db8::2]:5445 tcp",
        "198.18.7.1:50002 > 198.18.7.2:445 tcp",
        "198.18.8.1:445 > 198.18.8.2:50003 tcp",
        "198.18.9.1:50004 > 198.18.9.2:445 tcp",
        "198.18.10.1:50005 > 198.18.10.2:445 tcp",
        "198.18.11.1:50006 > 198.18.11.2:445 tcp",
        "198.18.12.1:50007 > 198.18.12.2:445 tcp",
        "198.18.13.1:50008 > 198.18.13.2:445 tcp",
        "198.18.14.1:50009 > 198.18.14.2:445 tcp",
    ])


#: Frames of tunnels as other implementations write them (captures/tunnels, from tcpdump's test
#: suite): capture, frame number, the tunnel smbwire names it.
OTHERS_TUNNELS = [
    ("erspan-type-i-1.pcap", 1, "erspan1"),
    ("erspan-type-ii-1.pcap", 1, "erspan2"),
    ("erspan-type-iii-ft-0.pcap", 1, "erspan3"),
    ("erspan-type-i-4.pcap", 0, "gre_ip"),  # 0: its first GRE frame carrying IP
    ("geneve.pcap", 1, "geneve"),
    ("geneve-gcp.pcap", 1, "geneve"),  # GENEVE carrying IP
    ("vxlan.pcap", 1, "vxlan"),
    ("vxlan_port_8472.pcap", 1, "vxlan"),
    ("gso-ipv6-vxlan-ipv6.pcap", 1, "vxlan"),  # over IPv6
    ("gso-ipv6-geneve-ipv4.pcap", 1, "geneve"),
    ("various_gre.pcap", 25, "gre_ip"),  # Cisco MetaData between GRE and IP, after a VLAN tag
]
TUNNEL_LAYERS = ("gre", "erspan", "vxlan", "geneve", "cmd")


def others_tunnel_frame(lab, capture, number, sport):
    """The capture's frame with its inner frame replaced by a TCP segment to port 445 from
    `sport` (the inner frame's kind kept: Ethernet, IPv4 or IPv6), addressed from A to B, the
    outer lengths and IPv4 checksum made to fit; the tunnel's headers are the capture's own.
    Returns the frame and its inner flow as livecat names it."""
    import tshark_oracle
    from scapy.utils import checksum

    path = ROOT / "captures" / "tunnels" / capture
    layers = tshark_oracle.frame_layers(path, tshark_oracle.TUNNEL_DECODE_AS.get(capture, []))
    if number == 0:  # the first GRE frame carrying IP
        number = 1 + next(i for i, ls in enumerate(layers) if [n for n, _ in ls][-3:-1] == ["gre", "ip"])
    frame, names = pcap_frames(path)[number - 1], [n for n, _ in layers[number - 1]]
    pos = dict(reversed(layers[number - 1]))  # the first occurrence of each layer
    last = max(i for i, n in enumerate(names) if n in TUNNEL_LAYERS)
    inner_name, inner_pos = layers[number - 1][last + 1]
    segment = tcp(sport, 445)
    if inner_name == "eth":
        inner = inner_ether() + inner_ipv4("198.18.20.1", "198.18.20.2", 6, segment)
        flow = f"198.18.20.1:{sport} > 198.18.20.2:445 tcp"
    elif inner_name == "ip":
        inner = inner_ipv4("198.18.20.1", "198.18.20.2", 6, segment)
        flow = f"198.18.20.1:{sport} > 198.18.20.2:445 tcp"
    else:
        assert inner_name == "ipv6", names
        inner, flow = ipv6(6, segment), f"[2001:db8::1]:{sport} > [2001:db8::2]:445 tcp"
    out = bytearray(ether(lab, 0)[:12] + frame[12:inner_pos] + inner)
    if "gre" in pos:
        assert out[pos["gre"]] & 0x80 == 0, "a GRE checksum would need recomputing"
    if "ip" in pos and pos["ip"] < inner_pos:
        ip = pos["ip"]
        ihl = (out[ip] & 15) * 4
        out[ip + 2:ip + 4] = struct.pack("!H", len(out) - ip)
        out[ip + 10:ip + 12] = bytes(2)
        out[ip + 10:ip + 12] = struct.pack("!H", checksum(bytes(out[ip:ip + ihl])))
    else:
        ip6 = pos["ipv6"]
        out[ip6 + 4:ip6 + 6] = struct.pack("!H", len(out) - ip6 - 40)
    if "udp" in pos and pos["udp"] < inner_pos:
        u = pos["udp"]
        out[u + 4:u + 8] = struct.pack("!HH", len(out) - u, 0)
    return bytes(out), flow


@pytest.mark.usefixtures("tshark_required")
@pytest.mark.parametrize("backend", BACKENDS)
def test_tunnels_as_other_implementations_write_them(livecat, lab, backend, tmp_path):
    """ERSPAN I-III, GRE carrying IP (also after Cisco MetaData), GENEVE (with the options a
    cloud sets) and VXLAN headers as switches and other stacks write them (captures/tunnels: each frame's tunnel headers
    kept byte for byte, its inner frame replaced by a TCP segment to port 445) are matched by
    the frame inside at every source, under the inner flow, counted whole; the captures' own
    frames (ICMP, ARP, SSH, ... inside) are not. `analyze` opens the same frames to the same
    kinds of tunnel, so the kernel program and the engine agree on them."""
    from cli.test_infiniband_inputs import write_pcap
    from smbwire.engine import analyze

    made = [others_tunnel_frame(lab, c, n, 51000 + i) for i, (c, n, _) in enumerate(OTHERS_TUNNELS)]
    matched = [f for f, _ in made]
    unmatched = []
    for capture, number, _ in OTHERS_TUNNELS:
        frame = pcap_frames(ROOT / "captures" / "tunnels" / capture)[max(number, 1) - 1]
        if len(frame) <= 1514:  # the GSO captures' frames are larger than the veth's MTU
            unmatched.append(ether(lab, 0)[:12] + frame[12:])
    assert len(unmatched) >= 6
    check_matched_by_the_frame_inside(livecat, lab, backend, matched, unmatched, [flow for _, flow in made])
    # The same frames offline: each opened to the tunnel the oracle names.
    pcap = tmp_path / "made.pcap"
    write_pcap(pcap, 1, [(i, 0, f) for i, f in enumerate(matched)])
    kinds = Counter(kind for _, _, kind in OTHERS_TUNNELS)
    assert {k: v["frames"] for k, v in analyze([str(pcap)])["tunnels"].items()} == kinds


@pytest.mark.parametrize("backend", BACKENDS)
def test_snaplen_truncates_copies_not_counts(livecat, lab, backend):
    cap = Capture(livecat, lab, backend, "--snaplen", "128")
    before = lab.tcp_insegs()
    lab.tcp_transfer(445, 300_000)
    segs = lab.tcp_insegs() - before
    r = cap.finish()
    check_invariants(r)
    st = r["stats"]
    assert st["packets_matched"] == segs == r["delivered"]
    assert r["truncated"] > 0 and r["captured_bytes"] <= 128 * r["delivered"]
    assert r["delivered_wire_bytes"] == st["bytes_matched"] > 300_000


@pytest.mark.parametrize("hook", HOOKS)
def test_ebpf_counters_stay_exact_when_the_ring_overflows(livecat, lab, hook):
    # A one-page ring and a reader that stalls: most copies are dropped, counters are not.
    cap = Capture(livecat, lab, hook, "--ring-bytes", "4096", "--stall", "3")
    before = lab.tcp_insegs()
    lab.tcp_transfer(445, 1 << 20)
    segs = lab.tcp_insegs() - before
    r = cap.finish()
    check_invariants(r)
    st = r["stats"]
    assert st["ring_drops"] > 0
    assert st["packets_matched"] == segs == st["frames_matched"]
    assert r["delivered"] + st["ring_drops"] == st["packets_matched"]


@pytest.mark.parametrize("hook", [*HOOKS, "xdp-loop"])
def test_ebpf_sheds_the_connection_when_its_ring_is_nearly_full(livecat, lab, hook):
    """The same stalled reader with `--shed` (as `smbwire live` runs it): once a frame finds its
    ring nearly full, the program sheds that frame's connection at it instead of dropping
    frames when the ring overflows: no ring drop, one connection shed, its frame marked and
    delivered, at most its settling frames (8 a direction, the marked one among them) after
    it, every other frame of it counted as shed; the counters stay exact. (`xdp-loop` copies
    through the per-CPU slot, the others straight into the ring.)"""
    cap = Capture(livecat, lab, hook, "--ring-bytes", str(256 << 10), "--stall", "3", "--shed")
    before = lab.tcp_insegs()
    lab.tcp_transfer(445, 4 << 20)
    segs = lab.tcp_insegs() - before
    r = cap.finish()
    check_invariants(r, shed=True)
    st = r["stats"]
    assert st["ring_drops"] == 0 and st["copy_errors"] == 0, st
    assert st["shed_chosen"] == 1 and r["marked"] == 1, (st, r["marked"])
    assert r["after_mark"] <= 2 * 8 - 1, r["after_mark"]
    assert st["shed_frames"] > 0 and r["delivered"] + st["shed_frames"] == st["frames_matched"]
    # The ring held about 240 KiB of the transfer when it was shed, not all 4 MiB.
    assert r["delivered_wire_bytes"] < 256 << 10 < st["bytes_matched"]
    assert st["packets_matched"] == segs == st["frames_matched"]


def rx_dropped(lab):
    return json.loads(sh("ip", "-n", lab.b, "-s", "-j", "link", "show", lab.vb).stdout)[0]["stats64"]["rx"]["dropped"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernel_drops_include_the_interface_drop_counters(livecat, lab, backend):
    """`interface_drops` is B's rx_dropped + rx_missed_errors since the source opened, and is
    part of `kernel_drops`. A deterministic way to move rx_dropped on a veth: frames of an
    EtherType no handler takes (0x88b5, local experimental) are counted dropped by the
    kernel after the TCX or XDP hook; an AF_PACKET socket takes every protocol, so none is then."""
    junk = [ether(lab, 0x88B5) + bytes(46)]
    lab.inject(junk * 5)  # before the capture: not counted
    time.sleep(0.1)
    cap = Capture(livecat, lab, backend)
    before = rx_dropped(lab)
    lab.inject(junk * 23)
    lab.udp("198.18.0.2", 4791, 10)
    time.sleep(0.2)
    r = cap.finish()
    dropped = rx_dropped(lab) - before
    check_invariants(r)
    st = r["stats"]
    assert st["interface_drops"] == dropped == (0 if backend == "af-packet" else 23), (st, dropped)
    assert st["kernel_drops"] == dropped
    assert r["delivered"] == st["packets_matched"] == 10 and st["ring_drops"] == 0


def test_af_packet_reports_kernel_drops(livecat, lab):
    cap = Capture(livecat, lab, "af-packet", "--block-size", "65536", "--blocks", "2", "--stall", "3")
    before = lab.tcp_insegs()
    lab.tcp_transfer(445, 4 << 20)
    segs = lab.tcp_insegs() - before
    r = cap.finish()
    check_invariants(r)
    assert r["stats"]["kernel_drops"] > 0
    assert r["delivered"] < segs


# --- nothing stays in the kernel -------------------------------------------------------------


def bpftool_json(*args):
    return json.loads(sh("bpftool", "-j", *args).stdout or "[]")


def our_progs(hook):
    return {p["id"] for p in bpftool_json("prog", "show") if p.get("name") == PROGRAMS[hook]}


def links_of(prog_ids):
    return {l["id"] for l in bpftool_json("link", "show") if l.get("prog_id") in prog_ids}


def maps_of(prog_ids):
    """The maps the running program uses (bpftool prog show: map_ids)."""
    return {m for p in bpftool_json("prog", "show") if p["id"] in prog_ids for m in p.get("map_ids", [])}


def all_maps():
    return {m["id"] for m in bpftool_json("map", "show")}


def promisc(lab):
    """Promiscuity count: PACKET_MR_PROMISC memberships raise it without showing in the flags."""
    return json.loads(sh("ip", "-n", lab.b, "-d", "-j", "link", "show", lab.vb).stdout)[0]["promiscuity"] > 0


def xdp_attached(lab):
    """Whether B's veth has an XDP program (`ip link` shows it, whatever attached it)."""
    return "xdp" in json.loads(sh("ip", "-n", lab.b, "-d", "-j", "link", "show", lab.vb).stdout)[0]


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("how", ["exit", "SIGTERM", "SIGKILL"])
def test_ebpf_leaves_nothing_behind(livecat, lab, how, hook):
    before = our_progs(hook)
    args = [str(livecat), lab.vb, "--require-ebpf", "--hook", hook, "--seconds", "2" if how == "exit" else "120"]
    p = subprocess.Popen(["ip", "netns", "exec", lab.b, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stderr.readline().strip() == f"ready ebpf {hook}"
        mine = our_progs(hook) - before
        assert len(mine) == 1, f"exactly one {PROGRAMS[hook]} program while running"
        assert xdp_attached(lab) == (hook == "xdp")
        links = links_of(mine)
        assert len(links) == 1, "attached through one bpf_link"
        maps = maps_of(mine)
        # ring, tcp_ports, flows, totals, config, scratch_buf
        assert len(maps) >= 6 and maps <= all_maps(), maps
        assert promisc(lab)
        if how == "exit":
            p.wait(timeout=30)
            assert p.returncode == 0
        else:
            # `ip netns exec` execs livecat, so p.pid is livecat itself.
            os.kill(p.pid, getattr(signal, how))
            p.wait(timeout=30)
            assert p.returncode == -getattr(signal, how)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()
    deadline = time.time() + 5
    while (our_progs(hook) & mine or links_of(mine) or all_maps() & maps) and time.time() < deadline:
        time.sleep(0.1)  # programs and maps are freed after an RCU grace period
    assert not (our_progs(hook) & mine), "program still loaded"
    assert not links_of(mine), "link still present"
    assert not all_maps() & maps, f"maps still present: {sorted(all_maps() & maps)}"
    # Only ours is asserted gone: another smbwire (a benchmark, say) may come and go meanwhile.
    assert not (our_progs(hook) - before), f"a new {PROGRAMS[hook]} program remains"
    assert not xdp_attached(lab), "an XDP program is still attached"
    assert sh("ip", "netns", "exec", lab.b, "tc", "filter", "show", "dev", lab.vb, "ingress").stdout.strip() == ""
    assert not promisc(lab)
    assert not [f for f in os.listdir("/sys/fs/bpf") if "smbwire" in f]


# --- errors are one clear line ---------------------------------------------------------------


def test_missing_interface_is_one_line(livecat):
    r = sh(str(livecat), "smbwire-none0", check=False)
    assert r.returncode == 1
    assert r.stderr == "livecat: no such network interface: smbwire-none0\n"


@pytest.mark.parametrize("flag,capability", [("--require-ebpf", "CAP_BPF"), ("--af-packet", "CAP_NET_RAW"), (None, "CAP_NET_RAW")])
def test_missing_privilege_names_the_capability(livecat, lab, flag, capability):
    unpriv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
    args = ["ip", "netns", "exec", lab.b, *unpriv, str(livecat), lab.vb] + ([flag] if flag else [])
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and capability in lines[0] and "permission denied" in lines[0], r.stderr


def test_falls_back_to_af_packet_and_says_why(livecat, lab):
    # More TCP ports than the kernel program's ports map holds: eBPF refuses, AF_PACKET
    # (which matches in user space) takes over and the reason is reported.
    ports = ",".join(str(p) for p in range(1000, 1070)) + ",445"
    p = subprocess.Popen(["ip", "netns", "exec", lab.b, str(livecat), lab.vb, "--ports", ports, "--seconds", "60", "--stdin-stop"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stderr.readline().strip() == "ready af-packet"
    lab.udp("198.18.0.2", 4791, 10)
    time.sleep(0.2)
    out, _ = p.communicate(timeout=30)
    r = json.loads(out)
    assert r["backend"] == "af-packet"
    assert "at most 64 TCP ports" in r["fallback_reason"]
    assert r["delivered"] == 10
    r = lab.ns(lab.b, str(livecat), lab.vb, "--ports", ports, "--require-ebpf", check=False)
    assert r.returncode == 1 and r.stderr == "livecat: live capture failed: at most 64 TCP ports\n"


# --- the real fallback: no BPF privilege, packet capture privilege kept -----------------------

# Root without CAP_BPF, CAP_SYS_ADMIN (which would also allow BPF) or CAP_PERFMON, still with
# CAP_NET_RAW and CAP_NET_ADMIN. `capsh --drop` removes them from the bounding set, so neither
# `capsh`'s shell nor anything it executes as root can get them back.
NO_BPF = ["capsh", "--drop=cap_bpf,cap_sys_admin,cap_perfmon", "--"]


def without_bpf(lab, *args):
    """argv running `args` in namespace B with the BPF capabilities dropped."""
    return ["ip", "netns", "exec", lab.b, *NO_BPF, "-c", 'exec "$@"', "no-bpf", *args]


def test_caps_dropped_really_lack_bpf(lab):
    status = subprocess.run(without_bpf(lab, "cat", "/proc/self/status"), capture_output=True, text=True, check=True).stdout
    caps = {k: int(v, 16) for k, v in (l.split(":\t") for l in status.splitlines() if l.startswith("Cap"))}
    for bit in (21, 38, 39):  # CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF
        assert not (caps["CapEff"] | caps["CapPrm"] | caps["CapBnd"] | caps["CapInh"] | caps["CapAmb"]) & (1 << bit), caps
    for bit in (12, 13):  # CAP_NET_ADMIN, CAP_NET_RAW
        assert caps["CapEff"] & (1 << bit), caps


def test_without_bpf_privilege_falls_back_to_af_packet_exactly(livecat, lab):
    p = subprocess.Popen(without_bpf(lab, str(livecat), lab.vb, "--seconds", "60", "--stdin-stop"),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()
        assert line.strip() == "ready af-packet", line + p.stderr.read()
        lab.udp("198.18.0.2", 4791, 200)
        lab.udp("198.18.0.2", 4792, 70)
        before = lab.tcp_insegs()
        lab.tcp_transfer(445, 1 << 20)
        segs_445 = lab.tcp_insegs() - before
        time.sleep(0.2)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    r = json.loads(out)
    assert r["backend"] == "af-packet"
    reason = r["fallback_reason"]
    assert "permission denied" in reason and "CAP_BPF" in reason, reason
    check_invariants(r)
    st = r["stats"]
    assert st["flow_count"] == 2
    assert st["packets_matched"] == 200 + segs_445 == r["delivered"]
    assert st["kernel_drops"] == st["interface_drops"] == 0 and st["ring_drops"] == 0


@pytest.mark.parametrize("hook", HOOKS)
def test_without_bpf_privilege_require_ebpf_is_one_line(livecat, lab, hook):
    r = subprocess.run(without_bpf(lab, str(livecat), lab.vb, "--require-ebpf", "--hook", hook, "--seconds", "1"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "permission denied" in lines[0], r.stderr
    # Only what is missing is named: CAP_NET_ADMIN is there.
    assert lines[0].endswith("needs CAP_BPF (run as root or grant it)"), r.stderr


@pytest.mark.parametrize("hook", HOOKS)
def test_without_net_admin_names_only_net_admin(livecat, lab, hook):
    """CAP_BPF without CAP_NET_ADMIN (nor CAP_SYS_ADMIN, which the kernel takes for either): the
    maps load, the program (a networking type) does not; the message names CAP_NET_ADMIN alone."""
    no_net_admin = ["capsh", "--drop=cap_net_admin,cap_sys_admin", "--", "-c", 'exec "$@"', "no-net-admin"]
    r = subprocess.run(["ip", "netns", "exec", lab.b, *no_net_admin, str(livecat), lab.vb, "--require-ebpf",
                        "--hook", hook, "--seconds", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "permission denied" in lines[0], r.stderr
    assert lines[0].endswith("needs CAP_NET_ADMIN (run as root or grant it)"), r.stderr


def test_smbwire_live_without_bpf_privilege_says_why_and_falls_back(lab, tmp_path):
    from realtraffic.analyzer_cli import analyzer_command

    base = [*analyzer_command(), "live", "-i", lab.vb, "--plain", "--duration", "2"]
    r = subprocess.run(without_bpf(lab, *base, "--json", str(tmp_path / "live.json")),
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    fallback = [l for l in r.stderr.splitlines() if "eBPF not used" in l]
    assert len(fallback) == 1, r.stderr
    assert "permission denied" in fallback[0] and "CAP_BPF" in fallback[0] and "AF_PACKET" in fallback[0], fallback
    assert f"capturing on {lab.vb} with af-packet" in r.stderr, r.stderr
    assert (tmp_path / "live.json").exists()
    r = subprocess.run(without_bpf(lab, *base, "--require-ebpf"), capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "missing: CAP_BPF:" in lines[0] and "eBPF" in lines[0], r.stderr


# --- which hook ------------------------------------------------------------------------------


@pytest.mark.parametrize("hook", [*HOOKS, "xdp-loop", STAGED])
def test_the_verifier_takes_the_program_with_room_to_spare(livecat, lab, hook):
    """The kernel verifies at most 1M instructions of a program. The XDP entry point once took
    972,704 of them with one tunnel opened (an exact packet offset per path kept the
    verifier's paths apart): another kernel's verifier, or one more header, would have refused
    it. With two tunnels opened it must take under a quarter of the bound at either hook.
    (SMBWIRE_LIBBPF_DEBUG makes libbpf print the verifier's statistics.)"""
    r = lab.ns(lab.b, "env", "SMBWIRE_LIBBPF_DEBUG=1", *backend_env(hook), str(livecat), lab.vb,
               *backend_args(hook), "--seconds", "0")
    assert ready_line(hook) in r.stderr.splitlines(), r.stderr[-2000:]
    assert json.loads(r.stdout)["xdp_copy"] == XDP_COPY.get(hook)
    assert json.loads(r.stdout)["ring_copy"] == RING_COPY[hook]
    stats = re.findall(r"^processed (\d+) insns \(limit (\d+)\)", r.stderr, re.M)
    assert len(stats) == 1, r.stderr[-2000:]
    processed, limit = map(int, stats[0])
    assert processed < limit // 4, (hook, processed, limit)


def test_auto_takes_tcx_on_this_kernel(livecat, lab):
    """This kernel (6.6+) offers TCX: `auto` takes it (the order itself is unit-tested in
    dissectors/src/live/mod.rs with injected kernel releases)."""
    r = lab.ns(lab.b, str(livecat), lab.vb, "--require-ebpf", "--seconds", "0.5")
    assert r.stderr.splitlines()[0] == "ready ebpf tcx"
    assert json.loads(r.stdout)["hook"] == "tcx"


def test_busy_xdp_hook_falls_back_and_says_why(livecat, lab):
    """Another program holds the interface's XDP hook: `--hook xdp` falls back to AF_PACKET,
    naming the XDP attach, or fails in one line with --require-ebpf; TCX is unaffected."""
    holder = Capture(livecat, lab, "xdp")
    try:
        r = lab.ns(lab.b, str(livecat), lab.vb, "--hook", "xdp", "--seconds", "0.5", "--no-promisc")
        assert r.stderr.splitlines()[0] == "ready af-packet", r.stderr
        why = json.loads(r.stdout)["fallback_reason"]
        assert why.startswith(f"live capture unsupported: XDP attach on {lab.vb}"), why
        r = lab.ns(lab.b, str(livecat), lab.vb, "--hook", "xdp", "--require-ebpf", "--seconds", "0.5", check=False)
        assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and "XDP attach" in r.stderr, r.stderr
        r = lab.ns(lab.b, str(livecat), lab.vb, "--seconds", "0.5", "--require-ebpf")
        assert r.stderr.splitlines()[0] == "ready ebpf tcx", r.stderr
    finally:
        holder.finish()


def corpus_frames():
    """Every Ethernet frame of at most 1514 bytes in the bundled public SMB/RDMA captures and
    the tunnel captures (real traffic of many stacks: Windows, Samba, Zeek's and Wireshark's
    samples, iWARP, RoCEv2, ERSPAN, GENEVE, VXLAN), in file order."""
    from scapy.all import rdpcap
    from scapy.layers.l2 import Ether

    frames = []
    for path in sorted((ROOT / "captures" / "public").glob("*.pcap*")) + sorted((ROOT / "captures" / "tunnels").glob("*.pcap")):
        frames += [bytes(p) for p in rdpcap(str(path)) if isinstance(p, Ether) and 14 <= len(bytes(p)) <= 1514]
    return frames


@pytest.fixture(scope="module")
def corpus():
    frames = corpus_frames()
    assert len(frames) > 10_000
    return frames


@pytest.mark.parametrize("backend", [*(b for b in BACKENDS if b != "af-packet"), STAGED])
def test_kernel_program_and_user_space_classifier_agree_on_real_traffic(livecat, lab, backend, corpus):
    """Differential: every frame of the bundled real captures sent through the eBPF program
    (TCX with either copy into the ring, XDP with either copy) and through AF_PACKET, whose matching is the user-space
    classifier (`live::classify`): the same frames are delivered, byte for byte, counted
    under the same flows with the same packets and bytes, and the same number seen."""
    results = {}
    for b in ("af-packet", backend):
        cap = Capture(livecat, lab, b, "--digests")
        for i in range(0, len(corpus), 2000):  # in steps, so no ring overflows
            lab.inject(corpus[i:i + 2000])
            time.sleep(0.05)
        time.sleep(0.3)
        r = cap.finish()
        assert r["numbers_ok"] and r["ts_ok"] and r["all_delivered_match"], r
        st = r["stats"]
        # Every frame reached the capture point (the interface's drop counter, part of
        # kernel_drops, also counts what B's stack discards after it: EtherTypes it has no
        # handler for, IPv6 with IPv6 off), and none was lost on the way to livecat.
        assert st["packets_seen"] == len(corpus) and st["ring_drops"] == 0, st
        assert st["packets_delivered"] == r["delivered"] == st["frames_matched"]
        results[b] = r
    want, got = results["af-packet"], results[backend]
    assert want["delivered"] > 9_000  # most of the corpus is SMB2, SMB Direct or RoCEv2
    for key in ("packets_matched", "bytes_matched", "frames_matched", "flow_count"):
        assert got["stats"][key] == want["stats"][key], key
    # The largest flows (livecat lists 32 of them), with their exact counters.
    flows = {b: {f["flow"]: (f["packets"], f["bytes"]) for f in r["stats"]["flows"]} for b, r in results.items()}
    both = flows[backend].keys() & flows["af-packet"].keys()
    assert len(both) >= 30 and all(flows[backend][f] == flows["af-packet"][f] for f in both)
    assert sorted(got["digests"]) == sorted(want["digests"])
