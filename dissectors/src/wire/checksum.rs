//! The Internet checksum (RFC 1071): 16-bit one's-complement sum of 16-bit words, shared by
//! IPv4 (header), TCP and UDP (pseudo header + segment).

use std::net::IpAddr;

/// One's-complement sum of `data` as big-endian 16-bit words (odd trailing byte padded
/// with zero), folded to 16 bits but not complemented.
pub fn sum(data: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    fold(acc)
}

/// Fold a wide accumulator into 16 bits with end-around carry.
fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// One's-complement sum of several partial sums.
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().map(|&s| u64::from(s)).sum())
}

/// Sum of the TCP/UDP pseudo header (RFC 793 §3.1 for IPv4, RFC 8200 §8.1 for IPv6).
/// Mixed address families have no pseudo header; the sum is then that of the two addresses.
pub fn pseudo_header(src: IpAddr, dst: IpAddr, protocol: u8, length: u32) -> u16 {
    let mut acc: u64 = 0;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            acc += u64::from(sum(&s.octets())) + u64::from(sum(&d.octets()));
            acc += u64::from(protocol) + u64::from(length as u16);
        }
        _ => {
            for a in [src, dst] {
                acc += u64::from(match a {
                    IpAddr::V4(x) => sum(&x.octets()),
                    IpAddr::V6(x) => sum(&x.octets()),
                });
            }
            acc += u64::from(length >> 16) + u64::from(length & 0xffff) + u64::from(protocol);
        }
    }
    fold(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 worked example: words 0001 f203 f4f5 f6f7 sum to ddf2.
        assert_eq!(sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), 0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(sum(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
        assert_eq!(sum(&[]), 0);
    }

    #[test]
    fn combine_carries() {
        assert_eq!(combine(&[0xffff, 0x0001]), 0x0001);
    }
}
