//! SMB3 decryption (MS-SMB2 §3.1.4.3, §3.2.5.2 / §3.3.5.5, §3.1.4.2): the keys file, the
//! SP800-108 key derivation, the preauth integrity hash, and AES-CCM / AES-GCM on a
//! TRANSFORM_HEADER message. Crypto primitives are RustCrypto's (`aes`, `ccm`, `aes-gcm`,
//! `hmac`, `sha2`); this module only arranges their inputs as the specification says.
//!
//! The keys file (`--keys`) has Wireshark's `smb2_seskey_list` entries, one a line:
//! `SessionId,SessionKey[,ServerToClientKey,ClientToServerKey]`, hex, the SessionId as its 8
//! bytes appear on the wire. Fields may be quoted (`"…"`, the form tshark's
//! `-o uat:smb2_seskey_list:` takes) and empty (`""`). `#` starts a comment.
//!
//! Which keys a session uses: the S2C/C2S keys when the file gives them; otherwise keys derived
//! from the session key with the dialect's labels (3.0/3.0.2: "SMB2AESCCM\0" with "ServerIn \0"
//! / "ServerOut\0"; 3.1.1: "SMBC2SCipherKey\0" / "SMBS2CCipherKey\0" with the session's preauth
//! integrity hash as context). The cipher comes from the connection (3.0.x: AES-128-CCM;
//! 3.1.1: the encryption context of the NEGOTIATE response); when the NEGOTIATE was not seen,
//! every cipher that fits the key length is tried (the tag tells which one is right).

use aes_gcm::aead::{AeadInPlace, KeyInit};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use std::collections::HashMap;

/// Cipher identifiers of the SMB2_ENCRYPTION_CAPABILITIES context (§2.2.3.1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cipher {
    Aes128Ccm,
    Aes128Gcm,
    Aes256Ccm,
    Aes256Gcm,
}

impl Cipher {
    pub const ALL: [Cipher; 4] = [Cipher::Aes128Ccm, Cipher::Aes128Gcm, Cipher::Aes256Ccm, Cipher::Aes256Gcm];

    pub fn from_id(id: u16) -> Option<Cipher> {
        match id {
            1 => Some(Cipher::Aes128Ccm),
            2 => Some(Cipher::Aes128Gcm),
            3 => Some(Cipher::Aes256Ccm),
            4 => Some(Cipher::Aes256Gcm),
            _ => None,
        }
    }

    pub fn key_len(self) -> usize {
        match self {
            Cipher::Aes128Ccm | Cipher::Aes128Gcm => 16,
            Cipher::Aes256Ccm | Cipher::Aes256Gcm => 32,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Cipher::Aes128Ccm => "AES-128-CCM",
            Cipher::Aes128Gcm => "AES-128-GCM",
            Cipher::Aes256Ccm => "AES-256-CCM",
            Cipher::Aes256Gcm => "AES-256-GCM",
        }
    }
}

/// One line of the keys file. Its `Debug` shows which keys are present, never their bytes.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KeyEntry {
    pub session_key: Option<Vec<u8>>,
    pub server_to_client: Option<Vec<u8>>,
    pub client_to_server: Option<Vec<u8>>,
}

impl std::fmt::Debug for KeyEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyEntry")
            .field("session_key", &self.session_key.is_some())
            .field("directional_keys", &self.server_to_client.is_some())
            .finish()
    }
}

/// The keys file: entries by SessionId (the u64 of the wire bytes, little-endian).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyTable {
    entries: HashMap<u64, KeyEntry>,
}

fn parse_hex(field: &str) -> Result<Vec<u8>, String> {
    let s: String = field.chars().filter(|c| !matches!(c, ':' | ' ' | '-')).collect();
    let s = s.strip_prefix("0x").unwrap_or(&s);
    if !s.len().is_multiple_of(2) || !s.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("{field:?} is not hex"));
    }
    Ok((0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or(0)).collect())
}

fn unquote(f: &str) -> &str {
    let f = f.trim();
    f.strip_prefix('"').and_then(|x| x.strip_suffix('"')).unwrap_or(f).trim()
}

impl KeyTable {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn get(&self, session_id: u64) -> Option<&KeyEntry> {
        self.entries.get(&session_id)
    }

    pub fn insert(&mut self, session_id: u64, e: KeyEntry) {
        self.entries.insert(session_id, e);
    }

