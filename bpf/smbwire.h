/* SPDX-License-Identifier: MIT */
/* Constants and layouts shared by the kernel program (smbwire.bpf.c) and user space: the
 * engine's build script (dissectors/build.rs) generates its Rust copy (`live::abi`) from this
 * file, every integer #define and every struct's size and field offsets, and checks its
 * layouts against clang's. One #define per line, an integer value; struct fields of
 * __u8 .. __u64 (arrays allowed), one per line. */
#ifndef SMBWIRE_H
#define SMBWIRE_H

/* Largest copy into the ring buffer: a whole GRO/GSO packet (64 KiB, the default
 * gro_max_size) plus L2 headers, so no SMB payload is cut off by coalescing. */
#define SMBWIRE_MAX_SNAP 66048

/* TCP ports map capacity: 445, 5445 and a few configured extras. */
#define SMBWIRE_MAX_PORTS 64

/* LRU flow table size: exact counters for this many concurrent flows. */
#define SMBWIRE_MAX_FLOWS 65536

/* Ring buffers (capture queues): ring0 .. ring15; user space sizes the ones in use and
 * gives the others one page. A frame goes to ring (connection hash % config.rings). */
#define SMBWIRE_MAX_RINGS 16

/* Connections user space has shed (stopped analysing under overload): their frames are
 * counted and not copied. */
#define SMBWIRE_MAX_SHED 4096

/* Tunnels opened inside one another at most, here and in `analyze` (wire::decode): ERSPAN
 * carried across a VXLAN fabric is two; a frame in a third is not looked into. */
#define SMBWIRE_MAX_TUNNELS 2

/* Headers walked between the MAC addresses and the EtherType of what a frame carries:
 * 802.1Q/802.1ad tags (QinQ is two) and Cisco MetaData (TrustSec's in-line SGT, 0x8909;
 * wire/cmd.rs), here and in the AF_PACKET classifier (live/classify.rs). */
#define SMBWIRE_MAX_L2_TAGS 3
#define SMBWIRE_ETH_P_CMD 0x8909
/* Its length after its EtherType (in GRE: after the GRE header). */
#define SMBWIRE_CMD_LEN 8

#define SMBWIRE_ROCEV2_UDP_PORT 4791
#define SMBWIRE_ETH_P_ROCEV1 0x8915

/* smbwire_flow_key.family */
#define SMBWIRE_FAMILY_IPV4 4
#define SMBWIRE_FAMILY_IPV6 6
/* RoCEv1: no IP header, the GRH carries the GIDs (IBTA vol.1 8.3). */
#define SMBWIRE_FAMILY_ROCEV1 27

/* smbwire_event_hdr.flags */
#define SMBWIRE_EV_VLAN 1 /* the outer 802.1Q/802.1ad tag was taken off the frame by the
                             kernel: vlan_proto/vlan_tci must be put back after the MACs */
#define SMBWIRE_EV_SHED_HERE 2 /* the program shed this frame's connection at this frame, its
                                  ring being nearly full (smbwire_config.shed_at) */

/* Precedes every ring buffer record; `caplen` frame bytes follow. 32 bytes. */
struct smbwire_event_hdr {
	__u64 ts_ns;      /* bpf_ktime_get_ns(): CLOCK_MONOTONIC, user space adds the wall offset */
	__u32 len;        /* frame length, including a stripped VLAN tag (a GRO/GSO frame: all its segments) */
	__u32 caplen;     /* bytes copied after this header (without the stripped VLAN tag) */
	__u32 ifindex;
	__u16 vlan_proto; /* host order, valid with SMBWIRE_EV_VLAN */
	__u16 vlan_tci;   /* host order, valid with SMBWIRE_EV_VLAN */
	__u32 flags;
	__u32 segs;       /* wire packets this frame stands for: >1 when GRO/GSO coalesced them */
};

/* Key of the exact per-flow counters. 40 bytes. Addresses in network order
 * (IPv4 in the first 4 bytes, rest zero); ports host order. */
struct smbwire_flow_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
	__u8 proto;  /* IPPROTO_TCP, IPPROTO_UDP, or 0x1b (BTH next header) for RoCEv1 */
	__u8 family; /* SMBWIRE_FAMILY_* */
	__u16 _pad;
};

struct smbwire_flow_counters {
	__u64 packets;
	__u64 bytes; /* wire bytes, including a stripped VLAN tag */
};

