//! What we do with each SMB2 message once its header and the part of its body we need are
//! buffered: update sessions/trees/files (`state`), join responses to requests, count, and
//! say whether the message carries a payload to hash and which send it completes.
//! Framing and byte handling are in `stream`; layouts are in `records`.

use super::records::{self as rec, command, status, HeaderRepr};
use super::state::{kept_name, ConnInfo, Pending, SmbState};
use crate::anomaly::Anomalies;
use std::sync::Arc;
use super::Anomaly;

/// FileId value meaning "the file of the previous operation in this compound" (§3.2.4.1.4).
const FILE_ID_RELATED: [u8; 16] = [0xFF; 16];

/// Identity carried along a compound chain, for elements with RELATED_OPERATIONS (§3.2.4.1.4,
/// §3.3.5.2.7.2): they inherit SessionId, TreeId and FileId from the previous element.
#[derive(Debug, Clone, Default)]
pub struct ChainCtx {
    pub session_id: u64,
    pub tree_id: u32,
    pub file_id: Option<[u8; 16]>,
    /// Name from a CREATE request earlier in the chain (its FileId is not known yet).
    pub create_name: Option<Arc<str>>,
}

/// What a payload send needs besides its bytes.
#[derive(Debug, Clone)]
pub struct PayloadMeta {
    pub message_id: u64,
    pub session_id: u64,
    pub tree_id: u32,
    pub file_id: [u8; 16],
    pub offset: u64,
    pub share: Option<Arc<str>>,
    pub file_name: Option<Arc<str>>,
}

/// The outcome of handling one message.
#[derive(Debug, Default)]
pub struct Action {
    /// The WRITE request / READ response whose data follows.
    pub payload: Option<PayloadMeta>,
    /// MessageId of a WRITE/READ whose final response this is.
    pub completes: Option<u64>,
}

