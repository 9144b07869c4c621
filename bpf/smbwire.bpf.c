// SPDX-License-Identifier: MIT
/* smbwire_tc (TCX ingress, Linux 6.6+) and smbwire_xdp (XDP, Linux 5.9+ for its
 * bpf_link): two entry points of one program. It only filters, counts and copies:
 * storage traffic (SMB over TCP 445/5445 or configured ports, RoCEv2 UDP 4791,
 * RoCEv1 EtherType 0x8915) is counted per flow and copied into one of the ring buffers
 * (by connection; connections user space has shed are counted and not copied);
 * everything else is counted in the totals and passed on. All interpretation
 * happens in user space. The filter, the counters and the record are shared; the
 * entry points differ only in how bytes are read (bpf_skb_load_bytes at TC, direct
 * packet access at XDP, which works on every kernel with XDP links) and in what the
 * kernel tells them (a stripped VLAN tag and GRO/GSO segments at TC only).
 * User space loads exactly one of them. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "smbwire.h"

/* enum tcx_action_base (linux 6.6): let later programs and the stack see the packet. */
#define TCX_NEXT (-1)

/* XDP copies are taken from the linear frame with direct packet access, in 8-byte words:
 * a frame of a program without XDP fragments support fits one page. */
#define SMBWIRE_XDP_MAX_COPY 4096

#define ETH_HLEN_ 14
#define ETH_P_8021Q_ 0x8100
#define ETH_P_8021AD_ 0x88A8
#define IPPROTO_TCP_ 6
#define IPPROTO_UDP_ 17
#define IPPROTO_GRE_ 47
/* Remote mirror sessions (wire/gre.rs, wire/erspan.rs, wire/vxlan.rs, wire/geneve.rs in user space). */
#define GRE_P_TEB 0x6558
#define GRE_P_ERSPAN_II 0x88BE
#define GRE_P_ERSPAN_III 0x22EB
#define VXLAN_PORT 4789
#define VXLAN_PORT_LINUX_LEGACY 8472
#define GENEVE_PORT 6081
/* classify_at's answer when the frame is a tunnel: look again at the frame inside. */
#define CLASSIFY_TUNNEL 2
#define BTH_NEXT_HEADER 0x1b
/* IPv6 extension headers that may stand between the fixed header and TCP/UDP (RFC 8200 4.1). */
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_DEST 60

struct scratch {
	struct smbwire_event_hdr hdr;
	__u8 data[SMBWIRE_MAX_SNAP];
};

/* The capture queues: ring0 .. ring15, each resized by user space before load (the ones not
 * in use to one page). Separate maps rather than an array of maps: every kernel with ring
 * buffers takes them, and each call site names its map as the verifier wants. */
#define RING(n)                                                                          \
	struct {                                                                         \
		__uint(type, BPF_MAP_TYPE_RINGBUF);                                      \
		__uint(max_entries, 4096);                                               \
	} ring##n SEC(".maps");
RING(0) RING(1) RING(2) RING(3) RING(4) RING(5) RING(6) RING(7)
RING(8) RING(9) RING(10) RING(11) RING(12) RING(13) RING(14) RING(15)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SMBWIRE_MAX_SHED);
	__type(key, struct smbwire_flow_key);
	__type(value, struct smbwire_shed_counters);
} shed SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SMBWIRE_MAX_PORTS);
	__type(key, __u16);
	__type(value, __u8);
} tcp_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SMBWIRE_MAX_FLOWS);
	__type(key, struct smbwire_flow_key);
	__type(value, struct smbwire_flow_counters);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct smbwire_totals);
} totals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct smbwire_config);
} config SEC(".maps");

/* With SMBWIRE_COPY_STAGED the ring buffer record is assembled here first, then copied by
 * bpf_ringbuf_output, which takes a variable size (the default copies straight into a
 * reservation of a size class instead: `reserve_record`); XDP also passes its load offsets
 * through a word of it (`load`). One slot per CPU, indexed by CPU id (a per-CPU array value
 * is limited to 32 KiB); user space sets max_entries to the number of possible CPUs when the
 * program uses it. TC programs do not migrate mid-run. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch_buf SEC(".maps");

/* The frame being looked at, whichever hook runs: at TC the skb (read with
 * bpf_skb_load_bytes, which also reaches paged data), at XDP the linear buffer.
 * `xdp` is a constant in each inlined copy, so each entry point keeps one path. */
struct pkt {
	void *ctx;
	void *data;
	void *data_end;
	int xdp;
	/* XDP: this CPU's record slot, looked up once per frame; `load` passes each offset
	 * through a word of it (not in use while the frame is classified). TC: NULL. */
	struct scratch *s;
};

static __always_inline int load(const struct pkt *p, __u32 off, void *dst, __u32 len)
{
	if (!p->xdp)
		return bpf_skb_load_bytes(p->ctx, off, dst, len);
	/* The offset goes through memory, so the verifier sees one unknown offset here rather
	 * than the constant each path through the headers computed: a packet pointer's offset
	 * must be exact, and one exact constant per path kept every path apart (the program
	 * took 97% of the verifier's 1M-instruction budget one tunnel deep, more than it at
	 * two). bpf_skb_load_bytes at TC takes any offset, so TC never had this. */
	p->s->hdr.caplen = off;
	asm volatile("" ::: "memory");
	off = p->s->hdr.caplen;
	/* A bound the verifier can see before the offset is added to a packet pointer. */
	if (off > 0x3fff)
		return -1;
	void *src = p->data + off;
	if (src + len > p->data_end)
		return -1;
	__builtin_memcpy(dst, src, len);
	return 0;
}

