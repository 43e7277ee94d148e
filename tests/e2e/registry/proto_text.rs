//! A Protobuf schema registered as a base64 `FileDescriptorProto` (what the confluent-kafka
//! Python serializers send) rendered as `.proto` text, as Confluent's registry answers
//! it by default (`?format=serialized` gives the base64 form back).
//!
//! Covers what decoding needs: syntax, package, imports, messages (nested), fields with
//! their labels, types and proto2 defaults, `optional` in proto3, oneofs, maps, enums.
//! Options, services, extensions and reserved ranges are left out. Groups and editions
//! are not rendered: [`render`] refuses them, and the registry keeps the text as sent.

/// The `.proto` text of the base64 `FileDescriptorProto` `text`, or `None` when `text` is
/// not one (then it is kept as it came: already `.proto` text, or something else).
pub fn render(text: &str) -> Option<String> {
    let bytes = base64_decode(text.trim())?;
    let file = Fields::parse(&bytes)?;
    let syntax = file.string(12).unwrap_or_else(|| "proto2".into());
    if syntax != "proto2" && syntax != "proto3" {
        return None;
    }
    let proto3 = syntax == "proto3";
    // A file descriptor has a name; random base64 text rarely parses as one that has.
    file.string(1)?;
    let mut out = format!("syntax = \"{syntax}\";\n");
    if let Some(package) = file.string(2) {
        out.push_str(&format!("package {package};\n"));
    }
    let public = file.varints(10);
    for (i, dependency) in file.strings(3).iter().enumerate() {
        let public = public.contains(&u64::try_from(i).ok()?);
        let kind = if public { "import public" } else { "import" };
        out.push_str(&format!("{kind} \"{}\";\n", escape(dependency.as_bytes())));
    }
    for message in file.messages(4)? {
        out.push('\n');
        render_message(&message, proto3, 0, &mut out)?;
    }
    for enumeration in file.messages(5)? {
        out.push('\n');
        render_enum(&enumeration, 0, &mut out)?;
    }
    Some(out)
}

fn indent(depth: usize) -> String {
    "  ".repeat(depth)
}

fn render_message(message: &Fields, proto3: bool, depth: usize, out: &mut String) -> Option<()> {
    let pad = indent(depth);
    out.push_str(&format!("{pad}message {} {{\n", message.string(1)?));
    let nested = message.messages(3)?;
    // Map entries are written as map<K, V> fields, not as messages.
    let map_entries: Vec<(String, &Fields)> = nested
        .iter()
        .filter(|n| n.message(7).is_some_and(|o| o.varint(7) == Some(1)))
        .filter_map(|n| Some((n.string(1)?, n)))
        .collect();
    for inner in &nested {
        if !map_entries
            .iter()
            .any(|(_, entry)| std::ptr::eq(*entry, inner))
        {
            render_message(inner, proto3, depth + 1, out)?;
        }
    }
    for enumeration in message.messages(4)? {
        render_enum(&enumeration, depth + 1, out)?;
    }
    let fields = message.messages(2)?;
    let oneofs: Vec<String> = message
        .messages(8)?
        .iter()
        .map(|o| o.string(1))
        .collect::<Option<_>>()?;
    let inner_pad = indent(depth + 1);
    // Fields in order; the members of a (real) oneof together, where its first stands.
    let mut done_oneofs = Vec::new();
    for field in &fields {
        let synthetic = field.varint(17) == Some(1);
        match field.varint(9).filter(|_| !synthetic) {
            None => {
                let line = field_line(field, proto3, &map_entries, message)?;
                out.push_str(&format!("{inner_pad}{line}\n"));
            }
            Some(index) if done_oneofs.contains(&index) => {}
            Some(index) => {
                done_oneofs.push(index);
                let name = oneofs.get(usize::try_from(index).ok()?)?;
                out.push_str(&format!("{inner_pad}oneof {name} {{\n"));
                for member in fields.iter().filter(|f| f.varint(9) == Some(index)) {
                    let line = field_line(member, true, &map_entries, message)?;
                    out.push_str(&format!("{}{line}\n", indent(depth + 2)));
                }
                out.push_str(&format!("{inner_pad}}}\n"));
            }
        }
    }
    out.push_str(&format!("{pad}}}\n"));
    Some(())
}