/// Handles one message. `msg` holds its header and as much of the body as was buffered;
/// `inline`: its WRITE or READ data follows inline, to be hashed (`Action::payload`). Without
/// it (an RDMA channel, a bad data offset) the payload's names are not looked up: SMB Direct
/// looks them up itself when it registers the RDMA transfer, and a `--threads` worker's
/// lookup that no send takes would be one the ordered stage could pair with another send of
/// that MessageId (found by fuzz/differential.py).
pub fn handle(conn: u64, h: &HeaderRepr, msg: &[u8], chain: &mut ChainCtx, smb: &mut SmbState, an: &mut Anomalies, inline: bool) -> Action {
    let resp = h.is_response();
    smb.count_command(h.command, resp);
    if command::name(h.command).is_none() {
        an.raise(Anomaly::UnknownCommand);
    }
    // Resolve identity (related elements inherit it).
    let related = h.is_related();
    let session_id = if related && h.session_id == u64::MAX { chain.session_id } else { h.session_id };
    let tree_id = match h.tree_id {
        Some(t) if related && t == u32::MAX => chain.tree_id,
        Some(t) => t,
        None => chain.tree_id,
    };
    chain.session_id = session_id;
    chain.tree_id = tree_id;
    let resolve = |chain: &ChainCtx, fid: [u8; 16]| -> [u8; 16] {
        if fid == FILE_ID_RELATED {
            chain.file_id.unwrap_or(fid)
        } else {
            fid
        }
    };
    let mut act = Action::default();
    let ok = h.status == status::SUCCESS;
    // Failed responses carry an ERROR response body (§2.2.2) instead of the command's.
    let error_body = resp && !ok && rec::ErrorResponse::parse(msg).is_ok();
    let report = |an: &mut Anomalies, r: rec::Result<()>| {
        if let Err(e) = r {
            an.raise(e);
        }
    };

    match (h.command, resp) {
        (command::NEGOTIATE, false) => report(an, rec::NegotiateRequest::parse(msg).map(|_| ())),
        (command::NEGOTIATE, true) if ok => match rec::NegotiateResponse::parse(msg) {
            Ok(n) => {
                let c = n.contexts.unwrap_or_default();
                let info = ConnInfo {
                    dialect: n.dialect_revision,
                    max_size: n.max_transact_size.max(n.max_read_size).max(n.max_write_size),
                    cipher: c.ciphers.first().copied(),
                    compression_algorithms: c.compression_algorithms,
                    rdma_transform_ids: c.rdma_transform_ids,
                    server_guid: n.server_guid,
                };
                smb.set_negotiated(conn, info, an);
            }
            Err(e) => an.raise(e),
        },
        (command::SESSION_SETUP, false) => match rec::SessionSetupRequest::parse(msg) {
            Ok(s) if s.flags & rec::SessionSetupRequest::FLAG_BINDING != 0 => smb.note_binding_request(conn, h.message_id, an),
            Ok(_) => {}
            Err(e) => an.raise(e),
        },
        (command::SESSION_SETUP, true) => {
            if ok {
                report(an, rec::SessionSetupResponse::parse(msg).map(|_| ()));
                smb.session_established(conn, h.message_id, session_id, an);
            } else if h.status != status::MORE_PROCESSING_REQUIRED {
                smb.session_failed(conn, h.message_id);
            }
        }
        (command::LOGOFF, true) if ok => smb.logoff(conn, session_id),
        (command::TREE_CONNECT, false) => match rec::TreeConnectRequest::parse(msg) {
            Ok(t) => smb.add_pending(conn, h.message_id, Pending::TreeConnect { path: kept_name(&t.path, an) }, an),
            Err(e) => an.raise(e),
        },
        (command::TREE_CONNECT, true) => {
            let path = match smb.take_pending(conn, h.message_id) {
                Some(Pending::TreeConnect { path }) => Some(path),
                _ => None,
            };
            if ok {
                report(an, rec::TreeConnectResponse::parse(msg).map(|_| ()));
                match (path, h.tree_id) {
                    (Some(p), Some(t)) => smb.tree_connected(conn, session_id, t, p, an),
                    // Request not seen (capture began later): count, share stays unknown.
                    _ => smb.stats.trees += 1,
                }
            }
        }
        (command::TREE_DISCONNECT, true) if ok => smb.tree_disconnected(conn, session_id, tree_id),
        (command::CREATE, false) => match rec::CreateRequest::parse(msg) {
            Ok(c) => {
                let name: Arc<str> = kept_name(&c.name, an);
                smb.note_file_name(&name, an);
                smb.add_pending(conn, h.message_id, Pending::Create { name: name.clone() }, an);
                chain.create_name = Some(name);
                chain.file_id = None;
            }
            Err(e) => an.raise(e),
        },
        (command::CREATE, true) => {
            let name = match smb.take_pending(conn, h.message_id) {
                Some(Pending::Create { name }) => Some(name),
                _ => None,
            };
            if ok {
                match rec::CreateResponse::parse(msg) {
                    Ok(c) => {
                        if let Some(n) = name {
                            smb.file_opened(conn, c.file_id, n, an);
                        }
                        chain.file_id = Some(c.file_id);
                    }
                    Err(e) => an.raise(e),
                }
            }
        }
        (command::CLOSE, false) => match rec::CloseRequest::parse(msg) {
            Ok(c) => smb.add_pending(conn, h.message_id, Pending::Close { file_id: resolve(chain, c.file_id) }, an),
            Err(e) => an.raise(e),
        },
        (command::CLOSE, true) => {
            if let Some(Pending::Close { file_id }) = smb.take_pending(conn, h.message_id) {
                if ok {
                    smb.file_closed(conn, &file_id);
                }
            }
        }
        (command::READ, false) => match rec::ReadRequest::parse(msg) {
            Ok(r) => {
                let file_id = resolve(chain, r.file_id);
                chain.file_id = Some(file_id);
                let p = Pending::Read { session_id, tree_id, file_id, offset: r.offset, length: r.length };
                smb.add_pending(conn, h.message_id, p, an);
            }
            Err(e) => an.raise(e),
        },
        (command::READ, true) => {
            smb.stats.read_resp_pdus += 1;
            if !h.is_interim() {
                let data = rec::ReadResponse::parse(msg).ok();
                if let (true, Some(d)) = (ok, data) {
                    smb.stats.read_bytes += d.data_length as u64;
                }
                let read = smb.take_pending(conn, h.message_id);
                let (file_id, offset, rtree) = match read {
                    Some(Pending::Read { file_id, offset, tree_id, .. }) => (file_id, offset, tree_id),
                    _ => {
                        an.raise(Anomaly::ReadResponseWithoutRequest);
                        ([0; 16], crate::payload::send::UNKNOWN_OFFSET, tree_id)
                    }
                };
                if data.is_some() && inline {
                    let (share, file_name) = smb.payload_names(conn, h.message_id, true, session_id, rtree, &file_id, None);
                    act.payload = Some(PayloadMeta {
                        message_id: h.message_id,
                        session_id,
                        tree_id: rtree,
                        file_id,
                        offset,
                        share,
                        file_name,
                    });
                }
                act.completes = Some(h.message_id);
            }
        }
        (command::WRITE, false) => match rec::WriteRequest::parse(msg) {
            Ok(w) => {
                smb.stats.write_req_pdus += 1;
                smb.stats.write_bytes += w.length as u64;
                let raw = w.file_id;
                let file_id = resolve(chain, raw);
                chain.file_id = Some(file_id);
                if inline {
                    let related = if raw == FILE_ID_RELATED { chain.create_name.clone() } else { None };
                    let (share, file_name) = smb.payload_names(conn, h.message_id, false, session_id, tree_id, &file_id, related);
                    act.payload = Some(PayloadMeta {
                        message_id: h.message_id,
                        session_id,
                        tree_id,
                        file_id,
                        offset: w.offset,
                        share,
                        file_name,
                    });
                }
            }
            Err(e) => an.raise(e),
        },
        (command::WRITE, true) if !h.is_interim() => {
            if ok {
                report(an, rec::WriteResponse::parse(msg).map(|_| ()));
            }
            act.completes = Some(h.message_id);
        }
        (command::TREE_DISCONNECT, _) | (command::LOGOFF, _) if !error_body && h.status == status::SUCCESS => {
            report(an, rec::parse_empty_body(msg))
        }
        _ => {}
    }
    act
}