/* Set by user space before load (`.rodata`, frozen), the object's one read-only global
 * (struct smbwire_rodata): `wake_at` (the reader's wake-up mark, SMBWIRE_WAKEUP_BYTES), and
 * `copy_flags` (bits in smbwire.h):
 * - SMBWIRE_COPY_XDP_HELPER: the kernel has bpf_xdp_load_bytes (Linux 5.18+; Debian 12's
 *   6.1 has it), as libbpf's helper probe says;
 * - SMBWIRE_COPY_STAGED: copy a frame into this CPU's `scratch_buf` slot and from there into
 *   its ring (`bpf_ringbuf_output`) rather than straight into a ring reservation
 *   (`copy_direct`); the loader sets it for XDP's word loop and when the user asks for it.
 * The verifier knows the value and walks only the branches it selects, so a kernel without
 * the helper never checks its call, and one with it never walks the word loop. */
const volatile struct smbwire_rodata rodata = {};

/* Copies the first `caplen` bytes of the frame to `dst` (caplen <= SMBWIRE_MAX_SNAP). */
static __always_inline int copy_frame(const struct pkt *p, __u8 *dst, __u64 caplen)
{
	/* barrier_var: the verifier must see the bound on the register the helper gets. */
	barrier_var(caplen);
	if (caplen < 1 || caplen > SMBWIRE_MAX_SNAP)
		return -1;
	if (!p->xdp)
		return bpf_skb_load_bytes(p->ctx, 0, dst, caplen);
	if (caplen > SMBWIRE_XDP_MAX_COPY)
		return -1;
	if (rodata.copy_flags & SMBWIRE_COPY_XDP_HELPER)
		return bpf_xdp_load_bytes(p->ctx, 0, dst, caplen) ? -1 : 0;
	/* Before 5.18: words, then the last bytes. */
	__u32 i;
	for (i = 0; i < SMBWIRE_XDP_MAX_COPY / 8; i++) {
		__u32 o = i * 8;
		if (o + 8 > caplen)
			break;
		if (p->data + o + 8 > p->data_end)
			return -1;
		*(__u64 *)(dst + o) = *(__u64 *)(p->data + o);
	}
	for (__u32 j = 0; j < 7; j++) {
		__u32 o = i * 8 + j;
		if (o >= caplen || o >= SMBWIRE_XDP_MAX_COPY)
			break;
		if (p->data + o + 1 > p->data_end)
			return -1;
		dst[o] = *(__u8 *)(p->data + o);
	}
	return 0;
}

static __always_inline int port_configured(__u16 port)
{
	return bpf_map_lookup_elem(&tcp_ports, &port) != 0;
}

/* The EtherType of an IP packet that starts at `off` (by its version), 0 if neither. */
static __always_inline __u16 ip_ethertype(const struct pkt *p, __u32 off)
{
	__u8 v;
	if (load(p, off, &v, 1))
		return 0;
	return (v >> 4) == 4 ? ETH_P_IP : (v >> 4) == 6 ? ETH_P_IPV6 : 0;
}

/* A remote mirror session's tunnel in the IP payload at `off` (protocol `l4`): GRE
 * carrying Ethernet (gretap, ERSPAN I-III) or IP, either possibly after Cisco MetaData,
 * VXLAN (UDP to 4789, or Linux's 8472), or GENEVE version 0 (UDP to 6081) carrying
 * Ethernet or IP after its options. Sets the inner
 * frame's offset and, when it starts at IP rather than Ethernet, its EtherType; returns 1. */
