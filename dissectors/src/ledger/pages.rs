//! The ledger reader's own Parquet page decoding: column chunks are read, their page headers
//! parsed (Thrift compact protocol), their pages decompressed and their values decoded here,
//! with every length checked against the bytes that hold it. Only the footer is parsed by the
//! `parquet` crate.
//!
//! Why: ledgers come from users (and `--dask` parts from other machines), so a damaged or forged
//! file is normal input. The crate's column readers panic on some malformed pages (a plain
//! byte-array page holding fewer values than its header counts; a negative column offset; a
//! dictionary-encoded page without a dictionary) and size buffers from header fields
//! (a page's uncompressed size: up to 2 GiB zeroed per page). Found by the `ledger_inputs`
//! fuzz target; `ledger::tests::every_corruption_is_read_or_refused_never_a_panic`.
//!
//! What is read (the Parquet format specification, `parquet.thrift` and `Encodings.md`): data
//! pages v1 and v2, one dictionary page before them; values PLAIN or dictionary indices
//! (PLAIN_DICTIONARY / RLE_DICTIONARY, RLE/bit-packed hybrid); definition levels RLE (the
//! ledger's optional columns have one level, no repetition); Snappy or no compression. That is
//! every layout the `parquet` writer gives a ledger (`ledger::tests::reads_every_page_layout`);
//! anything else is refused with one line.
//!
//! Memory: one column chunk of one row group (its bytes, at most the file's) plus its pages
//! decompressed; a page's uncompressed size is checked against what its compressed bytes can
//! expand to before anything is allocated.

use std::fs::File;
use std::os::unix::fs::FileExt;

use bytes::Bytes;
use parquet::basic::Compression;
use parquet::data_type::ByteArray;
use parquet::file::metadata::ColumnChunkMetaData;

// parquet.thrift: PageType, Encoding.
const PAGE_DATA: i32 = 0;
const PAGE_DICTIONARY: i32 = 2;
const PAGE_DATA_V2: i32 = 3;
const ENC_PLAIN: i32 = 0;
const ENC_PLAIN_DICTIONARY: i32 = 2;
const ENC_RLE: i32 = 3;
const ENC_RLE_DICTIONARY: i32 = 8;

/// Largest page the reader decompresses (the writer's pages are about 1 MiB; one value, a
/// send's block digests, is at most 16 bytes per 4 KiB of payload).
const MAX_PAGE_BYTES: usize = 256 << 20;
/// Snappy output per input byte is below 22 (a 3-byte copy element yields at most 64 bytes).
const SNAPPY_MAX_RATIO: usize = 22;
/// Nesting the Thrift skipper follows (a page header's statistics are two levels deep).
pub(super) const MAX_THRIFT_DEPTH: u32 = 16;

/// One value type of the ledger's columns, as PLAIN encodes it.
pub(super) trait Value: Sized + Clone {
    /// Least bytes one PLAIN value takes (bounds a dictionary's count before allocating).
    const MIN_BYTES: usize;
    fn plain(buf: &Bytes, pos: &mut usize) -> Option<Self>;
}

fn take<const N: usize>(buf: &Bytes, pos: &mut usize) -> Option<[u8; N]> {
    let b: [u8; N] = buf.get(*pos..pos.checked_add(N)?)?.try_into().ok()?;
    *pos += N;
    Some(b)
}

impl Value for i32 {
    const MIN_BYTES: usize = 4;
    fn plain(buf: &Bytes, pos: &mut usize) -> Option<Self> {
        take::<4>(buf, pos).map(i32::from_le_bytes)
    }
}

impl Value for i64 {
    const MIN_BYTES: usize = 8;
    fn plain(buf: &Bytes, pos: &mut usize) -> Option<Self> {
        take::<8>(buf, pos).map(i64::from_le_bytes)
    }
}

