//! Byte accounting: every byte of every input file lands in exactly one category, so the
//! totals reconcile with the files' sizes (`Accounting::total() == sum of file sizes`).


/// The categories. Stable names: they appear in the JSON output (`"accounting"`).
pub mod cat {
    /// pcap/pcapng file headers, block headers and trailers, record headers.
    pub const CAPTURE_FORMAT: &str = "capture_format";
    /// Link, IP, TCP/UDP headers (and link trailers/padding) of analysed frames.
    pub const PROTOCOL_HEADERS: &str = "protocol_headers";
    /// Whole frames that are a copy of a frame already seen (mirror port saw it twice).
    pub const MIRROR_DUPLICATE: &str = "mirror_duplicate";
    /// TCP payload bytes already delivered once (retransmission, overlap).
    pub const RETRANSMITTED: &str = "retransmitted";
    /// NetBIOS session headers, SMB2 headers and every non-payload part of SMB2 messages.
    pub const SMB_METADATA: &str = "smb_metadata";
    /// WRITE request data and READ response data (the payload that is hashed).
    pub const SMB_PAYLOAD: &str = "smb_payload";
    /// Messages behind an SMB2 TRANSFORM header (0xFD 'SMB').
    pub const SMB_ENCRYPTED: &str = "smb_encrypted";
    /// Messages behind an SMB2 COMPRESSION_TRANSFORM header (0xFC 'SMB').
    pub const SMB_COMPRESSED: &str = "smb_compressed";
    /// Bytes in an SMB stream that could not be framed (before resynchronisation, or a message
    /// a resynchronisation found that the next header did not confirm: `stream::confirm`).
    pub const SMB_UNPARSED: &str = "smb_unparsed";
    /// TCP payload on SMB ports that was buffered out of order and never became contiguous.
    pub const TCP_UNDELIVERED: &str = "tcp_undelivered";
    /// Frames and payload of protocols smbwire does not analyse.
    pub const OTHER_PROTOCOLS: &str = "other_protocols";
    /// Frames that could not be decoded (truncated or malformed link/IP/TCP).
    pub const MALFORMED: &str = "malformed";
    /// Bytes at the end of a capture file that do not form a whole record.
    pub const TRUNCATED_TAIL: &str = "truncated_tail";
    /// RDMA Read Response / RDMA Write data placed into a transfer linked to an SMB2 WRITE/READ.
    pub const RDMA_PAYLOAD: &str = "rdma_payload";
    /// RDMA data of SMB Direct connections not linked to any SMB2 request.
    pub const RDMA_UNLINKED: &str = "rdma_unlinked";
    /// SMB Direct negotiate messages, data transfer headers and padding (credit-only messages).
    pub const SMBDIRECT_CONTROL: &str = "smbdirect_control";
    /// BTH/RETH/AETH/IETH/ImmDt, pad and ICRC; MPA length, pad, CRC and markers; DDP/RDMAP headers.
    pub const RDMA_HEADERS: &str = "rdma_headers";
    /// IB ACK / Atomic ACK packets.
    pub const RDMA_ACK: &str = "rdma_ack";
    /// IB CM MADs on QP1 and iWARP MPA Request/Reply frames.
    pub const RDMA_CM: &str = "rdma_cm";
    /// RDMA traffic of other upper layers (queue pairs / connections that are not SMB Direct).
    pub const RDMA_OTHER_ULP: &str = "rdma_other_ulp";
    /// RDMA packets or data bytes seen a second time (same PSN, same payload position).
    pub const RDMA_RETRANSMITTED: &str = "rdma_retransmitted";
    /// iWARP stream bytes that could not be framed (after a gap, bad FPDU).
    pub const RDMA_UNPARSED: &str = "rdma_unparsed";
    /// Frames outside the `--from`/`--to` time bounds, left out of the analysis.
    pub const OUTSIDE_TIME_BOUNDS: &str = "outside_time_bounds";
    /// Input files skipped as unusable beside usable ones (not a capture, damaged header).
    pub const UNUSABLE_INPUT: &str = "unusable_input";
    /// TCP payload of a hole the reorder buffer had already given up on (its limits were
    /// reached), arriving after it: reordering beyond the buffer (`--reorder-buffer`).
    pub const TCP_REORDERED_LATE: &str = "tcp_reordered_late";
    /// Encrypted SMB3 messages whose key (`--keys`) did not decrypt them (wrong key, damaged).
    pub const SMB_DECRYPT_FAILED: &str = "smb_decrypt_failed";
    /// Wire bytes of compressed SMB3 messages that were decompressed and analysed.
    pub const SMB_DECOMPRESSED: &str = "smb_decompressed";
}

/// What a category's bytes are to the analysis (the report groups and the live view sums by it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// Headers and framing around the payload (capture, link/IP/TCP, SMB2, SMB Direct, RDMA).
    Overhead,
    /// The payload that is hashed and deduplicated.
    Payload,
    /// Copies removed before hashing (seen twice by the capture, retransmitted).
    Removed,
    /// Storage traffic smbwire could not analyse (encrypted, compressed, unframed, undelivered,
    /// malformed, cut off, RDMA not tied to SMB).
    NotAnalysed,
    /// Traffic of protocols smbwire does not look at.
    Other,
}

