"""Two network namespaces joined by a veth, for the live benchmarks (bench/live_rates.py,
bench/live_e2e.py): namespace A sends, B captures. Names carry the caller's prefix and PID;
only 198.18.0.0/15 traffic is sent over it, and no address is configured on it."""

from __future__ import annotations

import json
import os
import subprocess


def sh(*args, check=True, timeout=60, **kw):
    return subprocess.run(args, check=check, capture_output=True, text=True, timeout=timeout, **kw)


class VethPair:
    def __init__(self, prefix: str):
        pid = os.getpid() % 100000
        self.ns_a, self.ns_b = f"{prefix}{pid}a", f"{prefix}{pid}b"
        self.va, self.vb = self.ns_a + "v", self.ns_b + "v"

    def setup(self, mtu: int | None = None) -> None:
        """Both namespaces (IPv6 off, so no router solicitations), the veth up (at `mtu`)."""
        for ns in (self.ns_a, self.ns_b):
            sh("ip", "netns", "add", ns)
            sh("ip", "netns", "exec", ns, "sysctl", "-qw",
               "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        sh("ip", "link", "add", self.va, "netns", self.ns_a, "type", "veth", "peer", "name", self.vb,
           "netns", self.ns_b)
        for ns, dev in ((self.ns_a, self.va), (self.ns_b, self.vb)):
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1", check=False)
            if mtu is not None:
                sh("ip", "-n", ns, "link", "set", dev, "mtu", str(mtu))
            sh("ip", "-n", ns, "link", "set", dev, "up")

    def teardown(self) -> None:
        sh("ip", "netns", "del", self.ns_a, check=False)
        sh("ip", "netns", "del", self.ns_b, check=False)

    def counters(self) -> dict:
        """B's received and dropped frames, A's dropped on send."""
        b = json.loads(sh("ip", "-n", self.ns_b, "-j", "-s", "link", "show", self.vb).stdout)[0]["stats64"]
        a = json.loads(sh("ip", "-n", self.ns_a, "-j", "-s", "link", "show", self.va).stdout)[0]["stats64"]
        return {"rx": b["rx"]["packets"], "rx_dropped": b["rx"]["dropped"], "tx_dropped": a["tx"]["dropped"]}
