//! The Direct TCP transport header (MS-SMB2 §2.1; RFC 1002 §4.3.1 session packet types).
//!
//! Four bytes precede every SMB2 message on TCP: a zero byte and a 24-bit big-endian
//! `StreamProtocolLength`. On port 139 (NetBIOS session service) the first byte is the
//! RFC 1002 packet type; non-zero types (session request, keepalive...) carry no SMB.

/// Size of the header.
pub const HEADER_LEN: usize = 4;
/// Largest length the 24-bit field can express.
pub const MAX_LENGTH: u32 = 0x00FF_FFFF;

/// RFC 1002 session packet types.
pub mod kind {
    pub const SESSION_MESSAGE: u8 = 0x00;
    pub const SESSION_REQUEST: u8 = 0x81;
    pub const POSITIVE_SESSION_RESPONSE: u8 = 0x82;
    pub const NEGATIVE_SESSION_RESPONSE: u8 = 0x83;
    pub const RETARGET_SESSION_RESPONSE: u8 = 0x84;
    pub const SESSION_KEEP_ALIVE: u8 = 0x85;
}

/// The meaning of one header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repr {
    pub kind: u8,
    pub length: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    Truncated,
    /// A packet type that is neither a session message nor a known RFC 1002 control packet.
    UnknownType(u8),
}

impl Repr {
    pub fn parse(b: &[u8]) -> Result<Repr, Error> {
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let kind = b[0];
        let length = u32::from_be_bytes([0, b[1], b[2], b[3]]);
        match kind {
            kind::SESSION_MESSAGE
            | kind::SESSION_REQUEST
            | kind::POSITIVE_SESSION_RESPONSE
            | kind::NEGATIVE_SESSION_RESPONSE
            | kind::RETARGET_SESSION_RESPONSE
            | kind::SESSION_KEEP_ALIVE => Ok(Repr { kind, length }),
            k => Err(Error::UnknownType(k)),
        }
    }

    pub fn emit(&self, b: &mut [u8; HEADER_LEN]) {
        let l = (self.length & MAX_LENGTH).to_be_bytes();
        *b = [self.kind, l[1], l[2], l[3]];
    }

    /// A session message carries an SMB message; everything else is transport metadata.
    pub fn is_session_message(&self) -> bool {
        self.kind == kind::SESSION_MESSAGE
    }

    /// Does a control packet's length fit its type (RFC 1002 §4.3.2-4.3.7)? A session request
    /// holds the called and calling names, each at least 34 bytes encoded (a 16-byte name's 32
    /// plus its length byte and the terminating root label) and at most 255 (RFC 1002 §4.1,
    /// RFC 883's bound); a positive response and a keepalive are empty; a negative response
    /// holds its error code, a retarget response an IPv4 address and a port. A session
    /// message's length is checked elsewhere (against what the connection negotiated).
    ///
    /// Mid-stream, four bytes of payload that start with a control type are read as a header:
    /// with any length believed, they would skip up to 16 MiB of the messages that follow
    /// (found on 2026-12-07 with a capture starting inside a WRITE's data).
    pub fn control_length_fits(&self) -> bool {
        match self.kind {
            kind::SESSION_REQUEST => (2 * 34..=2 * 255).contains(&self.length),
            kind::POSITIVE_SESSION_RESPONSE | kind::SESSION_KEEP_ALIVE => self.length == 0,
            kind::NEGATIVE_SESSION_RESPONSE => self.length == 1,
            kind::RETARGET_SESSION_RESPONSE => self.length == 6,
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_session_message_from_capture() {
        // First NetBIOS header of smb202-samba-reads-writes.pcap (NEGOTIATE request, 0x68 bytes).
        let r = Repr::parse(&[0x00, 0x00, 0x00, 0x68]).unwrap();
        assert_eq!(r, Repr { kind: 0, length: 0x68 });
        assert!(r.is_session_message());
    }

    #[test]
    fn parse_keepalive_and_reject_unknown() {
        let r = Repr::parse(&[0x85, 0, 0, 0]).unwrap();
        assert!(!r.is_session_message());
        assert_eq!(Repr::parse(&[0x42, 0, 0, 0]), Err(Error::UnknownType(0x42)));
        assert_eq!(Repr::parse(&[0, 0, 0]), Err(Error::Truncated));
    }

    #[test]
    fn control_packets_have_the_lengths_of_their_types() {
        let fits = |kind: u8, length: u32| Repr { kind, length }.control_length_fits();
        assert!(fits(kind::SESSION_KEEP_ALIVE, 0) && !fits(kind::SESSION_KEEP_ALIVE, 4));
        assert!(fits(kind::POSITIVE_SESSION_RESPONSE, 0) && !fits(kind::POSITIVE_SESSION_RESPONSE, 1));
        assert!(fits(kind::NEGATIVE_SESSION_RESPONSE, 1) && !fits(kind::NEGATIVE_SESSION_RESPONSE, 0));
        assert!(fits(kind::RETARGET_SESSION_RESPONSE, 6) && !fits(kind::RETARGET_SESSION_RESPONSE, 7));
        // Two 16-byte names, encoded: 68 bytes (a scope adds labels).
        assert!(fits(kind::SESSION_REQUEST, 68) && fits(kind::SESSION_REQUEST, 510));
        assert!(!fits(kind::SESSION_REQUEST, 67) && !fits(kind::SESSION_REQUEST, 0xa0bfde));
        assert!(fits(kind::SESSION_MESSAGE, 0x68));
    }

    #[test]
    fn emit_round_trip() {
        let r = Repr { kind: 0, length: 0x01_02_03 };
        let mut b = [0u8; 4];
        r.emit(&mut b);
        assert_eq!(b, [0, 1, 2, 3]);
        assert_eq!(Repr::parse(&b).unwrap(), r);
    }
}
