//! Reads `bpf/smbwire.h` for the build script (`build.rs` includes this file), which generates
//! `crate::abi` from it; compiled into the crate only for its tests.

/// A `struct smbwire_*` of `smbwire.h`: its name, and its fields' names, offsets and the size.
pub struct Layout {
    pub name: String,
    pub fields: Vec<(String, usize)>,
    pub size: usize,
}

/// The integer `#define SMBWIRE_*`s and the `struct smbwire_*` layouts of `smbwire.h`. The
/// header is ours and small, so this reads exactly the forms it uses (decimal or hex values,
/// `__u8`..`__u64` fields and arrays of them) and panics on anything else, so a new form is
/// taught here rather than skipped.
pub fn parse_abi(header: &str) -> (Vec<(String, u64)>, Vec<Layout>) {
    // Comments out first (block comments span lines).
    let mut text = String::with_capacity(header.len());
    let mut rest = header;
    while let Some(i) = rest.find("/*") {
        text.push_str(&rest[..i]);
        let end = rest[i..].find("*/").expect("smbwire.h: unterminated comment");
        rest = &rest[i + end + 2..];
    }
    text.push_str(rest);
    let mut defines = Vec::new();
    let mut layouts = Vec::new();
    let mut current: Option<(Layout, usize)> = None;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(def) = line.strip_prefix("#define ") {
            let mut parts = def.split_whitespace();
            let name = parts.next().unwrap_or_default();
            let Some(value) = parts.next() else { continue }; // the include guard
            assert!(parts.next().is_none(), "smbwire.h: #define {name}: one integer expected");
            assert!(name.starts_with("SMBWIRE_"), "smbwire.h: #define {name}: not SMBWIRE_*");
            let v = match value.strip_prefix("0x").or_else(|| value.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => value.parse(),
            };
            defines.push((name.to_string(), v.unwrap_or_else(|_| panic!("smbwire.h: #define {name} {value}: not an integer"))));
        } else if line.starts_with('#') {
            continue;
        } else if let Some(head) = line.strip_prefix("struct ").and_then(|l| l.strip_suffix('{')) {
            assert!(current.is_none(), "smbwire.h: nested struct");
            let name = head.trim();
            assert!(name.starts_with("smbwire_"), "smbwire.h: struct {name}: not smbwire_*");
            current = Some((Layout { name: name.to_string(), fields: Vec::new(), size: 0 }, 1));
        } else if line == "};" {
            let (mut l, align) = current.take().expect("smbwire.h: '};' outside a struct");
            l.size = l.size.div_ceil(align) * align;
            layouts.push(l);
        } else if let Some((l, align)) = current.as_mut() {
            let decl = line.strip_suffix(';').unwrap_or_else(|| panic!("smbwire.h: {line}: one field per line"));
            let (ty, name) = decl.split_once(char::is_whitespace).unwrap_or_else(|| panic!("smbwire.h: {line}"));
            let width = match ty {
                "__u8" => 1,
                "__u16" => 2,
                "__u32" => 4,
                "__u64" => 8,
                _ => panic!("smbwire.h: {line}: field type {ty} not known here"),
            };
            let name = name.trim();
            let (name, count) = match name.split_once('[') {
                Some((n, c)) => {
                    let c = c.strip_suffix(']').unwrap_or_else(|| panic!("smbwire.h: {line}"));
                    (n, c.parse::<usize>().unwrap_or_else(|_| panic!("smbwire.h: {line}: array length")))
                }
                None => (name, 1),
            };
            assert!(
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "smbwire.h: {line}: one field name expected"
            );
            let offset = l.size.div_ceil(width) * width;
            l.fields.push((name.to_string(), offset));
            l.size = offset + width * count;
            *align = (*align).max(width);
        } else {
            panic!("smbwire.h: {line}: not a #define or a struct");
        }
    }
    assert!(current.is_none(), "smbwire.h: unterminated struct");
    (defines, layouts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defines_and_naturally_aligned_layouts() {
        let (defines, layouts) = parse_abi(
            "/* a\n comment */\n#ifndef SMBWIRE_H\n#define SMBWIRE_H\n#define SMBWIRE_A 66048 /* why */\n\
             #define SMBWIRE_B 0x8915\nstruct smbwire_x {\n\t__u8 a[3]; /* c */\n\t__u32 b;\n\t__u16 c;\n\
             \t__u64 d;\n\t__u8 e;\n};\n#endif\n",
        );
        assert_eq!(defines, vec![("SMBWIRE_A".to_string(), 66048), ("SMBWIRE_B".to_string(), 0x8915)]);
        assert_eq!(layouts.len(), 1);
        let l = &layouts[0];
        assert_eq!(l.name, "smbwire_x");
        let offsets: Vec<(&str, usize)> = l.fields.iter().map(|(n, o)| (n.as_str(), *o)).collect();
        assert_eq!(offsets, vec![("a", 0), ("b", 4), ("c", 8), ("d", 16), ("e", 24)]);
        // Padded to its widest member.
        assert_eq!(l.size, 32);
    }

    #[test]
    fn the_real_header_reads() {
        let (defines, layouts) = parse_abi(include_str!("../../../bpf/smbwire.h"));
        assert!(defines.iter().any(|(n, v)| n == "SMBWIRE_MAX_TUNNELS" && *v == 2));
        let names: Vec<&str> = layouts.iter().map(|l| l.name.as_str()).collect();
        assert!(names.contains(&"smbwire_event_hdr") && names.contains(&"smbwire_totals"), "{names:?}");
    }

    #[test]
    fn forms_not_known_here_are_refused() {
        for bad in [
            "#define SMBWIRE_W (128 << 10)\n",
            "#define OTHER 1\n",
            "struct smbwire_y {\n\tint a;\n};\n",
            "struct smbwire_y {\n\t__u32 a, b;\n};\n",
            "struct smbwire_y {\n\t__u32 a;\n",
            "static int x;\n",
        ] {
            assert!(std::panic::catch_unwind(|| parse_abi(bad)).is_err(), "{bad}");
        }
    }
}