impl Value for ByteArray {
    const MIN_BYTES: usize = 4;
    fn plain(buf: &Bytes, pos: &mut usize) -> Option<Self> {
        let mut p = *pos;
        let len = u32::from_le_bytes(take::<4>(buf, &mut p)?) as usize;
        let end = p.checked_add(len).filter(|e| *e <= buf.len())?;
        *pos = end;
        Some(ByteArray::from(buf.slice(p..end)))
    }
}

/// A column chunk's values, and its definition levels when the column is optional (0: null,
/// 1: a value; `values` holds only the defined ones).
pub(super) struct Column<T> {
    pub values: Vec<T>,
    pub defs: Vec<i16>,
}

/// Reads one column chunk of `rows` rows. Errors are one line, without the file's name.
pub(super) fn read_column<T: Value>(
    file: &File,
    file_len: u64,
    chunk: &ColumnChunkMetaData,
    optional: bool,
    rows: usize,
) -> Result<Column<T>, String> {
    let snappy = match chunk.compression() {
        Compression::UNCOMPRESSED => false,
        Compression::SNAPPY => true,
        c => return Err(format!("compression {c} (a ledger is Snappy or uncompressed)")),
    };
    let start = match chunk.dictionary_page_offset() {
        Some(d) if d > 0 && d < chunk.data_page_offset() => d,
        _ => chunk.data_page_offset(),
    };
    let len = chunk.compressed_size();
    let (Ok(start), Ok(len)) = (u64::try_from(start), u64::try_from(len)) else {
        return Err(format!("chunk at {start} of {len} bytes"));
    };
    if start.checked_add(len).is_none_or(|end| end > file_len) {
        return Err(format!("chunk at {start} of {len} bytes is past the file's end ({file_len})"));
    }
    let mut raw = vec![0u8; len as usize];
    file.read_exact_at(&mut raw, start).map_err(|e| format!("cannot read chunk: {e}"))?;
    let raw = Bytes::from(raw);

    let mut col = Column { values: Vec::with_capacity(rows), defs: Vec::with_capacity(if optional { rows } else { 0 }) };
    let mut dict: Option<Vec<T>> = None;
    let mut levels = 0usize;
    let mut pos = 0usize;
    while levels < rows {
        if pos >= raw.len() {
            return Err(format!("ends after {levels} of {rows} values"));
        }
        let (h, hlen) = PageHeader::parse(&raw[pos..])?;
        pos += hlen;
        let size = usize::try_from(h.compressed_size).ok().filter(|s| *s <= raw.len() - pos);
        let Some(size) = size else {
            return Err(format!("page of {} bytes at chunk byte {pos}, past the chunk's end", h.compressed_size));
        };
        let body = raw.slice(pos..pos + size);
        pos += size;
        match h.kind {
            PAGE_DICTIONARY => {
                let Some(d) = h.dictionary else { return Err("dictionary page without its header".into()) };
                if dict.is_some() || levels > 0 {
                    return Err("a second dictionary page, or one after data pages".into());
                }
                if d.encoding != ENC_PLAIN && d.encoding != ENC_PLAIN_DICTIONARY {
                    return Err(format!("dictionary encoding {}", d.encoding));
                }
                let buf = decompress(body, 0, h.uncompressed_size, snappy)?;
                let n = usize::try_from(d.num_values).ok().filter(|n| *n <= buf.len() / T::MIN_BYTES);
                let Some(n) = n else { return Err(format!("dictionary of {} values in {} bytes", d.num_values, buf.len())) };
                let mut p = 0;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(T::plain(&buf, &mut p).ok_or_else(|| format!("dictionary ends before its {n} values"))?);
                }
                dict = Some(v);
            }
            PAGE_DATA => {
                let Some(d) = h.data else { return Err("data page without its header".into()) };
                let n = page_count(d.num_values, rows - levels)?;
                let buf = decompress(body, 0, h.uncompressed_size, snappy)?;
                let mut p = 0usize;
                let present = if optional {
                    if d.def_encoding != ENC_RLE {
                        return Err(format!("definition level encoding {}", d.def_encoding));
                    }
                    let l = take::<4>(&buf, &mut p).map(u32::from_le_bytes).ok_or("page ends in its levels' length")?;
                    let end = p.checked_add(l as usize).filter(|e| *e <= buf.len()).ok_or("levels past the page's end")?;
                    let present = def_levels(&buf[p..end], n, &mut col.defs)?;
                    p = end;
                    present
                } else {
                    n
                };
                values(&buf, p, d.encoding, present, dict.as_deref(), &mut col.values)?;
                levels += n;
            }
            PAGE_DATA_V2 => {
                let Some(d) = h.data_v2 else { return Err("data page v2 without its header".into()) };
                let n = page_count(d.num_values, rows - levels)?;
                if d.rep_len != 0 {
                    return Err(format!("{} bytes of repetition levels (no ledger column repeats)", d.rep_len));
                }
                let def_len = usize::try_from(d.def_len).ok().filter(|l| *l <= body.len());
                let Some(def_len) = def_len else { return Err(format!("{} bytes of levels in a page of {}", d.def_len, body.len())) };
                let nulls = usize::try_from(d.num_nulls).ok().filter(|k| *k <= n).ok_or("more nulls than values")?;
                let present = if optional {
                    let p = def_levels(&body[..def_len], n, &mut col.defs)?;
                    if p != n - nulls {
                        return Err(format!("{p} values defined, the header says {}", n - nulls));
                    }
                    p
                } else if def_len != 0 || nulls != 0 {
                    return Err("levels or nulls in a required column".into());
                } else {
                    n
                };
                let buf = if d.compressed { decompress(body, def_len, h.uncompressed_size, snappy)? } else { body.slice(def_len..) };
                values(&buf, 0, d.encoding, present, dict.as_deref(), &mut col.values)?;
                levels += n;
            }
            k => return Err(format!("page type {k}")),
        }
    }
    Ok(col)
}