static __always_inline int tunnel_at(const struct pkt *p, __u8 l4, __u32 off, __u32 *inner,
				     __u16 *inner_type)
{
	*inner_type = 0;
	if (l4 == IPPROTO_UDP_) {
		__u16 dport;
		__u8 h[4];
		if (load(p, off + 2, &dport, 2))
			return 0;
		dport = bpf_ntohs(dport);
		if (dport == GENEVE_PORT) {
			if (load(p, off + 8, h, 4) || (h[0] >> 6) != 0)
				return 0;
			__u32 in = off + 16 + (__u32)(h[0] & 0x3f) * 4;
			__u16 proto = ((__u16)h[2] << 8) | h[3];
			*inner = in;
			if (proto == GRE_P_TEB)
				return 1;
			if (proto != ETH_P_IP && proto != ETH_P_IPV6)
				return 0;
			*inner_type = ip_ethertype(p, in);
			return *inner_type != 0;
		}
		if ((dport != VXLAN_PORT && dport != VXLAN_PORT_LINUX_LEGACY) ||
		    load(p, off + 8, h, 1) || !(h[0] & 0x08))
			return 0;
		*inner = off + 16;
		return 1;
	}
	if (l4 != IPPROTO_GRE_)
		return 0;
	__u8 g[4];
	if (load(p, off, g, 4))
		return 0;
	/* Version 0 only (PPTP's is 1), no RFC 1701 routing. */
	if ((g[1] & 7) || (g[0] & 0x40))
		return 0;
	__u32 in = off + 4 + ((g[0] & 0x80) ? 4 : 0) + ((g[0] & 0x20) ? 4 : 0) + ((g[0] & 0x10) ? 4 : 0);
	__u16 proto = ((__u16)g[2] << 8) | g[3];
	if (proto == GRE_P_TEB || (proto == GRE_P_ERSPAN_II && !(g[0] & 0x10))) {
		*inner = in; /* Ethernet; ERSPAN type I has no header of its own */
		return 1;
	}
	if (proto == ETH_P_IP || proto == ETH_P_IPV6) {
		*inner = in;
		*inner_type = ip_ethertype(p, in);
		return *inner_type != 0;
	}
	__u8 e[12];
	if (proto == SMBWIRE_ETH_P_CMD) {
		/* Cisco MetaData in GRE: the EtherType first, then version 1, length 1, option, SGT. */
		if (load(p, in, e, SMBWIRE_CMD_LEN) || e[2] != 1 || e[3] != 1)
			return 0;
		proto = ((__u16)e[0] << 8) | e[1];
		*inner = in + SMBWIRE_CMD_LEN;
		if (proto == GRE_P_TEB)
			return 1;
		if (proto != ETH_P_IP && proto != ETH_P_IPV6)
			return 0;
		*inner_type = ip_ethertype(p, *inner);
		return *inner_type != 0;
	}
	if (proto == GRE_P_ERSPAN_II) {
		if (load(p, in, e, 1) || (e[0] >> 4) != 1)
			return 0;
		*inner = in + 8;
		return 1;
	}
	if (proto != GRE_P_ERSPAN_III || load(p, in, e, 12) || (e[0] >> 4) != 2)
		return 0;
	__u8 ft = (e[10] >> 2) & 0x1f;
	*inner = in + 12 + ((e[11] & 1) ? 8 : 0);
	if (ft == 0)
		return 1;
	if (ft != 2)
		return 0;
	*inner_type = ip_ethertype(p, *inner);
	return *inner_type != 0;
}

/* Fills `key` and returns 1 when the frame at `base` is storage traffic, CLASSIFY_TUNNEL
 * (with `*inner`, `*inner_type`) when it is a tunnel whose inner frame is to be looked at
 * instead; sets `*hdr_len` to the header length from the frame's start to the end of
 * TCP or UDP when they were reached (0 otherwise), for counting the headers of every
 * segment of a GRO/GSO frame. `type` is the EtherType of a frame that starts at its IP
 * header (a tunnel's inner packet), 0 for one that starts with Ethernet. After the
 * Ethernet header an outer VLAN tag the kernel already removed is not in the data, a
 * second (QinQ) tag still is. */
/* Where classify_at looks (`base`, `type`) and, for a tunnel, where it found the frame inside. */
struct look {
	__u32 base;
	__u16 type;
	__u32 inner;
	__u16 inner_type;
};

static __noinline int classify_at(const struct pkt *p, struct look *at,
				  struct smbwire_flow_key *key, __u32 *hdr_len)
{
	__u32 base = at->base;
	__u16 type = at->type;
	__u32 *inner = &at->inner;
	__u16 *inner_type = &at->inner_type;
	__u32 off = base + ETH_HLEN_;
	__u16 h_proto = bpf_htons(type);
	__u8 l4 = 0;

	if (type) {
		off = base;
	} else {
		if (load(p, base + 12, &h_proto, 2))
			return 0;
#pragma unroll
		for (int i = 0; i < SMBWIRE_MAX_L2_TAGS; i++) {
			if (h_proto == bpf_htons(ETH_P_8021Q_) || h_proto == bpf_htons(ETH_P_8021AD_)) {
				if (load(p, off + 2, &h_proto, 2))
					return 0;
				off += 4;
			} else if (h_proto == bpf_htons(SMBWIRE_ETH_P_CMD)) {
				/* Version 1, length 1, option, SGT, then the EtherType. */
				__u8 c[SMBWIRE_CMD_LEN];
				if (load(p, off, c, SMBWIRE_CMD_LEN) || c[0] != 1 || c[1] != 1)
					return 0;
				h_proto = bpf_htons(((__u16)c[6] << 8) | c[7]);
				off += SMBWIRE_CMD_LEN;
			}
		}
	}

	if (h_proto == bpf_htons(SMBWIRE_ETH_P_ROCEV1)) {
		/* GRH: 40 bytes, IPv6 layout; SGID at 8, DGID at 24. */
		if (load(p, off + 8, key->saddr, 16) ||
		    load(p, off + 24, key->daddr, 16))
			return 0;
		key->family = SMBWIRE_FAMILY_ROCEV1;
		key->proto = BTH_NEXT_HEADER;
		return 1;
	}