/* Per-CPU totals, one entry: user space sums over CPUs. 80 bytes.
 * packets/bytes are wire packets and wire bytes: a GRO/GSO frame of N segments counts N
 * packets and N copies of its headers. `frames_matched` counts the (possibly coalesced)
 * frames copied or dropped:
 * frames_matched = delivered + ring_drops + copy_errors + shed_frames. */
struct smbwire_totals {
	__u64 packets_seen;
	__u64 bytes_seen;
	__u64 packets_matched;
	__u64 bytes_matched;
	__u64 ring_drops;  /* matched frames that found the ring buffer full */
	__u64 copy_errors; /* matched frames whose bytes could not be loaded */
	__u64 frames_matched;
	__u64 shed_frames; /* matched frames of shed connections, counted and not copied */
	__u64 shed_bytes;  /* their wire bytes */
	__u64 shed_chosen; /* connections the program shed itself (smbwire_config.shed_at) */
};

/* smbwire_config.flags */
#define SMBWIRE_CFG_XDP_DROP 1 /* XDP: drop storage frames after counting and copying them
                                  (a mirror port, where nothing on this host needs them) */
#define SMBWIRE_CFG_SHEDDING 2 /* the shed map may hold connections: look frames up in it */

/* A ring is "nearly full" (smbwire_config.shed_at) with less than its size >>
 * SMBWIRE_SHED_FULL_SHIFT left (a 16th; 2 MiB of the default 32 MiB ring). User space sheds
 * at 90% (its SHED_URGENT) when it gets to look; the program's shedding is for when it does
 * not (its thread starved of CPU): the ring would otherwise overflow and drop scattered
 * frames of every connection. */
#define SMBWIRE_SHED_FULL_SHIFT 4

/* Frames of each direction of a TCP connection still copied after the program sheds it
 * (the frame it sheds it at is the first of its direction's): a segment that came late
 * across the cut is then still behind it (user space's cut, `Shedder`, takes the same
 * count). RDMA flows get none, as user space cuts them at the frame. */
#define SMBWIRE_SHED_SETTLE 8

/* Bits of the program's read-only `copy_flags` (set by user space before load):
 * the kernel has bpf_xdp_load_bytes (5.18+); frames go through the per-CPU slot and
 * bpf_ringbuf_output rather than straight into a ring reservation. */
#define SMBWIRE_COPY_XDP_HELPER 1
#define SMBWIRE_COPY_STAGED 2

/* The reader is woken once this much is queued (or a quarter of the ring, if smaller),
 * not for every record: by default the kernel wakes it whenever it had caught up, which
 * under load means one wakeup (irq_work, then a context switch) per frame, paid on the
 * receiving CPU. The reader also wakes on its poll timeout (100 ms in smbwire), so frames
 * of a quiet link wait at most that long. Each wakeup raises an irq_work (a self-IPI: in a
 * VM, an exit to the hypervisor, several microseconds), so the mark is 1 MiB rather than
 * 128 KiB: at 128 KiB the wakeups took 7.5% of the program's time on 1514-byte frames and
 * more on jumbo frames, which fill it in 14 frames (docs/performance-log.md, 2026-11-30);
 * 1 MiB is still 1/32 of the default ring and a third of a millisecond at 25 Gbit/s. */
#define SMBWIRE_WAKEUP_BYTES 1048576

/* The program's read-only globals (`.rodata`), set by user space before load: the verifier
 * takes them as constants. 8 bytes. */
struct smbwire_rodata {
	__u32 copy_flags; /* SMBWIRE_COPY_* */
	__u32 wake_at;    /* the reader's wake-up mark: min(ring size / 4, SMBWIRE_WAKEUP_BYTES),
	                     so a frame needs no question to its ring for the ring's size */
};

/* Configuration filled by user space before attach; one entry. */
struct smbwire_config {
	__u32 snaplen; /* at most SMBWIRE_MAX_SNAP; 0 means SMBWIRE_MAX_SNAP */
	__u32 flags;   /* SMBWIRE_CFG_* */
	__u32 rings;   /* ring buffers in use, 1..SMBWIRE_MAX_RINGS (0 counts as 1) */
	__u32 shed_at; /* bytes queued in a ring at which a frame of a connection not shed has
	                  the program shed it, at that frame (it then sets SMBWIRE_CFG_SHEDDING
	                  itself); 0: never */
};

/* Value of the shed map: what the kernel skipped of that connection, and how many frames
 * of each direction it still copies (index 0: from the connection key's first end; user
 * space inserts 0, 0). 24 bytes. */
struct smbwire_shed_counters {
	__u64 frames;
	__u64 bytes;
	__u32 settle[2];
};

#endif
