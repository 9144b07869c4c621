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
    fn emit_round_trip() {
        let r = Repr { kind: 0, length: 0x01_02_03 };
        let mut b = [0u8; 4];
        r.emit(&mut b);
        assert_eq!(b, [0, 1, 2, 3]);
        assert_eq!(Repr::parse(&b).unwrap(), r);
    }
}