/// A data page's value count: positive and within the rows still to read.
fn page_count(num_values: i32, left: usize) -> Result<usize, String> {
    usize::try_from(num_values)
        .ok()
        .filter(|n| *n > 0 && *n <= left)
        .ok_or_else(|| format!("data page of {num_values} values where {left} remain"))
}

/// The page's bytes after `levels` uncompressed bytes (v2 keeps its levels uncompressed),
/// decompressed to `uncompressed` bytes in all, which is checked before allocating.
fn decompress(body: Bytes, levels: usize, uncompressed: i32, snappy: bool) -> Result<Bytes, String> {
    let total = usize::try_from(uncompressed).ok().filter(|u| *u >= levels && *u <= MAX_PAGE_BYTES);
    let Some(total) = total else { return Err(format!("page of {uncompressed} bytes uncompressed")) };
    let data = body.slice(levels..);
    let want = total - levels;
    if !snappy {
        if data.len() != want {
            return Err(format!("uncompressed page of {} bytes, its header says {want}", data.len()));
        }
        return Ok(data);
    }
    if want == 0 && data.is_empty() {
        return Ok(data);
    }
    let claimed = snap::raw::decompress_len(&data).map_err(|e| format!("Snappy page: {e}"))?;
    if claimed != want || want > data.len().saturating_mul(SNAPPY_MAX_RATIO) + 64 {
        return Err(format!("Snappy page of {} bytes expanding to {claimed}, its header says {want}", data.len()));
    }
    let mut out = vec![0u8; want];
    let got = snap::raw::Decoder::new().decompress(&data, &mut out).map_err(|e| format!("Snappy page: {e}"))?;
    if got != want {
        return Err(format!("Snappy page expands to {got} bytes, its header says {want}"));
    }
    Ok(Bytes::from(out))
}

/// `n` definition levels (bit width 1) appended to `defs`; the count of defined ones.
fn def_levels(data: &[u8], n: usize, defs: &mut Vec<i16>) -> Result<usize, String> {
    let mut present = 0;
    hybrid(data, 1, n, |v| {
        if v > 1 {
            return Err(format!("definition level {v}"));
        }
        present += v as usize;
        defs.push(v as i16);
        Ok(())
    })?;
    Ok(present)
}