    /// Parses the keys file text; errors name the line.
    pub fn parse(text: &str) -> Result<KeyTable, String> {
        let mut t = KeyTable::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |m: String| format!("keys file line {}: {m}", i + 1);
            let fields: Vec<&str> = line.split(',').map(unquote).collect();
            if fields.len() != 2 && fields.len() != 4 {
                return Err(err(format!(
                    "expected SessionId,SessionKey[,ServerToClientKey,ClientToServerKey], got {} fields",
                    fields.len()
                )));
            }
            let sid = parse_hex(fields[0]).map_err(err)?;
            if sid.len() != 8 {
                return Err(err(format!("the SessionId must be 8 bytes (16 hex digits), got {}", sid.len())));
            }
            let key = |f: &str, what: &str| -> Result<Option<Vec<u8>>, String> {
                if f.is_empty() {
                    return Ok(None);
                }
                let k = parse_hex(f).map_err(err)?;
                if k.len() != 16 && k.len() != 32 {
                    return Err(err(format!("the {what} must be 16 or 32 bytes, got {}", k.len())));
                }
                Ok(Some(k))
            };
            let mut e = KeyEntry { session_key: key(fields[1], "session key")?, ..KeyEntry::default() };
            if fields.len() == 4 {
                e.server_to_client = key(fields[2], "server-to-client key")?;
                e.client_to_server = key(fields[3], "client-to-server key")?;
                if e.server_to_client.is_some() != e.client_to_server.is_some() {
                    return Err(err("give both the server-to-client and the client-to-server key, or neither".into()));
                }
            }
            if e.session_key.is_none() && e.server_to_client.is_none() {
                return Err(err("no key given".into()));
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(&sid);
            t.entries.insert(u64::from_le_bytes(b), e);
        }
        Ok(t)
    }
}

/// SP800-108 counter-mode KDF with HMAC-SHA256 (MS-SMB2 §3.1.4.2): `l_bits` of
/// HMAC(Ki, i=1 ‖ Label ‖ 0x00 ‖ Context ‖ L), i and L 32-bit big-endian. `l_bits` ≤ 256.
pub fn kdf(ki: &[u8], label: &[u8], context: &[u8], l_bits: u32) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(ki).expect("HMAC takes any key length");
    mac.update(&1u32.to_be_bytes());
    mac.update(label);
    mac.update(&[0]);
    mac.update(context);
    mac.update(&l_bits.to_be_bytes());
    let out = mac.finalize().into_bytes();
    out[..(l_bits as usize / 8).min(out.len())].to_vec()
}

/// Dialect families for the KDF labels.
pub fn is_311(dialect: u16) -> bool {
    dialect == 0x0311
}

/// (client-to-server, server-to-client) keys derived from the session key (§3.2.5.3.1,
/// §3.3.5.5.3). `preauth` is needed for 3.1.1.
pub fn derive(session_key: &[u8], dialect_311: bool, cipher: Cipher, preauth: Option<&[u8; 64]>) -> Option<(Vec<u8>, Vec<u8>)> {
    let l = (cipher.key_len() * 8) as u32;
    // 256-bit ciphers take the full session key; 128-bit ones its first 16 bytes.
    let ki = if cipher.key_len() == 32 { session_key } else { &session_key[..session_key.len().min(16)] };
    if dialect_311 {
        let ctx = preauth?;
        Some((kdf(ki, b"SMBC2SCipherKey\0", ctx, l), kdf(ki, b"SMBS2CCipherKey\0", ctx, l)))
    } else {
        Some((kdf(ki, b"SMB2AESCCM\0", b"ServerIn \0", l), kdf(ki, b"SMB2AESCCM\0", b"ServerOut\0", l)))
    }
}

/// Preauth integrity hash step (§3.2.5.2): H = SHA-512(H ‖ message).
pub fn preauth_update(h: &mut [u8; 64], msg: &[u8]) {
    let mut s = Sha512::new();
    s.update(&h[..]);
    s.update(msg);
    h.copy_from_slice(&s.finalize());
}

type Aes128Ccm = ccm::Ccm<aes::Aes128, ccm::consts::U16, ccm::consts::U11>;
type Aes256Ccm = ccm::Ccm<aes::Aes256, ccm::consts::U16, ccm::consts::U11>;

/// Bytes of the TRANSFORM_HEADER.
pub const TRANSFORM_LEN: usize = 52;