	if (h_proto == bpf_htons(ETH_P_IP)) {
		__u8 vihl;
		__u16 frag;
		if (load(p, off, &vihl, 1) || (vihl >> 4) != 4 || (vihl & 0xf) < 5)
			return 0;
		if (load(p, off + 6, &frag, 2))
			return 0;
		/* A non-first fragment has no TCP/UDP header to match on. */
		if (bpf_ntohs(frag) & 0x1fff)
			return 0;
		if (load(p, off + 9, &l4, 1) ||
		    load(p, off + 12, key->saddr, 4) ||
		    load(p, off + 16, key->daddr, 4))
			return 0;
		key->family = SMBWIRE_FAMILY_IPV4;
		off += (vihl & 0xf) * 4;
	} else if (h_proto == bpf_htons(ETH_P_IPV6)) {
		__u8 vtc;
		if (load(p, off, &vtc, 1) || (vtc >> 4) != 6)
			return 0;
		if (load(p, off + 6, &l4, 1) ||
		    load(p, off + 8, key->saddr, 16) ||
		    load(p, off + 24, key->daddr, 16))
			return 0;
		key->family = SMBWIRE_FAMILY_IPV6;
		off += 40;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			__u8 ext[2];
			if (l4 != NEXTHDR_HOP && l4 != NEXTHDR_ROUTING && l4 != NEXTHDR_DEST &&
			    l4 != NEXTHDR_FRAGMENT)
				break;
			if (load(p, off, ext, 2))
				return 0;
			if (l4 == NEXTHDR_FRAGMENT) {
				__u16 frag_off;
				if (load(p, off + 2, &frag_off, 2))
					return 0;
				if (bpf_ntohs(frag_off) & 0xfff8)
					return 0;
				off += 8;
			} else {
				off += ((__u32)ext[1] + 1) * 8;
			}
			l4 = ext[0];
		}
	} else {
		return 0;
	}

	if (tunnel_at(p, l4, off, inner, inner_type))
		return CLASSIFY_TUNNEL;
	if (l4 != IPPROTO_TCP_ && l4 != IPPROTO_UDP_)
		return 0;
	__u16 ports[2];
	if (load(p, off, ports, 4))
		return 0;
	key->sport = bpf_ntohs(ports[0]);
	key->dport = bpf_ntohs(ports[1]);
	key->proto = l4;
	if (l4 == IPPROTO_TCP_) {
		__u8 doff;
		if (load(p, off + 12, &doff, 1) || (doff >> 4) < 5)
			return 0;
		*hdr_len = off + (doff >> 4) * 4;
		return port_configured(key->sport) || port_configured(key->dport);
	}
	*hdr_len = off + 8;
	return key->dport == SMBWIRE_ROCEV2_UDP_PORT;
}

/* classify_at on the frame, and on the frame inside when it is a remote mirror session's
 * tunnel, SMBWIRE_MAX_TUNNELS deep as `analyze` opens them (ERSPAN carried across a VXLAN
 * fabric; a third tunnel is not storage traffic here). classify_at is a function of its own, not inlined:
 * inlined twice, the XDP entry point's direct packet reads took the verifier past its
 * complexity bound (E2BIG). */
static __always_inline int classify(const struct pkt *p, struct smbwire_flow_key *key,
				    __u32 *hdr_len)
{
	struct look at = {};
	int r = classify_at(p, &at, key, hdr_len);
#pragma unroll
	for (int depth = 0; depth < SMBWIRE_MAX_TUNNELS; depth++) {
		if (r != CLASSIFY_TUNNEL)
			return r == 1;
		__builtin_memset(key, 0, sizeof(*key));
		*hdr_len = 0;
		at.base = at.inner;
		at.type = at.inner_type;
		r = classify_at(p, &at, key, hdr_len);
	}
	return r == 1;
}

/* RDMA flows are shed and spread as one unit per address pair: every queue pair between two
 * ports (RoCEv2's UDP source port differs per queue pair, RoCEv1 has none). */
static __always_inline int by_addresses(const struct smbwire_flow_key *k)
{
	return k->family == SMBWIRE_FAMILY_ROCEV1 || k->proto == IPPROTO_UDP_;
}

/* The connection of a flow direction, the same for both directions: the two (address, port)
 * ends in order, lower first (addresses compared byte by byte in network order, then the
 * port); no ports for RDMA. FlowKey::connection in dissectors/src/live/flows.rs is the same. */
static __always_inline __u32 connection_of(const struct smbwire_flow_key *k, struct smbwire_flow_key *c)
{
	__u16 sport = k->sport, dport = k->dport;
	if (by_addresses(k))
		sport = dport = 0;
	/* Byte-wise order of 16 bytes = order of two big-endian words (few branches: the
	 * verifier walks each path). */
	__u64 s0, s1, d0, d1;
	__builtin_memcpy(&s0, k->saddr, 8);
	__builtin_memcpy(&s1, k->saddr + 8, 8);
	__builtin_memcpy(&d0, k->daddr, 8);
	__builtin_memcpy(&d1, k->daddr + 8, 8);
	s0 = __builtin_bswap64(s0);
	s1 = __builtin_bswap64(s1);
	d0 = __builtin_bswap64(d0);
	d1 = __builtin_bswap64(d1);
	int swap = d0 != s0 ? d0 < s0 : d1 != s1 ? d1 < s1 : dport < sport;
	__builtin_memset(c, 0, sizeof(*c));
	if (swap) {
		__builtin_memcpy(c->saddr, k->daddr, 16);
		__builtin_memcpy(c->daddr, k->saddr, 16);
		c->sport = dport;
		c->dport = sport;
	} else {
		__builtin_memcpy(c->saddr, k->saddr, 16);
		__builtin_memcpy(c->daddr, k->daddr, 16);
		c->sport = sport;
		c->dport = dport;
	}
	c->proto = k->proto;
	c->family = k->family;
	/* The direction: 1 when `k` is from the connection's second end. */
	return swap;
}