/// One accounting category: its JSON name, what it holds (one line), and its disposition.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Category {
    pub name: &'static str,
    pub description: &'static str,
    pub disposition: Disposition,
}

/// Every category the engine can produce, in the order the docs list them (docs/json-schema.md
/// `accounting`). The report and the live view explain and group categories from this table.
pub const CATEGORIES: &[Category] = {
    use Disposition::*;
    &[
        Category { name: cat::CAPTURE_FORMAT, description: "pcap/pcapng file headers, block headers and trailers, record headers", disposition: Overhead },
        Category { name: cat::PROTOCOL_HEADERS, description: "link, IP and TCP/UDP headers (and link trailers/padding) of analysed frames, TCP keep-alive octets", disposition: Overhead },
        Category { name: cat::MIRROR_DUPLICATE, description: "whole frames the capture saw twice (mirror port), removed before hashing", disposition: Removed },
        Category { name: cat::RETRANSMITTED, description: "TCP payload already delivered once (retransmission, overlap), removed", disposition: Removed },
        Category { name: cat::SMB_METADATA, description: "NetBIOS session headers, SMB2 headers and every non-payload part of SMB2 messages", disposition: Overhead },
        Category { name: cat::SMB_PAYLOAD, description: "WRITE request and READ response data: the payload that is hashed", disposition: Payload },
        Category { name: cat::SMB_ENCRYPTED, description: "messages behind an SMB2 TRANSFORM header (encrypted, not analysed)", disposition: NotAnalysed },
        Category { name: cat::SMB_COMPRESSED, description: "messages behind an SMB2 COMPRESSION_TRANSFORM header that could not be decompressed (not analysed)", disposition: NotAnalysed },
        Category { name: cat::SMB_UNPARSED, description: "SMB stream bytes that could not be framed (skipped until resynchronised, or a message a resynchronisation found that the header after it did not confirm)", disposition: NotAnalysed },
        Category { name: cat::TCP_UNDELIVERED, description: "TCP payload on SMB ports buffered out of order that never became contiguous", disposition: NotAnalysed },
        Category { name: cat::OTHER_PROTOCOLS, description: "frames and payload of protocols smbwire does not analyse", disposition: Other },
        Category { name: cat::MALFORMED, description: "frames that could not be decoded (truncated or malformed link/IP/TCP)", disposition: NotAnalysed },
        Category { name: cat::TRUNCATED_TAIL, description: "bytes at the end of a capture file that do not form a whole record", disposition: NotAnalysed },
        Category { name: cat::RDMA_PAYLOAD, description: "RDMA Read Response / RDMA Write data linked to an SMB2 WRITE/READ and hashed", disposition: Payload },
        Category { name: cat::RDMA_UNLINKED, description: "RDMA data of SMB Direct connections never linked to an SMB2 request", disposition: NotAnalysed },
        Category { name: cat::SMBDIRECT_CONTROL, description: "SMB Direct negotiate messages, data transfer headers and padding", disposition: Overhead },
        Category { name: cat::RDMA_HEADERS, description: "BTH/RETH/AETH/IETH/ImmDt, pad and ICRC; MPA length, markers, pad and CRC; DDP/RDMAP headers", disposition: Overhead },
        Category { name: cat::RDMA_ACK, description: "InfiniBand ACK / Atomic ACK packets", disposition: Overhead },
        Category { name: cat::RDMA_CM, description: "IB CM MADs on QP1 and iWARP MPA Request/Reply frames", disposition: Overhead },
        Category { name: cat::RDMA_OTHER_ULP, description: "RDMA traffic of other upper layers (queue pairs that are not SMB Direct, e.g. NVMe-oF, iSER)", disposition: NotAnalysed },
        Category { name: cat::RDMA_RETRANSMITTED, description: "RDMA packets or data seen a second time (same PSN, same payload position), removed", disposition: Removed },
        Category { name: cat::RDMA_UNPARSED, description: "iWARP stream bytes that could not be framed (after a gap, bad FPDU)", disposition: NotAnalysed },
        Category { name: cat::OUTSIDE_TIME_BOUNDS, description: "frames captured before --from or at/after --to, left out of the analysis", disposition: NotAnalysed },
        Category { name: cat::UNUSABLE_INPUT, description: "input files skipped as unusable beside usable ones (not a capture, damaged header)", disposition: NotAnalysed },
        Category { name: cat::TCP_REORDERED_LATE, description: "TCP payload arriving after the reorder buffer had given up its hole (reordering beyond --reorder-buffer)", disposition: NotAnalysed },
        Category { name: cat::SMB_DECRYPT_FAILED, description: "encrypted SMB3 messages the given key (--keys) did not decrypt (wrong key, damaged message)", disposition: NotAnalysed },
        Category { name: cat::SMB_DECOMPRESSED, description: "wire bytes of compressed SMB3 messages that were decompressed and analysed (their WRITE/READ data hashed on the decompressed bytes)", disposition: Payload },
    ]
};