/// Decrypts `buf` in place: the 52-byte TRANSFORM_HEADER `hdr` (Signature = tag at 4..20,
/// Nonce at 20..36, AAD = bytes 20..52) and the ciphertext. False = wrong key or cipher, or a
/// damaged message (the tag does not verify); `buf` is then garbage.
pub fn decrypt(cipher: Cipher, key: &[u8], hdr: &[u8], buf: &mut [u8]) -> bool {
    if hdr.len() < TRANSFORM_LEN || key.len() != cipher.key_len() {
        return false;
    }
    let tag = &hdr[4..20];
    let nonce = &hdr[20..36];
    let aad = &hdr[20..52];
    macro_rules! run {
        ($t:ty, $nlen:expr) => {{
            let Ok(c) = <$t>::new_from_slice(key) else { return false };
            c.decrypt_in_place_detached(nonce[..$nlen].into(), aad, buf, tag.into()).is_ok()
        }};
    }
    match cipher {
        Cipher::Aes128Ccm => run!(Aes128Ccm, 11),
        Cipher::Aes256Ccm => run!(Aes256Ccm, 11),
        Cipher::Aes128Gcm => run!(aes_gcm::Aes128Gcm, 12),
        Cipher::Aes256Gcm => run!(aes_gcm::Aes256Gcm, 12),
    }
}

/// Encrypts `buf` in place and returns the tag (for tests and the synthesizer): `hdr` is the
/// header with its Nonce, OriginalMessageSize, Flags and SessionId filled in.
pub fn encrypt(cipher: Cipher, key: &[u8], hdr: &[u8], buf: &mut [u8]) -> Option<[u8; 16]> {
    if hdr.len() < TRANSFORM_LEN || key.len() != cipher.key_len() {
        return None;
    }
    let nonce = &hdr[20..36];
    let aad = &hdr[20..52];
    macro_rules! run {
        ($t:ty, $nlen:expr) => {{
            let c = <$t>::new_from_slice(key).ok()?;
            let t = c.encrypt_in_place_detached(nonce[..$nlen].into(), aad, buf).ok()?;
            let mut out = [0u8; 16];
            out.copy_from_slice(&t);
            Some(out)
        }};
    }
    match cipher {
        Cipher::Aes128Ccm => run!(Aes128Ccm, 11),
        Cipher::Aes256Ccm => run!(Aes256Ccm, 11),
        Cipher::Aes128Gcm => run!(aes_gcm::Aes128Gcm, 12),
        Cipher::Aes256Gcm => run!(aes_gcm::Aes256Gcm, 12),
    }
}

/// Keys that decrypted a session's messages, kept so the next message needs no trials.
/// Its `Debug` names the cipher only.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKeys {
    pub cipher: Cipher,
    pub client_to_server: Vec<u8>,
    pub server_to_client: Vec<u8>,
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionKeys").field("cipher", &self.cipher).finish()
    }
}

/// Which derivations a session key is tried with on a connection of `dialect`: the 3.0
/// labels (`false`), the 3.1.1 ones with the preauth hash (`true`); both when the NEGOTIATE
/// was not seen.
fn families(dialect: Option<u16>) -> &'static [bool] {
    match dialect {
        Some(0x0311) => &[true],
        Some(_) => &[false],
        None => &[false, true],
    }
}

/// Would `candidates` derive keys from the session's preauth hash?
pub fn needs_preauth(e: &KeyEntry, dialect: Option<u16>) -> bool {
    e.session_key.is_some() && families(dialect).contains(&true)
}

/// The (cipher, c2s, s2c) candidates for a session, best guess first: `dialect` and
/// `cipher_id` from the connection's NEGOTIATE when seen, `preauth` the session's final
/// preauth hash (3.1.1).
pub fn candidates(e: &KeyEntry, dialect: Option<u16>, cipher_id: Option<u16>, preauth: Option<&[u8; 64]>) -> Vec<SessionKeys> {
    let ciphers: Vec<Cipher> = match (dialect, cipher_id.and_then(Cipher::from_id)) {
        (Some(0x0300 | 0x0302), _) => vec![Cipher::Aes128Ccm],
        (Some(0x0311), Some(c)) => vec![c],
        _ => Cipher::ALL.to_vec(),
    };
    let mut out = Vec::new();
    for c in ciphers {
        if let (Some(s2c), Some(c2s)) = (&e.server_to_client, &e.client_to_server) {
            if s2c.len() == c.key_len() && c2s.len() == c.key_len() {
                out.push(SessionKeys { cipher: c, client_to_server: c2s.clone(), server_to_client: s2c.clone() });
            }
        }
        if let Some(sk) = &e.session_key {
            if c.key_len() == 32 && sk.len() < 32 {
                // A 256-bit cipher needs the full (32-byte) session key.
                continue;
            }
            for &f311 in families(dialect) {
                if !f311 && c != Cipher::Aes128Ccm && dialect.is_some() {
                    continue;
                }
                if let Some((c2s, s2c)) = derive(sk, f311, c, preauth) {
                    let k = SessionKeys { cipher: c, client_to_server: c2s, server_to_client: s2c };
                    if !out.contains(&k) {
                        out.push(k);
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