/* Which ring a frame goes to: a hash of its connection that both directions share (each
 * step combines the two ends by sum and product, which do not depend on their order), so a
 * connection's frames keep their order within one ring. */
static __always_inline __u32 connection_hash(const struct smbwire_flow_key *k)
{
	__u32 s[4], d[4];
	__builtin_memcpy(s, k->saddr, 16);
	__builtin_memcpy(d, k->daddr, 16);
	__u32 h = 0;
#pragma unroll
	for (int i = 0; i < 4; i++)
		h = h * 31 + ((s[i] + d[i]) ^ (s[i] * d[i]));
	if (!by_addresses(k))
		h = h * 31 + (((__u32)k->sport + k->dport) ^ ((__u32)k->sport * k->dport));
	h ^= h >> 16;
	h *= 0x45d9f3b;
	h ^= h >> 16;
	return h;
}

/* Wake the reader only on the record that crosses the mark: a reader that is awake drains
 * the ring until it is empty before it sleeps again, so one wakeup per crossing is enough,
 * and records queued while it is busy cost no wakeup at all. `before` is what the ring held
 * when the frame asked (`ring_queued`, once per frame: the same answer decides shedding;
 * only a shed connection's settling frame asks again, for the room left, `no_room`);
 * records other CPUs queue meanwhile may make two records cross or none, as they could
 * between any question and reservation: the reader also wakes on its poll's timeout. */