/// `[label] type name = number [default = …];` (a oneof member passes `proto3` true: no
/// label).
fn field_line(
    field: &Fields,
    proto3: bool,
    map_entries: &[(String, &Fields)],
    parent: &Fields,
) -> Option<String> {
    let name = field.string(1)?;
    let number = field.varint(3)?;
    let label = field.varint(4).unwrap_or(1);
    let type_name = field.string(6);
    let kind = field.varint(5);
    // A map field: repeated, of a nested map-entry message.
    if label == 3
        && let Some(type_name) = &type_name
    {
        let parent_name = parent.string(1)?;
        let short = type_name.rsplit('.').next()?;
        let is_parents = type_name
            .strip_suffix(short)
            .is_some_and(|prefix| prefix.trim_end_matches('.').ends_with(parent_name.as_str()));
        if let Some((_, entry)) = map_entries.iter().find(|(n, _)| n == short && is_parents) {
            let entry_fields = entry.messages(2)?;
            let key = entry_fields.iter().find(|f| f.varint(3) == Some(1))?;
            let value = entry_fields.iter().find(|f| f.varint(3) == Some(2))?;
            return Some(format!(
                "map<{}, {}> {name} = {number};",
                type_of(key)?,
                type_of(value)?
            ));
        }
    }
    let label = match (label, proto3, field.varint(17) == Some(1)) {
        (3, _, _) => "repeated ",
        (2, _, _) => "required ",
        (_, true, true) => "optional ",
        (_, true, false) => "",
        _ => "optional ",
    };
    let default = match field.string(7) {
        Some(value) if kind == Some(9) => format!(" [default = \"{}\"]", escape(value.as_bytes())),
        // Bytes defaults are C-escaped already.
        Some(value) if kind == Some(12) => format!(" [default = \"{value}\"]"),
        Some(value) => format!(" [default = {value}]"),
        None => String::new(),
    };
    Some(format!(
        "{label}{} {name} = {number}{default};",
        type_of(field)?
    ))
}

/// The field's type as `.proto` writes it; `None` for a group.
fn type_of(field: &Fields) -> Option<String> {
    let scalar = match field.varint(5)? {
        1 => "double",
        2 => "float",
        3 => "int64",
        4 => "uint64",
        5 => "int32",
        6 => "fixed64",
        7 => "fixed32",
        8 => "bool",
        9 => "string",
        12 => "bytes",
        13 => "uint32",
        15 => "sfixed32",
        16 => "sfixed64",
        17 => "sint32",
        18 => "sint64",
        11 | 14 => return field.string(6),
        _ => return None,
    };
    Some(scalar.to_string())
}

fn render_enum(enumeration: &Fields, depth: usize, out: &mut String) -> Option<()> {
    let pad = indent(depth);
    out.push_str(&format!("{pad}enum {} {{\n", enumeration.string(1)?));
    if enumeration
        .message(3)
        .is_some_and(|o| o.varint(2) == Some(1))
    {
        out.push_str(&format!(
            "{}option allow_alias = true;\n",
            indent(depth + 1)
        ));
    }
    for value in enumeration.messages(2)? {
        // int32, negative ones as 64-bit two's complement varints.
        let number = value.varint(2).unwrap_or(0) as i64 as i32;
        out.push_str(&format!(
            "{}{} = {number};\n",
            indent(depth + 1),
            value.string(1)?
        ));
    }
    out.push_str(&format!("{pad}}}\n"));
    Some(())
}

/// A string literal's content, escaped.
fn escape(bytes: &[u8]) -> String {
    let mut out = String::new();
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out
}

/// One protobuf message's fields, by number, in order: varints and length-delimited
/// bytes (fixed32/fixed64 values are skipped; descriptors hold none that matter here).
struct Fields {
    varints: Vec<(u64, u64)>,
    bytes: Vec<(u64, Vec<u8>)>,
}