/// `n` values of one page from `buf[p..]`, PLAIN or dictionary indices, appended to `out`.
fn values<T: Value>(buf: &Bytes, mut p: usize, encoding: i32, n: usize, dict: Option<&[T]>, out: &mut Vec<T>) -> Result<(), String> {
    match encoding {
        ENC_PLAIN => {
            for i in 0..n {
                out.push(T::plain(buf, &mut p).ok_or_else(|| format!("page ends after {i} of its {n} values"))?);
            }
            Ok(())
        }
        ENC_PLAIN_DICTIONARY | ENC_RLE_DICTIONARY => {
            let dict = dict.ok_or("dictionary indices without a dictionary page")?;
            if n == 0 {
                return Ok(());
            }
            let width = *buf.get(p).ok_or("page ends before its index width")?;
            if width > 32 {
                return Err(format!("dictionary index width {width}"));
            }
            hybrid(&buf[p + 1..], width, n, |i| {
                let v = dict.get(i as usize).ok_or_else(|| format!("dictionary index {i} of {}", dict.len()))?;
                out.push(v.clone());
                Ok(())
            })
        }
        e => Err(format!("value encoding {e}")),
    }
}

/// ULEB-128 of at most 32 bits.
fn uleb32(data: &[u8], pos: &mut usize) -> Result<u32, String> {
    let mut v = 0u64;
    for shift in (0..35).step_by(7) {
        let b = *data.get(*pos).ok_or("run header past the end")?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return u32::try_from(v).map_err(|_| "run header over 32 bits".to_string());
        }
    }
    Err("run header over 5 bytes".into())
}

/// The RLE / bit-packing hybrid (Parquet Encodings.md): exactly `n` values of `width` bits,
/// each handed to `f`. Runs are `header` then either one value repeated `header >> 1` times
/// (its `ceil(width / 8)` bytes, little-endian) or `header >> 1` groups of 8 values packed
/// least significant bit first. The last run may hold more than needed (padding).
fn hybrid(data: &[u8], width: u8, n: usize, mut f: impl FnMut(u32) -> Result<(), String>) -> Result<(), String> {
    let width = usize::from(width);
    let mut pos = 0usize;
    let mut left = n;
    while left > 0 {
        let header = uleb32(data, &mut pos)?;
        let count = (header >> 1) as usize;
        if header & 1 == 0 {
            let nbytes = width.div_ceil(8);
            let bytes = data.get(pos..pos + nbytes).ok_or("run value past the end")?;
            pos += nbytes;
            let mut v = 0u32;
            for (i, b) in bytes.iter().enumerate() {
                v |= u32::from(*b) << (8 * i);
            }
            if width < 32 && v >> width != 0 {
                return Err(format!("run value {v} wider than {width} bits"));
            }
            let k = count.min(left);
            for _ in 0..k {
                f(v)?;
            }
            left -= k;
        } else {
            let nbytes = count.checked_mul(width).ok_or("packed run too long")?;
            let bits = data.get(pos..pos.checked_add(nbytes).ok_or("packed run too long")?).ok_or("packed run past the end")?;
            pos += nbytes;
            let k = (count * 8).min(left);
            let mask = if width == 32 { u64::from(u32::MAX) } else { (1u64 << width) - 1 };
            for i in 0..k {
                // A value of up to 32 bits starting at any bit lies within 5 bytes.
                let bit = i * width;
                let mut w = 0u64;
                for (b, byte) in bits[bit / 8..].iter().take(5).enumerate() {
                    w |= u64::from(*byte) << (8 * b);
                }
                f(((w >> (bit % 8)) & mask) as u32)?;
            }
            left -= k;
        }
    }
    Ok(())
}