static __always_inline __u64 wake_flag(__u64 before, __u64 len)
{
	__u64 wake_at = rodata.wake_at;
	return before < wake_at && before + len >= wake_at ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

/* `return OP(map)` with ring `q`'s map: the one place a ring number becomes its map (each
 * helper call names its map, as the verifier wants; `ring15` for any number past it). */
#define PER_RING(q, OP)                                                                  \
	switch (q) {                                                                     \
	case 0: return OP(ring0);                                                        \
	case 1: return OP(ring1);                                                        \
	case 2: return OP(ring2);                                                        \
	case 3: return OP(ring3);                                                        \
	case 4: return OP(ring4);                                                        \
	case 5: return OP(ring5);                                                        \
	case 6: return OP(ring6);                                                        \
	case 7: return OP(ring7);                                                        \
	case 8: return OP(ring8);                                                        \
	case 9: return OP(ring9);                                                        \
	case 10: return OP(ring10);                                                      \
	case 11: return OP(ring11);                                                      \
	case 12: return OP(ring12);                                                      \
	case 13: return OP(ring13);                                                      \
	case 14: return OP(ring14);                                                      \
	default: return OP(ring15);                                                      \
	}

static __always_inline long ring_output(__u32 q, void *data, __u64 len, __u64 fl)
{
#define RING_OUT(map) bpf_ringbuf_output(&map, data, len, fl)
	PER_RING(q, RING_OUT)
#undef RING_OUT
}

/* A record of `size` bytes in ring `q`; NULL when the ring is full. `size` must be a
 * constant at each inlined call: bpf_ringbuf_reserve wants one. */
static __always_inline void *ring_reserve(__u32 q, __u64 size)
{
#define RING_RESERVE(map) bpf_ringbuf_reserve(&map, size, 0)
	PER_RING(q, RING_RESERVE)
#undef RING_RESERVE
}

/* Bytes queued in ring `q`, and (in `*room`, when asked) bytes it has left. */
static __always_inline __u64 ring_queued(__u32 q, __u64 *room)
{
#define RING_QUEUED(map)                                                                 \
	({                                                                               \
		__u64 queued = bpf_ringbuf_query(&map, BPF_RB_AVAIL_DATA);               \
		if (room)                                                                \
			*room = bpf_ringbuf_query(&map, BPF_RB_RING_SIZE) - queued;      \
		queued;                                                                  \
	})
	PER_RING(q, RING_QUEUED)
#undef RING_QUEUED
}

/* A shed connection's frame in direction `dir`: whether it is still copied (one of the
 * direction's SMBWIRE_SHED_SETTLE frames after the program shed it), taking it. Two CPUs
 * may both take the last one: the count then wraps past SMBWIRE_SHED_SETTLE and stops. */
static __always_inline int settle_take(struct smbwire_shed_counters *sc, __u32 dir)
{
	/* Each direction named, not indexed: the compiler may form an indexed address with a
	 * bitwise or, which the verifier refuses on a pointer. */
	__u32 *left = dir ? &sc->settle[1] : &sc->settle[0];
	__u32 v = *(volatile __u32 *)left;
	if (v == 0 || v > SMBWIRE_SHED_SETTLE)
		return 0;
	__sync_fetch_and_add(left, -1);
	return 1;
}

/* A frame of a shed connection not copied: counted there and in the totals. */
static __always_inline void count_shed(struct smbwire_totals *t, struct smbwire_shed_counters *sc, __u64 wire_bytes)
{
	__sync_fetch_and_add(&sc->frames, 1);
	__sync_fetch_and_add(&sc->bytes, wire_bytes);
	t->shed_frames++;
	t->shed_bytes += wire_bytes;
}

/* Copies the frame into a record of ring `q` with room for `room` bytes after its header
 * (`hdr`, whose caplen is at most `room`) and commits it: 0, or EMIT_RING_FULL, or
 * EMIT_COPY_ERROR (the record is discarded). `room` is a constant at each inlined call;
 * `queued` is what the ring held when the frame asked (`wake_flag`). */
#define EMIT_RING_FULL 1
#define EMIT_COPY_ERROR 2
static __always_inline int emit(const struct pkt *p, const struct smbwire_event_hdr *hdr, __u32 q,
				__u64 room, __u64 queued)
{
	struct smbwire_event_hdr *h = ring_reserve(q, sizeof(*h) + room);
	if (!h)
		return EMIT_RING_FULL;
	__builtin_memcpy(h, hdr, sizeof(*h));
	/* The bound on the very register the copy gets, for the verifier: the comparison that
	 * chose this size was on another. */
	__u64 len = hdr->caplen;
	barrier_var(len);
	if (len > room || copy_frame(p, (__u8 *)(h + 1), len)) {
		bpf_ringbuf_discard(h, BPF_RB_NO_WAKEUP);
		return EMIT_COPY_ERROR;
	}
	bpf_ringbuf_submit(h, wake_flag(queued, sizeof(*h) + room));
	return 0;
}

/* Copies the frame straight into ring `q`, in a record of the smallest of these sizes its
 * copy fits (a reservation's size is a constant). The classes are close where frames are
 * common (up to the 1500 B MTU's 1514-1522, the 9000 B MTU's 9014-9022) and about 1.5x apart
 * elsewhere, so a record holds at most half again its frame (and never more than 64 bytes
 * beyond a frame of 64 or less); user space reads `caplen` bytes of it. */
/* The ring bytes a frame's record takes at most, whichever copy (the staged one takes just
 * the header and the frame): the ring's own 8-byte header, ours, and the size class, at most
 * half again the frame from 43 bytes on (a storage frame has at least 54). */
#define RECORD_BOUND(caplen) (8 + sizeof(struct smbwire_event_hdr) + (__u64)(caplen) + (caplen) / 2)
#define COPY_CLASS(n)                                                                    \
	if (caplen <= (n))                                                               \
		return emit(p, hdr, q, n, queued);
static __always_inline int copy_direct(const struct pkt *p, const struct smbwire_event_hdr *hdr, __u32 q,
				       __u64 queued)
{
	__u32 caplen = hdr->caplen;
	COPY_CLASS(64) COPY_CLASS(96) COPY_CLASS(128) COPY_CLASS(192) COPY_CLASS(256)
	COPY_CLASS(384) COPY_CLASS(512) COPY_CLASS(768) COPY_CLASS(1024) COPY_CLASS(1280)
	COPY_CLASS(1536) COPY_CLASS(2048) COPY_CLASS(3072) COPY_CLASS(4096) COPY_CLASS(6144)
	COPY_CLASS(9216) COPY_CLASS(13824) COPY_CLASS(20736) COPY_CLASS(31104)
	COPY_CLASS(46656) COPY_CLASS(SMBWIRE_MAX_SNAP)
	return EMIT_COPY_ERROR;
}

/* A record of a frame of `caplen` bytes may not fit what ring `q` has left (`RECORD_BOUND`). */
static __always_inline int no_room(__u32 q, __u32 caplen)
{
	__u64 room = 0;
	ring_queued(q, &room);
	return room < RECORD_BOUND(caplen);
}

/* A shed connection's frame in direction `dir` (its entry `sc`): whether it is copied, one
 * of its settling frames with room in its ring. A settling frame that would not fit is
 * counted as shed and ends the connection's settling in both directions, so that what was
 * copied of each stays a prefix (it is told before the copy, not after a failed one: the
 * verifier walks what follows the copy once per state the copy leaves). */
static __always_inline int settles(struct smbwire_totals *t, struct smbwire_shed_counters *sc, __u32 dir,
				   __u32 q, __u32 caplen, __u64 wire_bytes)
{
	if (settle_take(sc, dir)) {
		if (!no_room(q, caplen))
			return 1;
		sc->settle[0] = 0;
		sc->settle[1] = 0;
	}
	count_shed(t, sc, wire_bytes);
	return 0;
}

/* A copy of `v` the verifier does not link to it (a move would): a switch or comparison on
 * the copy narrows the copy's bounds only, so the paths it parts still meet where `v` is
 * used again. Asking ring `q` what it holds switches on `q`; had that narrowed `q` itself,
 * each ring's path would stay apart through the copy that follows (four to five times the
 * verifier's states with TCX, and XDP's loop copy past its limit); shedding's comparison of
 * what the ring holds against its mark splits `queued` the same way. */
static __always_inline __u64 unlinked(__u64 v)
{
	asm volatile("%0 ^= 0" : "+r"(v));
	return v;
}

/* Shedding, before a frame of `key` (`caplen` bytes to copy) goes into ring `q`, which held
 * `queued` bytes when the frame asked: -1 when its
 * connection is shed (counted, not copied); else the flags its record gets
 * (SMBWIRE_EV_SHED_HERE when the program sheds the connection at this frame). A shed
 * connection's frames are counted and not copied but for its settling frames (`settles`).
 * When the ring is nearly full (`shed_at`: user space has not kept up, nor shed in time, its
 * thread starved of CPU, say), the program sheds the frame's connection here, at this frame,
 * which is copied marked so that user space cuts it where the program did; when even that
 * frame would not fit, it is counted as shed and nothing more of the connection is copied. */
static __always_inline int shed_check(struct smbwire_totals *t, struct smbwire_config *cfg,
				      const struct smbwire_flow_key *key, __u32 q, __u64 queued, __u32 caplen,
				      __u64 wire_bytes)
{
	struct smbwire_flow_key conn;
	__u32 dir = 0;
	int have_conn = 0;
	struct smbwire_shed_counters *sc;
	if (cfg->flags & SMBWIRE_CFG_SHEDDING) {
		dir = connection_of(key, &conn);
		have_conn = 1;
		sc = bpf_map_lookup_elem(&shed, &conn);
		if (sc)
			return settles(t, sc, dir, q, caplen, wire_bytes) ? 0 : -1;
	}
	__u32 shed_at = cfg->shed_at;
	if (!shed_at || queued < shed_at)
		return 0;
	if (!have_conn)
		dir = connection_of(key, &conn);
	struct smbwire_shed_counters init = {};
	if (!by_addresses(key)) {
		/* This frame is the first of its direction's. */
		init.settle[0] = dir ? SMBWIRE_SHED_SETTLE : SMBWIRE_SHED_SETTLE - 1;
		init.settle[1] = dir ? SMBWIRE_SHED_SETTLE - 1 : SMBWIRE_SHED_SETTLE;
	}
	if (bpf_map_update_elem(&shed, &conn, &init, BPF_NOEXIST) == 0) {
		cfg->flags |= SMBWIRE_CFG_SHEDDING;
		t->shed_chosen++;
		sc = bpf_map_lookup_elem(&shed, &conn);
		if (sc && no_room(q, caplen)) {
			sc->settle[0] = 0;
			sc->settle[1] = 0;
			count_shed(t, sc, wire_bytes);
			return -1;
		}
		return SMBWIRE_EV_SHED_HERE;
	}
	/* Shed meanwhile (another CPU, or user space), or the map is full. */
	sc = bpf_map_lookup_elem(&shed, &conn);
	if (!sc)
		return 0;
	return settles(t, sc, dir, q, caplen, wire_bytes) ? 0 : -1;
}

/* What the hook knows about the frame beyond its bytes. */
struct frame_meta {
	__u32 len;        /* bytes of the frame as the hook holds it (without a stripped tag) */
	__u32 segs;       /* GRO/GSO segments (1 at XDP: it runs before GRO) */
	__u32 ifindex;
	__u32 vlan;       /* the outer tag was stripped into metadata (TC only) */
	__u16 vlan_proto; /* host order */
	__u16 vlan_tci;
};

/* Filter, count, copy: the whole program, for either hook. Returns 1 when the frame was
 * storage traffic. */
static __always_inline int handle(const struct pkt *p, const struct frame_meta *m)
{
	__u32 zero = 0;
	struct smbwire_totals *t = bpf_map_lookup_elem(&totals, &zero);
	if (!t)
		return 0;

	__u32 tag = m->vlan ? 4 : 0;
	__u32 frame_len = m->len + tag;

	struct smbwire_flow_key key = {};
	__u32 hdr_len = 0;
	int matched = classify(p, &key, &hdr_len);

	/* GRO (and a veth peer's GSO) hand TC one frame for several wire packets: count
	 * each segment with its own copy of the headers. */
	__u32 segs = m->segs;
	if (segs < 1 || hdr_len == 0)
		segs = 1;
	__u64 wire_bytes = frame_len + (__u64)(segs - 1) * (hdr_len + tag);
	t->packets_seen += segs;
	t->bytes_seen += wire_bytes;
	if (!matched)
		return 0;
	t->packets_matched += segs;
	t->bytes_matched += wire_bytes;
	t->frames_matched++;

	struct smbwire_flow_counters *fc = bpf_map_lookup_elem(&flows, &key);
	if (fc) {
		__sync_fetch_and_add(&fc->packets, segs);
		__sync_fetch_and_add(&fc->bytes, wire_bytes);
	} else {
		struct smbwire_flow_counters init = { .packets = segs, .bytes = wire_bytes };
		if (bpf_map_update_elem(&flows, &key, &init, BPF_NOEXIST)) {
			/* Another CPU created it first. */
			fc = bpf_map_lookup_elem(&flows, &key);
			if (fc) {
				__sync_fetch_and_add(&fc->packets, segs);
				__sync_fetch_and_add(&fc->bytes, wire_bytes);
			}
		}
	}

	struct smbwire_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg) {
		t->copy_errors++;
		return 1;
	}
	__u32 snap = cfg->snaplen;
	if (snap == 0 || snap > SMBWIRE_MAX_SNAP)
		snap = SMBWIRE_MAX_SNAP;
	/* XDP copies at most a page's worth (a frame of generic XDP after GRO may be longer:
	 * its copy is cut there, like a snap length, and its counters stay whole). */
	if (p->xdp && snap > SMBWIRE_XDP_MAX_COPY)
		snap = SMBWIRE_XDP_MAX_COPY;
	__u32 caplen = m->len;
	if (caplen > snap)
		caplen = snap;
	if (caplen < 1 || caplen > SMBWIRE_MAX_SNAP) {
		t->copy_errors++;
		return 1;
	}
	__u32 rings = cfg->rings;
	__u32 q = rings > 1 ? connection_hash(&key) % rings : 0;
	/* What the ring holds, asked once: it decides shedding and the reader's wakeup. */
	__u64 queued = ring_queued(unlinked(q), NULL);
	int shed_flags = shed_check(t, cfg, &key, q, unlinked(queued), caplen, wire_bytes);
	if (shed_flags < 0)
		return 1;
	__u32 ev_flags = (m->vlan ? SMBWIRE_EV_VLAN : 0) | (__u32)shed_flags;
	if (!(rodata.copy_flags & SMBWIRE_COPY_STAGED)) {
		/* Straight into the ring: one copy of the frame. */
		struct smbwire_event_hdr hdr = {
			.ts_ns = bpf_ktime_get_ns(),
			.len = frame_len,
			.caplen = caplen,
			.ifindex = m->ifindex,
			.vlan_proto = m->vlan ? m->vlan_proto : 0,
			.vlan_tci = m->vlan ? m->vlan_tci : 0,
			.flags = ev_flags,
			.segs = segs,
		};
		int r = copy_direct(p, &hdr, q, queued);
		if (r == EMIT_RING_FULL)
			t->ring_drops++;
		else if (r)
			t->copy_errors++;
		return 1;
	}
	/* Staged: assembled in this CPU's slot, then copied into the ring. */
	struct scratch *s = p->s;
	if (!s) {
		__u32 cpu = bpf_get_smp_processor_id();
		s = bpf_map_lookup_elem(&scratch_buf, &cpu);
	}
	if (!s) {
		t->copy_errors++;
		return 1;
	}
	s->hdr.ts_ns = bpf_ktime_get_ns();
	s->hdr.len = frame_len;
	s->hdr.caplen = caplen;
	s->hdr.ifindex = m->ifindex;
	s->hdr.vlan_proto = m->vlan ? m->vlan_proto : 0;
	s->hdr.vlan_tci = m->vlan ? m->vlan_tci : 0;
	s->hdr.flags = ev_flags;
	s->hdr.segs = segs;
	if (copy_frame(p, s->data, caplen)) {
		t->copy_errors++;
		return 1;
	}
	/* The length is read back from the map value, so the verifier takes it as any value
	 * within the bound below: after XDP's copy loop it would otherwise know the exact length
	 * on each of its thousands of exits and walk the ring choice once per exit. */
	__u64 rec_len = sizeof(s->hdr) + (__u64)(*(volatile __u32 *)&s->hdr.caplen);
	barrier_var(rec_len);
	if (rec_len > sizeof(*s)) {
		t->copy_errors++;
		return 1;
	}
	if (ring_output(q, s, rec_len, wake_flag(queued, rec_len)))
		t->ring_drops++;
	return 1;
}

