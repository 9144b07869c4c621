//! The footer check: a ledger's Parquet metadata is walked here, against the types
//! `parquet.thrift` (the Parquet format specification) gives its fields, before the `parquet`
//! crate parses it.
//!
//! Why: the crate reads a field it knows as the specification's type, whatever type the field's
//! header declares, at every level of the metadata: a `created_by` declared a boolean (no bytes)
//! it reads as a string, and what follows as nested collections (1-4 s each on four 3-6 KB
//! ledgers found by `ledger_inputs`; `Statistics.max` declared an i32 inside a row group's
//! column chunk is the same one level down). A writer never declares another type, so a field
//! whose declared type is not the specification's is refused with one line. Fields the table
//! does not name are skipped by their declared type, as the crate skips them.
//!
//! The walk is linear in the footer: every count and length is checked against the bytes
//! that hold it, every element takes at least one byte, and nesting is bounded.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::pages::{Thrift, T_BINARY, T_BYTE, T_DOUBLE, T_FALSE, T_I16, T_I32, T_I64, T_LIST, T_STRUCT, T_TRUE};

/// A field's type in `parquet.thrift` (enums are i32; strings are binary; unions are structs).
#[derive(Clone, Copy)]
enum Ty {
    Bool,
    Byte,
    I16,
    I32,
    I64,
    Double,
    Binary,
    List(&'static Ty),
    Struct(&'static Struct),
}

/// A struct (or union) of `parquet.thrift`: its name, for the message, and the fields the
/// check compares.
struct Struct {
    name: &'static str,
    fields: &'static [(i16, Ty)],
}

impl Ty {
    /// The compact protocol's type nibble (a boolean's is 1 or 2: the value is in the type).
    fn wire(self) -> u8 {
        match self {
            Ty::Bool => T_TRUE,
            Ty::Byte => T_BYTE,
            Ty::I16 => T_I16,
            Ty::I32 => T_I32,
            Ty::I64 => T_I64,
            Ty::Double => T_DOUBLE,
            Ty::Binary => T_BINARY,
            Ty::List(_) => T_LIST,
            Ty::Struct(_) => T_STRUCT,
        }
    }

    fn matches(self, ty: u8) -> bool {
        match self {
            Ty::Bool => ty == T_TRUE || ty == T_FALSE,
            _ => ty == self.wire(),
        }
    }

    fn describe(self) -> String {
        match self {
            Ty::Bool => format!("{T_TRUE} or {T_FALSE}"),
            t => t.wire().to_string(),
        }
    }
}

const fn st(name: &'static str, fields: &'static [(i16, Ty)]) -> Struct {
    Struct { name, fields }
}

const STRING: Ty = Ty::Binary;
/// An empty struct (a union member without fields: `StringType`, `TypeDefinedOrder`...).
static EMPTY: Struct = st("empty struct", &[]);
const E: Ty = Ty::Struct(&EMPTY);

static FILE_META_DATA: Struct = st(
    "FileMetaData",
    &[
        (1, Ty::I32),                                  // version
        (2, Ty::List(&Ty::Struct(&SCHEMA_ELEMENT))),   // schema
        (3, Ty::I64),                                  // num_rows
        (4, Ty::List(&Ty::Struct(&ROW_GROUP))),        // row_groups
        (5, Ty::List(&Ty::Struct(&KEY_VALUE))),        // key_value_metadata
        (6, STRING),                                   // created_by
        (7, Ty::List(&Ty::Struct(&COLUMN_ORDER))),     // column_orders
        (8, Ty::Struct(&ENCRYPTION_ALGORITHM)),        // encryption_algorithm
        (9, Ty::Binary),                               // footer_signing_key_metadata
    ],
);

static SCHEMA_ELEMENT: Struct = st(
    "SchemaElement",
    &[
        (1, Ty::I32),  // type
        (2, Ty::I32),  // type_length
        (3, Ty::I32),  // repetition_type
        (4, STRING),   // name
        (5, Ty::I32),  // num_children
        (6, Ty::I32),  // converted_type
        (7, Ty::I32),  // scale
        (8, Ty::I32),  // precision
        (9, Ty::I32),  // field_id
        (10, Ty::Struct(&LOGICAL_TYPE)),
    ],
);

/// A union: every member is a struct (most of them empty).
static LOGICAL_TYPE: Struct = st(
    "LogicalType",
    &[
        (1, E),                             // STRING
        (2, E),                             // MAP
        (3, E),                             // LIST
        (4, E),                             // ENUM
        (5, Ty::Struct(&DECIMAL_TYPE)),     // DECIMAL
        (6, E),                             // DATE
        (7, Ty::Struct(&TIME_TYPE)),        // TIME
        (8, Ty::Struct(&TIMESTAMP_TYPE)),   // TIMESTAMP
        (10, Ty::Struct(&INT_TYPE)),        // INTEGER
        (11, E),                            // UNKNOWN
        (12, E),                            // JSON
        (13, E),                            // BSON
        (14, E),                            // UUID
        (15, E),                            // FLOAT16
        (16, Ty::Struct(&VARIANT_TYPE)),    // VARIANT
        (17, Ty::Struct(&GEOMETRY_TYPE)),   // GEOMETRY
        (18, Ty::Struct(&GEOGRAPHY_TYPE)),  // GEOGRAPHY
        (19, E),                            // FILE (read by the crate as an empty struct)
    ],
);
static DECIMAL_TYPE: Struct = st("DecimalType", &[(1, Ty::I32), (2, Ty::I32)]);
static TIME_UNIT: Struct = st("TimeUnit", &[(1, E), (2, E), (3, E)]);
static TIME_TYPE: Struct = st("TimeType", &[(1, Ty::Bool), (2, Ty::Struct(&TIME_UNIT))]);
static TIMESTAMP_TYPE: Struct = st("TimestampType", &[(1, Ty::Bool), (2, Ty::Struct(&TIME_UNIT))]);
static INT_TYPE: Struct = st("IntType", &[(1, Ty::Byte), (2, Ty::Bool)]);
static VARIANT_TYPE: Struct = st("VariantType", &[(1, Ty::Byte)]);
static GEOMETRY_TYPE: Struct = st("GeometryType", &[(1, STRING)]);
static GEOGRAPHY_TYPE: Struct = st("GeographyType", &[(1, STRING), (2, Ty::I32)]);

static ROW_GROUP: Struct = st(
    "RowGroup",
    &[
        (1, Ty::List(&Ty::Struct(&COLUMN_CHUNK))),      // columns
        (2, Ty::I64),                                   // total_byte_size
        (3, Ty::I64),                                   // num_rows
        (4, Ty::List(&Ty::Struct(&SORTING_COLUMN))),    // sorting_columns
        (5, Ty::I64),                                   // file_offset
        (6, Ty::I64),                                   // total_compressed_size
        (7, Ty::I16),                                   // ordinal
    ],
);
static SORTING_COLUMN: Struct = st("SortingColumn", &[(1, Ty::I32), (2, Ty::Bool), (3, Ty::Bool)]);

static COLUMN_CHUNK: Struct = st(
    "ColumnChunk",
    &[
        (1, STRING),                                   // file_path
        (2, Ty::I64),                                  // file_offset
        (3, Ty::Struct(&COLUMN_META_DATA)),            // meta_data
        (4, Ty::I64),                                  // offset_index_offset
        (5, Ty::I32),                                  // offset_index_length
        (6, Ty::I64),                                  // column_index_offset
        (7, Ty::I32),                                  // column_index_length
        (8, Ty::Struct(&COLUMN_CRYPTO_META_DATA)),     // crypto_metadata
        (9, Ty::Binary),                               // encrypted_column_metadata
    ],
);

static COLUMN_META_DATA: Struct = st(
    "ColumnMetaData",
    &[
        (1, Ty::I32),                                      // type
        (2, Ty::List(&Ty::I32)),                           // encodings
        (3, Ty::List(&STRING)),                            // path_in_schema
        (4, Ty::I32),                                      // codec
        (5, Ty::I64),                                      // num_values
        (6, Ty::I64),                                      // total_uncompressed_size
        (7, Ty::I64),                                      // total_compressed_size
        (8, Ty::List(&Ty::Struct(&KEY_VALUE))),            // key_value_metadata
        (9, Ty::I64),                                      // data_page_offset
        (10, Ty::I64),                                     // index_page_offset
        (11, Ty::I64),                                     // dictionary_page_offset
        (12, Ty::Struct(&STATISTICS)),                     // statistics
        (13, Ty::List(&Ty::Struct(&PAGE_ENCODING_STATS))), // encoding_stats
        (14, Ty::I64),                                     // bloom_filter_offset
        (15, Ty::I32),                                     // bloom_filter_length
        (16, Ty::Struct(&SIZE_STATISTICS)),                // size_statistics
        (17, Ty::Struct(&GEOSPATIAL_STATISTICS)),          // geospatial_statistics
    ],
);

static STATISTICS: Struct = st(
    "Statistics",
    &[
        (1, Ty::Binary), // max
        (2, Ty::Binary), // min
        (3, Ty::I64),    // null_count
        (4, Ty::I64),    // distinct_count
        (5, Ty::Binary), // max_value
        (6, Ty::Binary), // min_value
        (7, Ty::Bool),   // is_max_value_exact
        (8, Ty::Bool),   // is_min_value_exact
        (9, Ty::I64),    // nan_count
    ],
);
static PAGE_ENCODING_STATS: Struct = st("PageEncodingStats", &[(1, Ty::I32), (2, Ty::I32), (3, Ty::I32)]);
static SIZE_STATISTICS: Struct =
    st("SizeStatistics", &[(1, Ty::I64), (2, Ty::List(&Ty::I64)), (3, Ty::List(&Ty::I64))]);
static GEOSPATIAL_STATISTICS: Struct =
    st("GeospatialStatistics", &[(1, Ty::Struct(&BOUNDING_BOX)), (2, Ty::List(&Ty::I32))]);
static BOUNDING_BOX: Struct = st(
    "BoundingBox",
    &[
        (1, Ty::Double),
        (2, Ty::Double),
        (3, Ty::Double),
        (4, Ty::Double),
        (5, Ty::Double),
        (6, Ty::Double),
        (7, Ty::Double),
        (8, Ty::Double),
    ],
);

static KEY_VALUE: Struct = st("KeyValue", &[(1, STRING), (2, STRING)]);
/// A union: TYPE_ORDER, IEEE_754_TOTAL_ORDER, INT96_TIMESTAMP_ORDER (empty structs, which the
/// crate reads as one stop byte whatever their declared type: found by `ledger_footer`).
static COLUMN_ORDER: Struct = st("ColumnOrder", &[(1, E), (2, E), (3, E)]);

/// A union: ENCRYPTION_WITH_FOOTER_KEY (empty), ENCRYPTION_WITH_COLUMN_KEY.
static COLUMN_CRYPTO_META_DATA: Struct =
    st("ColumnCryptoMetaData", &[(1, E), (2, Ty::Struct(&ENCRYPTION_WITH_COLUMN_KEY))]);
static ENCRYPTION_WITH_COLUMN_KEY: Struct =
    st("EncryptionWithColumnKey", &[(1, Ty::List(&STRING)), (2, Ty::Binary)]);
/// A union: AES_GCM_V1, AES_GCM_CTR_V1 (the same fields).
static ENCRYPTION_ALGORITHM: Struct =
    st("EncryptionAlgorithm", &[(1, Ty::Struct(&AES_GCM)), (2, Ty::Struct(&AES_GCM))]);
static AES_GCM: Struct = st("AesGcmV1", &[(1, Ty::Binary), (2, Ty::Binary), (3, Ty::Bool)]);

/// Checks a file's footer (`PAR1`, the Thrift-encoded metadata, its length, `PAR1`) before the
/// `parquet` crate parses it: well-formed compact protocol, nested at most `MAX_THRIFT_DEPTH`
/// deep, every count and length within its bytes, no collection of booleans (the crate gives
/// such elements no byte: `pages::no_boolean_elements`), and every field `parquet.thrift` names
/// of the type it gives (the crate's parser spins on a list whose count far exceeds its
/// bytes, 2^32 iterations, and reads a field it knows whatever its declared type: both
/// found by `ledger_inputs`).
pub(super) fn check_footer(file: &File, file_len: u64) -> Result<(), String> {
    if file_len < 12 {
        return Err(format!("{file_len} bytes, too short for Parquet"));
    }
    let mut tail = [0u8; 8];
    file.read_exact_at(&mut tail, file_len - 8).map_err(|e| format!("cannot read footer: {e}"))?;
    if &tail[4..] != b"PAR1" {
        return Err("no PAR1 at the end (not Parquet, or an encrypted footer)".into());
    }
    let meta_len = u64::from(u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")));
    if meta_len + 12 > file_len {
        return Err(format!("footer of {meta_len} bytes in a file of {file_len}"));
    }
    let mut meta = vec![0u8; meta_len as usize];
    file.read_exact_at(&mut meta, file_len - 8 - meta_len).map_err(|e| format!("cannot read footer: {e}"))?;
    check_metadata(&meta)
}

/// Checks the Thrift-encoded `FileMetaData` (see `check_footer`), then the schema's shape
/// (`schema_shape`).
pub(super) fn check_metadata(meta: &[u8]) -> Result<(), String> {
    let mut t = Thrift { data: meta, pos: 0 };
    walk_struct(&mut t, &FILE_META_DATA, 0)
        .and_then(|()| schema_shape(meta))
        .map_err(|e| format!("footer: {}", e.replace("page header", "metadata")))
}

/// Deepest schema tree accepted (a ledger's is one level: a root and its columns).
const MAX_SCHEMA_DEPTH: usize = 64;

/// The schema is a tree written depth first, each element giving its number of children
/// (`SchemaElement.num_children`). The crate reserves that many entries before reading them,
/// and recurses once per level: a forged count (671 million: 5 GB reserved at once, found by `ledger_footer`
/// in a 114-byte footer) or a chain of one-child groups (a recursion as deep as the schema is
/// long) must not reach it. So every count must be within the elements that follow it, and the
/// tree at most `MAX_SCHEMA_DEPTH` deep. Run after `walk_struct`, so the types are known good.
fn schema_shape(meta: &[u8]) -> Result<(), String> {
    let mut t = Thrift { data: meta, pos: 0 };
    let mut children: Vec<i32> = Vec::new();
    t.fields(0, |t, id, ty| {
        if id != 2 {
            return t.skip(ty, 0);
        }
        let (n, _) = t.list_header()?;
        for _ in 0..n {
            let mut c = 0;
            t.fields(2, |t, id, ty| if id == 5 { t.i32().map(|v| c = v) } else { t.skip(ty, 2) })?;
            children.push(c);
        }
        Ok(())
    })?;
    // Children still to come of each open group, innermost last.
    let mut open: Vec<i32> = Vec::new();
    for (i, &c) in children.iter().enumerate() {
        if let Some(left) = open.last_mut() {
            *left -= 1;
        }
        let after = children.len() - i - 1;
        if c < 0 || c as usize > after {
            return Err(format!("schema element {i} has {c} children, {after} elements follow it"));
        }
        if c > 0 {
            open.push(c);
            if open.len() > MAX_SCHEMA_DEPTH {
                return Err(format!("schema nested over {MAX_SCHEMA_DEPTH} levels deep"));
            }
        }
        while open.last() == Some(&0) {
            open.pop();
        }
    }
    Ok(())
}

/// One struct's fields up to its stop byte: those `s` names checked and walked by their
/// type, the others skipped by their declared type.
fn walk_struct(t: &mut Thrift, s: &Struct, depth: u32) -> Result<(), String> {
    t.fields(depth, |t, id, ty| match s.fields.iter().find(|(i, _)| *i == id) {
        Some(&(_, want)) if !want.matches(ty) => {
            Err(format!("{} field {id} has Thrift type {ty}, not {}", s.name, want.describe()))
        }
        // Where a nested refusal is, innermost first: "Statistics field 1 has Thrift type 5,
        // not 8, within ColumnMetaData.12 within ColumnChunk.3 ...".
        Some(&(_, want)) => walk_value(t, want, depth).map_err(|e| {
            let sep = if e.contains(", within ") { "" } else { "," };
            format!("{e}{sep} within {}.{id}", s.name)
        }),
        None => t.skip(ty, depth),
    })
}

/// One value of type `want`, whose declared type matched.
fn walk_value(t: &mut Thrift, want: Ty, depth: u32) -> Result<(), String> {
    match want {
        // A field's boolean is in its header.
        Ty::Bool => Ok(()),
        Ty::List(elem) => {
            let (n, et) = t.list_header()?;
            if n > 0 && et != elem.wire() {
                return Err(format!("list of Thrift type {et} elements, not {}", elem.wire()));
            }
            for _ in 0..n {
                // Each element takes at least one byte (no list here holds booleans), so a
                // forged count ends at the data's end.
                walk_value(t, *elem, depth + 1)?;
            }
            Ok(())
        }
        Ty::Struct(s) => walk_struct(t, s, depth + 1),
        scalar => t.skip_value(scalar.wire(), depth),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compact protocol: a field header with a short delta.
    fn fh(delta: u8, ty: u8) -> u8 {
        (delta << 4) | ty
    }

    #[test]
    fn walks_nested_fields_and_refuses_a_declared_type_the_specification_does_not_give() {
        // FileMetaData { 1: version = 1, 4: row_groups = [RowGroup { 1: columns = [ColumnChunk {
        //   2: file_offset = 4, 3: ColumnMetaData { 12: Statistics { 1: max = "ab", 7: true } } }],
        //   3: num_rows = 2 }] }
        let build = |stat_ty: u8, stat_bytes: &[u8]| {
            let mut m = vec![fh(1, T_I32), 2]; // version 1 (zigzag)
            m.extend([fh(3, T_LIST), 0x1c]); // row_groups: 1 struct
            m.extend([fh(1, T_LIST), 0x1c]); //   columns: 1 struct
            m.extend([fh(2, T_I64), 8]); //     file_offset 4
            m.extend([fh(1, T_STRUCT)]); //     meta_data
            m.extend([fh(12, T_STRUCT)]); //       statistics (field 12)
            m.push(fh(1, stat_ty)); //         field 1, max
            m.extend(stat_bytes);
            m.push(fh(6, T_TRUE)); //          field 7, is_max_value_exact
            m.push(0); //         end Statistics
            m.push(0); //       end ColumnMetaData
            m.push(0); //     end ColumnChunk
            m.extend([fh(2, T_I64), 4]); //   num_rows 2 (after field 1: delta 2)
            m.push(0); //   end RowGroup
            m.push(0); // end FileMetaData
            m
        };
        check_metadata(&build(T_BINARY, &[2, b'a', b'b'])).expect("well-typed metadata passes");
        // `max` declared an i32 (one varint byte): the crate would read it as a binary.
        let e = check_metadata(&build(T_I32, &[2])).expect_err("refused");
        assert!(e.contains("Statistics field 1 has Thrift type 5, not 8"), "{e}");
        assert!(e.ends_with("not 8, within ColumnMetaData.12 within ColumnChunk.3 within RowGroup.1 within FileMetaData.4"), "{e}");
        // Declared a boolean (no bytes at all).
        let e = check_metadata(&build(T_FALSE, &[])).expect_err("refused");
        assert!(e.contains("Statistics field 1 has Thrift type 2, not 8"), "{e}");
    }

    #[test]
    fn refuses_a_list_whose_elements_are_not_the_specifications() {
        // FileMetaData { 2: schema = list of 1 i32 } (a list<SchemaElement>).
        let e = check_metadata(&[fh(2, T_LIST), 0x15, 2, 0]).expect_err("refused");
        assert!(e.contains("list of Thrift type 5 elements, not 12"), "{e}");
        // An empty list of any element type is what the crate reads as empty too.
        check_metadata(&[fh(2, T_LIST), 0x05, 0]).expect("empty list passes");
        // A boolean field declared true or false both pass; declared a byte it is refused.
        for (b, ok) in [(T_TRUE, true), (T_FALSE, true), (T_BYTE, false)] {
            // RowGroup.sorting_columns = [SortingColumn { 2: descending }].
            let mut m = vec![fh(4, T_LIST), 0x1c, fh(4, T_LIST), 0x1c, fh(2, b)];
            if b == T_BYTE {
                m.push(1);
            }
            m.extend([0, 0, 0]);
            let r = check_metadata(&m);
            assert_eq!(r.is_ok(), ok, "{b}: {r:?}");
            if let Err(e) = r {
                assert!(e.contains("SortingColumn field 2 has Thrift type 3, not 1 or 2"), "{e}");
            }
        }
    }

    /// FileMetaData { 2: schema = elements with `num_children` from `kids` (None: absent) }.
    fn schema(kids: &[Option<i32>]) -> Vec<u8> {
        let mut m = vec![fh(2, T_LIST)];
        if kids.len() < 15 {
            m.push(((kids.len() as u8) << 4) | T_STRUCT);
        } else {
            m.push(0xf0 | T_STRUCT);
            let mut n = kids.len();
            while n >= 0x80 {
                m.push((n as u8 & 0x7f) | 0x80);
                n >>= 7;
            }
            m.push(n as u8);
        }
        for k in kids {
            m.extend([fh(4, T_BINARY), 1, b'x']); // name "x"
            if let Some(k) = k {
                let z = ((i64::from(*k) << 1) ^ (i64::from(*k) >> 63)) as u64;
                m.push(fh(1, T_I32));
                let mut z = z;
                while z >= 0x80 {
                    m.push((z as u8 & 0x7f) | 0x80);
                    z >>= 7;
                }
                m.push(z as u8);
            }
            m.push(0);
        }
        m.push(0);
        m
    }

    #[test]
    fn the_schema_tree_is_within_its_elements_and_not_too_deep() {
        // A root of two columns, one a group of two; leaves with 0 or no count.
        check_metadata(&schema(&[Some(2), None, Some(2), Some(0), None])).expect("a well-formed tree");
        // A count past the elements after it (the crate would reserve 2^31 entries first).
        let e = check_metadata(&schema(&[Some(i32::MAX), None])).expect_err("refused");
        assert!(e.contains("schema element 0 has 2147483647 children, 1 elements follow it"), "{e}");
        let e = check_metadata(&schema(&[Some(2), Some(-1), None])).expect_err("refused");
        assert!(e.contains("schema element 1 has -1 children"), "{e}");
        // A chain of one-child groups: 64 levels pass, 65 do not.
        let chain = |n: usize| (0..n).map(|_| Some(1)).chain([None]).collect::<Vec<_>>();
        check_metadata(&schema(&chain(MAX_SCHEMA_DEPTH))).expect("64 levels");
        let e = check_metadata(&schema(&chain(MAX_SCHEMA_DEPTH + 1))).expect_err("refused");
        assert!(e.contains("schema nested over 64 levels deep"), "{e}");
    }

    #[test]
    fn unknown_fields_are_skipped_by_their_declared_type() {
        // FileMetaData { 20: i64 3 (long form: type, then the id zigzag), 7: column_orders =
        // [ColumnOrder { 4: binary "x" }] (long form: ids go down), 9: binary "" }.
        let m = [0x06u8, 40, 6, 0x09, 14, 0x1c, fh(4, T_BINARY), 1, b'x', 0, fh(2, T_BINARY), 0, 0];
        check_metadata(&m).expect("unknown fields skipped");
    }

    /// What the `parquet` writer puts in a footer, with everything it can put there (logical
    /// types, statistics, size statistics, page encoding stats, column and offset indexes,
    /// sorting columns, key-value metadata, column orders) passes: the table agrees with a
    /// real writer. (Files of other writers: `apache/parquet-testing`, README.)
    #[test]
    fn a_footer_the_parquet_writer_makes_with_every_feature_passes() {
        use parquet::data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type};
        use parquet::file::metadata::{KeyValue, SortingColumn};
        use parquet::file::properties::{EnabledStatistics, WriterProperties};
        use parquet::file::writer::SerializedFileWriter;
        use parquet::schema::parser::parse_message_type;
        use std::sync::Arc;
        let schema = "message m {
            required int64 ts (TIMESTAMP(NANOS, true));
            optional int32 day (DATE);
            required int32 small (INTEGER(8, false));
            optional int64 price (DECIMAL(18, 2));
            required binary name (STRING);
            optional binary doc (JSON);
            optional group tags (LIST) { repeated group list { optional binary element (STRING); } }
        }";
        let props = WriterProperties::builder()
            .set_statistics_enabled(EnabledStatistics::Page)
            .set_key_value_metadata(Some(vec![KeyValue::new("k".into(), Some("v".to_string())), KeyValue::new("n".into(), None)]))
            .set_sorting_columns(Some(vec![SortingColumn { column_idx: 0, descending: true, nulls_first: false }]))
            .set_created_by("smbwire footer test".into())
            .build();
        let mut buf = Vec::new();
        let mut w = SerializedFileWriter::new(&mut buf, Arc::new(parse_message_type(schema).unwrap()), Arc::new(props)).unwrap();
        for _ in 0..2 {
            let mut rg = w.next_row_group().unwrap();
            let mut k = 0;
            while let Some(mut col) = rg.next_column().unwrap() {
                match k {
                    0 => col.typed::<Int64Type>().write_batch(&[3, 1, 2], None, None).unwrap(),
                    1 => col.typed::<Int32Type>().write_batch(&[7, 8], Some(&[1, 0, 1]), None).unwrap(),
                    2 => col.typed::<Int32Type>().write_batch(&[1, 2, 3], None, None).unwrap(),
                    3 => col.typed::<Int64Type>().write_batch(&[100, 250], Some(&[1, 1, 0]), None).unwrap(),
                    4 => col.typed::<ByteArrayType>().write_batch(&[ByteArray::from("a"), ByteArray::from("b"), ByteArray::from("c")], None, None).unwrap(),
                    5 => col.typed::<ByteArrayType>().write_batch(&[ByteArray::from("{}")], Some(&[0, 1, 0]), None).unwrap(),
                    _ => col
                        .typed::<ByteArrayType>()
                        .write_batch(&[ByteArray::from("x"), ByteArray::from("y")], Some(&[3, 3, 0, 1]), Some(&[0, 1, 0, 0]))
                        .unwrap(),
                };
                col.close().unwrap();
                k += 1;
            }
            rg.close().unwrap();
        }
        w.close().unwrap();
        let n = buf.len();
        let meta_len = u32::from_le_bytes(buf[n - 8..n - 4].try_into().unwrap()) as usize;
        let meta = &buf[n - 8 - meta_len..n - 8];
        check_metadata(meta).expect("the writer's footer passes");
        // It holds what the test means it to: statistics, sorting columns, key-values, orders.
        let dir = std::env::temp_dir().join(format!("smbwire-footer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f.parquet");
        std::fs::write(&p, &buf).unwrap();
        let f = File::open(&p).unwrap();
        check_footer(&f, n as u64).expect("from the file too");
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let r = SerializedFileReader::new(f).unwrap();
        let md = r.metadata();
        assert_eq!(md.num_row_groups(), 2);
        assert!(md.row_group(0).column(0).statistics().is_some());
        assert!(md.row_group(0).sorting_columns().is_some());
        assert_eq!(md.file_metadata().key_value_metadata().map(|k| k.len()), Some(2));
        assert!(md.file_metadata().column_orders().is_some());
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Footers of thirteen other writers (`vectors/README.md`) pass, and the `parquet` crate
    /// reads them; the one refused, the crate refuses too.
    #[test]
    fn other_writers_footers_pass() {
        use parquet::file::reader::SerializedFileReader;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ledger/vectors");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_none_or(|x| x != "parquet") {
                continue;
            }
            n += 1;
            let f = File::open(&p).unwrap();
            let len = f.metadata().unwrap().len();
            let ours = check_footer(&f, len);
            let crate_reads = SerializedFileReader::new(f).is_ok();
            if p.file_name().unwrap() == "dict-page-offset-zero.parquet" {
                let e = ours.expect_err("refused");
                assert!(e.starts_with("footer: ColumnMetaData field 15 has Thrift type 9, not 5, within ColumnChunk.3"), "{e}");
                assert!(!crate_reads, "the crate refuses it too");
            } else {
                assert!(ours.is_ok(), "{}: {ours:?}", p.display());
                assert!(crate_reads, "{}", p.display());
            }
        }
        assert_eq!(n, 13);
    }
}