/// The fields of a page header (parquet.thrift `PageHeader`) the reader uses.
#[derive(Debug, Default, PartialEq)]
struct PageHeader {
    kind: i32,
    uncompressed_size: i32,
    compressed_size: i32,
    data: Option<DataHeader>,
    dictionary: Option<DictHeader>,
    data_v2: Option<DataHeaderV2>,
}

#[derive(Debug, Default, PartialEq)]
struct DataHeader {
    num_values: i32,
    encoding: i32,
    def_encoding: i32,
}

#[derive(Debug, Default, PartialEq)]
struct DictHeader {
    num_values: i32,
    encoding: i32,
}

#[derive(Debug, PartialEq)]
struct DataHeaderV2 {
    num_values: i32,
    num_nulls: i32,
    encoding: i32,
    def_len: i32,
    rep_len: i32,
    compressed: bool,
}

impl PageHeader {
    /// Parses a header from the front of `data`: the header and its length in bytes. Every
    /// required field must be present (each flag below is set when its field is read).
    fn parse(data: &[u8]) -> Result<(PageHeader, usize), String> {
        let mut t = Thrift { data, pos: 0 };
        let mut h = PageHeader::default();
        let mut seen = 0u32;
        t.fields(0, |t, id, ty| {
            match (id, ty) {
                (1, T_I32) => h.kind = t.i32()?,
                (2, T_I32) => h.uncompressed_size = t.i32()?,
                (3, T_I32) => h.compressed_size = t.i32()?,
                (5, T_STRUCT) => {
                    let mut d = DataHeader::default();
                    let mut s = 0u32;
                    t.fields(1, |t, id, ty| {
                        match (id, ty) {
                            (1, T_I32) => d.num_values = t.i32()?,
                            (2, T_I32) => d.encoding = t.i32()?,
                            (3, T_I32) => d.def_encoding = t.i32()?,
                            (4, T_I32) => {
                                t.i32()?;
                            }
                            _ => return t.skip(ty, 1),
                        }
                        s |= 1 << id;
                        Ok(())
                    })?;
                    if s & 0b11110 != 0b11110 {
                        return Err("data page header without its required fields".into());
                    }
                    h.data = Some(d);
                }
                (7, T_STRUCT) => {
                    let mut d = DictHeader::default();
                    let mut s = 0u32;
                    t.fields(1, |t, id, ty| {
                        match (id, ty) {
                            (1, T_I32) => d.num_values = t.i32()?,
                            (2, T_I32) => d.encoding = t.i32()?,
                            _ => return t.skip(ty, 1),
                        }
                        s |= 1 << id;
                        Ok(())
                    })?;
                    if s != 0b110 {
                        return Err("dictionary page header without its required fields".into());
                    }
                    h.dictionary = Some(d);
                }
                (8, T_STRUCT) => {
                    let mut d = DataHeaderV2 { num_values: 0, num_nulls: 0, encoding: 0, def_len: 0, rep_len: 0, compressed: true };
                    let mut s = 0u32;
                    t.fields(1, |t, id, ty| {
                        match (id, ty) {
                            (1, T_I32) => d.num_values = t.i32()?,
                            (2, T_I32) => d.num_nulls = t.i32()?,
                            (3, T_I32) => {
                                t.i32()?;
                            }
                            (4, T_I32) => d.encoding = t.i32()?,
                            (5, T_I32) => d.def_len = t.i32()?,
                            (6, T_I32) => d.rep_len = t.i32()?,
                            (7, T_TRUE) => d.compressed = true,
                            (7, T_FALSE) => d.compressed = false,
                            _ => return t.skip(ty, 1),
                        }
                        s |= 1 << id;
                        Ok(())
                    })?;
                    if s & 0b1111110 != 0b1111110 {
                        return Err("data page v2 header without its required fields".into());
                    }
                    h.data_v2 = Some(d);
                }
                _ => return t.skip(ty, 0),
            }
            seen |= 1 << id;
            Ok(())
        })?;
        if seen & 0b1110 != 0b1110 {
            return Err("page header without its type and sizes".into());
        }
        Ok((h, t.pos))
    }
}