SEC("tcx/ingress")
int smbwire_tc(struct __sk_buff *skb)
{
	struct pkt p = { .ctx = skb, .xdp = 0 };
	/* At TC ingress the outer VLAN tag is already in skb->vlan_tci, not in the data. */
	struct frame_meta m = {
		.len = skb->len,
		.segs = skb->gso_segs,
		.ifindex = skb->ifindex,
		.vlan = skb->vlan_present,
		.vlan_proto = bpf_ntohs(skb->vlan_proto),
		.vlan_tci = skb->vlan_tci,
	};
	handle(&p, &m);
	return TCX_NEXT;
}

/* XDP runs before the stack: every tag is still in the data (unless the NIC's receive
 * VLAN offload took it, which XDP cannot see), and each frame is one wire packet
 * (native mode runs before GRO). */
SEC("xdp")
int smbwire_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 cpu = bpf_get_smp_processor_id();
	struct scratch *s = bpf_map_lookup_elem(&scratch_buf, &cpu);
	if (!s)
		return XDP_PASS;
	struct pkt p = { .ctx = ctx, .data = data, .data_end = data_end, .xdp = 1, .s = s };
	struct frame_meta m = {
		.len = (__u32)(data_end - data),
		.segs = 1,
		.ifindex = ctx->ingress_ifindex,
	};
	int matched = handle(&p, &m);
	struct smbwire_config *cfg;
	__u32 zero = 0;
	/* Passing is the default: a mirror port's frames are not addressed to this host and
	 * the stack discards them anyway; SMBWIRE_CFG_XDP_DROP saves it that work. */
	if (matched && (cfg = bpf_map_lookup_elem(&config, &zero)) && (cfg->flags & SMBWIRE_CFG_XDP_DROP))
		return XDP_DROP;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