/// The table entry of a category name.
pub fn category(name: &str) -> Option<&'static Category> {
    CATEGORIES.iter().find(|c| c.name == name)
}

/// Bytes per category, in `CATEGORIES` order (an array: `add` runs for every frame, and a
/// category is found by the address of its name before any string compare).
#[derive(Debug, Clone)]
pub struct Accounting {
    bytes: [u64; CATEGORY_COUNT],
}

pub const CATEGORY_COUNT: usize = CATEGORIES.len();

impl Default for Accounting {
    fn default() -> Self {
        Accounting { bytes: [0; CATEGORY_COUNT] }
    }
}

/// Position in `CATEGORIES` of a category name (the `cat::` constants, whose address is
/// usually the table's own; else compared by content).
#[inline]
fn index_of(name: &str) -> Option<usize> {
    static TABLE: &[Category] = CATEGORIES;
    TABLE
        .iter()
        .position(|c| std::ptr::eq(c.name.as_ptr(), name.as_ptr()) && c.name.len() == name.len())
        .or_else(|| TABLE.iter().position(|c| c.name == name))
}

/// `CATEGORIES` positions sorted by name: the order `iter` reports.
fn by_name() -> &'static [usize; CATEGORY_COUNT] {
    static ORDER: std::sync::OnceLock<[usize; CATEGORY_COUNT]> = std::sync::OnceLock::new();
    ORDER.get_or_init(|| {
        let mut order: [usize; CATEGORY_COUNT] = std::array::from_fn(|i| i);
        order.sort_by_key(|&i| CATEGORIES[i].name);
        order
    })
}

impl Accounting {
    #[inline]
    pub fn add(&mut self, category: &'static str, bytes: u64) {
        if bytes > 0 {
            match index_of(category) {
                Some(i) => self.bytes[i] += bytes,
                None => debug_assert!(false, "accounting category {category:?} is not in CATEGORIES"),
            }
        }
    }
    pub fn get(&self, category: &str) -> u64 {
        index_of(category).map_or(0, |i| self.bytes[i])
    }
    pub fn total(&self) -> u64 {
        self.bytes.iter().sum()
    }
    /// Bytes per category now, in table order: what a stage adds between two snapshots is
    /// theirs to `reclassify`.
    pub fn snapshot(&self) -> [u64; CATEGORY_COUNT] {
        self.bytes
    }
    /// Moves `moved` (bytes per category, in table order, as two snapshots' difference) into
    /// `to`: bytes first taken for one thing, found to be another (an SMB2 message a
    /// resynchronisation took that the next header did not confirm). The total is unchanged.
    pub fn reclassify(&mut self, moved: &[u64; CATEGORY_COUNT], to: &'static str) {
        let Some(t) = index_of(to) else {
            debug_assert!(false, "accounting category {to:?} is not in CATEGORIES");
            return;
        };
        for (i, &n) in moved.iter().enumerate() {
            let n = n.min(self.bytes[i]);
            self.bytes[i] -= n;
            self.bytes[t] += n;
        }
    }
    /// Categories with bytes, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        by_name()
            .iter()
            .filter(|&&i| self.bytes[i] > 0)
            .map(|&i| (CATEGORIES[i].name, self.bytes[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `cat::` constant is in the table exactly once, with a description: read from this
    /// file's source, so a category added to `cat` without a table entry fails here.
    #[test]
    fn every_category_is_in_the_table() {
        let src = include_str!("accounting.rs");
        let module = &src[src.find("pub mod cat {").unwrap()..src.find("/// What a category's bytes are").unwrap()];
        let consts: Vec<&str> = module
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub const "))
            .map(|l| l.split('"').nth(1).unwrap())
            .collect();
        assert_eq!(consts.len(), 27);
        let names: Vec<&str> = CATEGORIES.iter().map(|c| c.name).collect();
        assert_eq!(consts, names, "CATEGORIES lists the cat:: constants in order");
        for c in CATEGORIES {
            assert!(!c.description.is_empty() && !c.description.contains('\n'), "{}", c.name);
        }
    }

    /// `iter` reports the categories with bytes, by name; a name equal to a category's but at
    /// another address counts for it.
    #[test]
    fn sums_by_category_in_name_order() {
        let mut a = Accounting::default();
        a.add(cat::SMB_PAYLOAD, 10);
        a.add(cat::CAPTURE_FORMAT, 4);
        a.add(cat::SMB_PAYLOAD, 5);
        a.add(cat::MALFORMED, 0);
        let copy: &'static str = String::from(cat::CAPTURE_FORMAT).leak();
        a.add(copy, 1);
        assert_eq!(a.get(cat::SMB_PAYLOAD), 15);
        assert_eq!(a.get(cat::CAPTURE_FORMAT), 5);
        assert_eq!(a.total(), 20);
        let got: Vec<(&str, u64)> = a.iter().collect();
        assert_eq!(got, vec![(cat::CAPTURE_FORMAT, 5), (cat::SMB_PAYLOAD, 15)]);
        assert!(cat::CAPTURE_FORMAT < cat::SMB_PAYLOAD);
    }
}