// Thrift compact protocol types (in a field header's low nibble).
pub(super) const T_TRUE: u8 = 1;
pub(super) const T_FALSE: u8 = 2;
pub(super) const T_BYTE: u8 = 3;
pub(super) const T_I16: u8 = 4;
pub(super) const T_I32: u8 = 5;
pub(super) const T_I64: u8 = 6;
pub(super) const T_DOUBLE: u8 = 7;
pub(super) const T_BINARY: u8 = 8;
pub(super) const T_LIST: u8 = 9;
pub(super) const T_SET: u8 = 10;
pub(super) const T_MAP: u8 = 11;
pub(super) const T_STRUCT: u8 = 12;

/// A Thrift compact-protocol reader over a byte slice: every read is bounds-checked, nesting is
/// limited, and a count can only make it read further, never allocate.
/// Refuses a collection whose elements are booleans. The compact protocol's specification gives
/// each such element a byte; the `parquet` crate's skipping gives it none, so the bytes this walk
/// skips as booleans the crate reads as field headers, which may declare 2^31 more booleans that
/// take it seconds to skip (found by `ledger_inputs`: six 3-5 KB ledgers of 0.7 s each, several
/// such lists in a footer would make it minutes). Neither the footer (`FileMetaData`) nor a page
/// header holds a collection of booleans, so nothing a Parquet writer makes is refused.
fn no_boolean_elements(ty: u8) -> Result<(), String> {
    match ty {
        T_TRUE | T_FALSE => Err("page header collection of booleans (none in Parquet metadata)".into()),
        _ => Ok(()),
    }
}

pub(super) struct Thrift<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
}