impl Fields {
    fn parse(mut data: &[u8]) -> Option<Fields> {
        let mut fields = Fields {
            varints: Vec::new(),
            bytes: Vec::new(),
        };
        while !data.is_empty() {
            let key = varint(&mut data)?;
            let number = key >> 3;
            match key & 7 {
                0 => fields.varints.push((number, varint(&mut data)?)),
                1 => data = data.get(8..)?,
                2 => {
                    let len = usize::try_from(varint(&mut data)?).ok()?;
                    // Checked against what is left before anything is taken.
                    let value = data.get(..len)?;
                    fields.bytes.push((number, value.to_vec()));
                    data = data.get(len..)?;
                }
                5 => data = data.get(4..)?,
                _ => return None,
            }
        }
        Some(fields)
    }

    fn varint(&self, number: u64) -> Option<u64> {
        self.varints
            .iter()
            .rev()
            .find(|(n, _)| *n == number)
            .map(|(_, v)| *v)
    }

    fn varints(&self, number: u64) -> Vec<u64> {
        self.varints
            .iter()
            .filter(|(n, _)| *n == number)
            .map(|(_, v)| *v)
            .collect()
    }

    fn strings(&self, number: u64) -> Vec<String> {
        self.bytes
            .iter()
            .filter(|(n, _)| *n == number)
            .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
            .collect()
    }

    fn string(&self, number: u64) -> Option<String> {
        self.strings(number).pop()
    }

    fn messages(&self, number: u64) -> Option<Vec<Fields>> {
        self.bytes
            .iter()
            .filter(|(n, _)| *n == number)
            .map(|(_, b)| Fields::parse(b))
            .collect()
    }

    fn message(&self, number: u64) -> Option<Fields> {
        self.messages(number)?.pop()
    }
}

fn varint(data: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = data.split_first()?;
        *data = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Standard base64 (padding optional); `None` for anything else.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() / 4 * 3 + 3);
    let mut buffer = 0u32;
    let mut bits = 0;
    for c in text.bytes() {
        let sextet = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(sextet);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// check/order.proto as confluent-kafka 2.16.1's ProtobufSerializer registers it
    /// (deliver/produce_check.py).
    const ORDER: &str = "ChFjaGVjay9vcmRlci5wcm90bxIFY2hlY2saH2dvb2dsZS9wcm90b2J1Zi90aW1lc3RhbXAucHJvdG8aFGNoZWNrL2N1c3RvbWVyLnByb3RvIiAKBExpbmUSCwoDc2t1GAEgASgJEgsKA3F0eRgCIAEoBSJ+CgVPcmRlchIKCgJpZBgBIAEoAxIqCgZwbGFjZWQYAiABKAsyGi5nb29nbGUucHJvdG9idWYuVGltZXN0YW1wEiEKCGN1c3RvbWVyGAMgASgLMg8uY2hlY2suQ3VzdG9tZXISGgoFbGluZXMYBCADKAsyCy5jaGVjay5MaW5lYgZwcm90bzM=";

    #[test]
    fn renders_the_python_clients_descriptor() {
        let text = render(ORDER).unwrap();
        assert_eq!(
            text,
            "syntax = \"proto3\";\npackage check;\nimport \"google/protobuf/timestamp.proto\";\nimport \"check/customer.proto\";\n\nmessage Line {\n  string sku = 1;\n  int32 qty = 2;\n}\n\nmessage Order {\n  int64 id = 1;\n  .google.protobuf.Timestamp placed = 2;\n  .check.Customer customer = 3;\n  repeated .check.Line lines = 4;\n}\n"
        );
    }

    proptest::proptest! {
        /// Arbitrary bytes, as a descriptor, render or are refused, never panic.
        #[test]
        fn any_bytes_render_or_are_refused(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = Fields::parse(&bytes);
            let _ = render(&base64(&bytes));
        }

        /// Arbitrary text never panics either.
        #[test]
        fn any_text_renders_or_is_refused(text in ".{0,200}") {
            let _ = render(&text);
        }
    }

    fn base64(bytes: &[u8]) -> String {
        super::super::base64(bytes)
    }

    #[test]
    fn proto_text_and_garbage_are_not_descriptors() {
        assert_eq!(render("syntax = \"proto3\"; message A {}"), None);
        assert_eq!(render("AAAA"), None);
        assert_eq!(render(""), None);
        assert_eq!(base64_decode("YWI="), Some(b"ab".to_vec()));
    }
}