impl Thrift<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self.data.get(self.pos).ok_or("page header past the chunk's end")?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("page header varint over 10 bytes".into())
    }

    fn zigzag(&mut self) -> Result<i64, String> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    pub(super) fn i32(&mut self) -> Result<i32, String> {
        let v = self.zigzag()?;
        i32::try_from(v).map_err(|_| format!("page header i32 of {v}"))
    }

    /// A list's or set's header: its element count (in the high nibble, or a varint after it
    /// when the nibble is 15) and its element type.
    pub(super) fn list_header(&mut self) -> Result<(u64, u8), String> {
        let h = self.byte()?;
        let n = if h >> 4 == 15 { self.varint()? } else { u64::from(h >> 4) };
        Ok((n, h & 0x0f))
    }

    /// The fields of one struct, each handed to `f` with its id and type, up to its stop byte.
    pub(super) fn fields(&mut self, depth: u32, mut f: impl FnMut(&mut Self, i16, u8) -> Result<(), String>) -> Result<(), String> {
        if depth > MAX_THRIFT_DEPTH {
            return Err("page header nested too deep".into());
        }
        let mut last = 0i16;
        loop {
            let b = self.byte()?;
            if b == 0 {
                return Ok(());
            }
            let ty = b & 0x0f;
            let delta = b >> 4;
            let id = if delta != 0 {
                last.checked_add(i16::from(delta)).ok_or("page header field id overflow")?
            } else {
                i16::try_from(self.zigzag()?).map_err(|_| "page header field id over 16 bits")?
            };
            if !(0..32).contains(&id) {
                // Unknown to the reader either way: skip it (ids above 31 are not ours).
                self.skip(ty, depth)?;
            } else {
                f(self, id, ty)?;
            }
            last = id;
        }
    }

    /// Skips one value of type `ty` (a field's; booleans are in the type itself).
    pub(super) fn skip(&mut self, ty: u8, depth: u32) -> Result<(), String> {
        match ty {
            T_TRUE | T_FALSE => Ok(()),
            _ => self.skip_value(ty, depth),
        }
    }

    /// Skips one value of type `ty` as a collection element (booleans take a byte).
    pub(super) fn skip_value(&mut self, ty: u8, depth: u32) -> Result<(), String> {
        if depth > MAX_THRIFT_DEPTH {
            return Err("page header nested too deep".into());
        }
        match ty {
            T_TRUE | T_FALSE | T_BYTE => self.byte().map(|_| ()),
            T_I16 | T_I32 | T_I64 => self.varint().map(|_| ()),
            T_DOUBLE => (0..8).try_for_each(|_| self.byte().map(|_| ())),
            T_BINARY => {
                let n = self.varint()?;
                let end = usize::try_from(n).ok().and_then(|n| self.pos.checked_add(n)).filter(|e| *e <= self.data.len());
                self.pos = end.ok_or("page header string past the chunk's end")?;
                Ok(())
            }
            T_LIST | T_SET => {
                let (n, et) = self.list_header()?;
                if n > 0 {
                    no_boolean_elements(et)?;
                }
                for _ in 0..n {
                    // Each element takes at least one byte, so a forged count ends at the data's end.
                    self.skip_value(et, depth + 1)?;
                }
                Ok(())
            }
            T_MAP => {
                let n = self.varint()?;
                if n == 0 {
                    return Ok(());
                }
                let kv = self.byte()?;
                no_boolean_elements(kv >> 4)?;
                no_boolean_elements(kv & 0x0f)?;
                for _ in 0..n {
                    self.skip_value(kv >> 4, depth + 1)?;
                    self.skip_value(kv & 0x0f, depth + 1)?;
                }
                Ok(())
            }
            T_STRUCT => self.fields(depth + 1, |t, _, ty| t.skip(ty, depth + 1)),
            t => Err(format!("page header value of Thrift type {t}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zz(v: i64) -> Vec<u8> {
        let mut u = ((v << 1) ^ (v >> 63)) as u64;
        let mut out = Vec::new();
        loop {
            let b = (u & 0x7f) as u8;
            u >>= 7;
            if u == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    /// A v1 data page header in the compact protocol, as a writer encodes it.
    fn data_header(uncompressed: i32, compressed: i32, num_values: i32, encoding: i32) -> Vec<u8> {
        let mut h = vec![0x15];
        h.extend(zz(0));
        h.push(0x15);
        h.extend(zz(uncompressed.into()));
        h.push(0x15);
        h.extend(zz(compressed.into()));
        h.push(0x2c); // field 5, struct
        for v in [num_values, encoding, ENC_RLE, ENC_RLE] {
            h.push(0x15);
            h.extend(zz(v.into()));
        }
        h.extend([0, 0]);
        h
    }

    #[test]
    fn parses_a_data_page_header_and_skips_what_it_does_not_use() {
        let mut h = data_header(100, 90, 7, ENC_PLAIN);
        // Statistics (field 5 of the data page header) and an unknown field 9 with a list.
        let end = h.len() - 2;
        let stats = [0x1c, 0x18, 0x02, b'a', b'b', 0x16, 0x04, 0x00];
        h.splice(end..end, stats);
        let end = h.len() - 1;
        h.splice(end..end, [0x19, 0x25, 0x02, 0x04]);
        let (p, n) = PageHeader::parse(&h).unwrap();
        assert_eq!(n, h.len());
        assert_eq!((p.kind, p.uncompressed_size, p.compressed_size), (PAGE_DATA, 100, 90));
        assert_eq!(p.data, Some(DataHeader { num_values: 7, encoding: ENC_PLAIN, def_encoding: ENC_RLE }));
        for cut in 0..h.len() {
            assert!(PageHeader::parse(&h[..cut]).is_err(), "a header cut at {cut} is refused");
        }
    }

    #[test]
    fn refuses_a_header_without_its_sizes_or_nested_without_end() {
        assert!(PageHeader::parse(&[0x15, 0x00, 0x00]).is_err());
        // Struct fields nested 100 deep: refused by depth, not by the stack.
        let mut h = vec![0x15, 0x00, 0x15, 0x02, 0x15, 0x02];
        h.extend(std::iter::repeat_n(0x1c, 100));
        let e = PageHeader::parse(&h).unwrap_err();
        assert!(e.contains("nested") || e.contains("past"), "{e}");
        // A list claiming 2^32 elements ends at the data's end.
        let h = [0x15, 0x00, 0x15, 0x02, 0x15, 0x02, 0x99, 0xf5, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert!(PageHeader::parse(&h).is_err());
    }

    #[test]
    fn hybrid_decodes_rle_and_packed_runs() {
        // RLE: 3 x 1; packed: 1 group (8 values of width 3) = 0..8; RLE 2 x 5.
        let mut data = vec![3 << 1, 1, (1 << 1) | 1];
        let mut bits = 0u32;
        for v in 0..8u32 {
            bits |= v << (3 * v);
        }
        data.extend(&bits.to_le_bytes()[..3]);
        data.extend([2 << 1, 5]);
        let mut out = Vec::new();
        hybrid(&data, 3, 13, |v| {
            out.push(v);
            Ok(())
        })
        .unwrap();
        assert_eq!(out, [1, 1, 1, 0, 1, 2, 3, 4, 5, 6, 7, 5, 5]);
        for cut in 0..data.len() {
            assert!(hybrid(&data[..cut], 3, 13, |_| Ok(())).is_err(), "cut at {cut}");
        }
        assert!(hybrid(&[2 << 1, 9], 3, 2, |_| Ok(())).is_err(), "a run value wider than its width");
        assert!(hybrid(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], 1, 1, |_| Ok(())).is_err(), "header over 32 bits");
    }

    #[test]
    fn decompress_checks_sizes_before_allocating() {
        let page = snap::raw::Encoder::new().compress_vec(&[7u8; 5000]).unwrap();
        let body = Bytes::from(page.clone());
        assert_eq!(decompress(body.clone(), 0, 5000, true).unwrap().len(), 5000);
        for claimed in [4999, 5001, i32::MAX, -1] {
            assert!(decompress(body.clone(), 0, claimed, true).is_err(), "{claimed}");
        }
        // A Snappy stream whose own length field says 1 GiB: refused before any buffer.
        let mut forged = vec![0x80, 0x80, 0x80, 0x80, 0x04];
        forged.extend(&page[2..]);
        assert!(decompress(Bytes::from(forged), 0, 1 << 30, true).is_err());
        assert!(decompress(Bytes::from_static(b"abc"), 0, 4, false).is_err());
        assert_eq!(decompress(Bytes::from_static(b"xxabc"), 2, 5, false).unwrap(), Bytes::from_static(b"abc"));
    }

    #[test]
    fn plain_values_stop_at_the_end() {
        let mut b = 3u32.to_le_bytes().to_vec();
        b.extend(b"abc");
        b.extend(2u32.to_le_bytes());
        b.push(b'x');
        let buf = Bytes::from(b);
        let mut out: Vec<ByteArray> = Vec::new();
        let e = values(&buf, 0, ENC_PLAIN, 2, None, &mut out).unwrap_err();
        assert!(e.contains("after 1 of its 2"), "{e}");
        assert_eq!(out[0].data(), b"abc");
        let mut ints: Vec<i64> = Vec::new();
        assert!(values(&Bytes::from_static(&[1, 2, 3]), 0, ENC_PLAIN, 1, None, &mut ints).is_err());
        let e = values(&Bytes::from_static(&[1, 2, 1]), 0, ENC_RLE_DICTIONARY, 1, None::<&[i64]>, &mut ints).unwrap_err();
        assert!(e.contains("without a dictionary"), "{e}");
        let dict = [10i64, 20];
        values(&Bytes::from_static(&[1, 2 << 1, 1]), 0, ENC_RLE_DICTIONARY, 2, Some(&dict), &mut ints).unwrap();
        assert_eq!(ints, [20, 20]);
        assert!(values(&Bytes::from_static(&[2, 2 << 1, 2]), 0, ENC_RLE_DICTIONARY, 1, Some(&dict), &mut ints).is_err());
    }
}
