//! Avro names (the specification's "Names" section): how a named type's `name` and
//! `namespace` make its full name, and how a reference to a named type finds it.
//!
//! A full name is dotted: `com.acme.Address` has the namespace `com.acme` and the simple
//! name `Address`. A named type takes its namespace from, in order: a dot in its `name`
//! (the name is then already full), its own `namespace` attribute (`""` meaning none),
//! or the namespace of the named type it is written inside (the *enclosing* namespace).
//! A reference (`"type": "Address"`) is looked up in the enclosing namespace first, then
//! as written, so a type in no namespace can be used from inside one.

/// The eight primitive type names, which no named type may take.
pub const PRIMITIVES: [&str; 8] = [
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

/// Whether `name` is one of the primitive type names.
pub fn is_primitive(name: &str) -> bool {
    PRIMITIVES.contains(&name)
}

/// The full name of a type defined with `name` and (maybe) a `namespace` attribute, inside
/// the `enclosing` namespace (`""` for none). Checks every part is a valid Avro name.
pub fn full_name(name: &str, namespace: Option<&str>, enclosing: &str) -> Result<String, String> {
    let full = if name.contains('.') {
        name.to_owned()
    } else {
        match namespace.unwrap_or(enclosing) {
            "" => name.to_owned(),
            space => format!("{space}.{name}"),
        }
    };
    for part in full.split('.') {
        check_simple(part).map_err(|e| format!("name `{full}`: {e}"))?;
    }
    if is_primitive(&full) {
        return Err(format!(
            "a named type may not be called `{full}`, a primitive type's name"
        ));
    }
    Ok(full)
}

/// The namespace of a full name: everything before the last dot, `""` if none.
pub fn namespace_of(full: &str) -> &str {
    full.rsplit_once('.').map_or("", |(space, _)| space)
}

/// The full names a reference `name` written inside `enclosing` may mean, the first to
/// look up first: qualified by the enclosing namespace, then as written.
pub fn candidates(name: &str, enclosing: &str) -> Vec<String> {
    if name.contains('.') || enclosing.is_empty() {
        vec![name.to_owned()]
    } else {
        vec![format!("{enclosing}.{name}"), name.to_owned()]
    }
}

/// Checks a simple name (a field name, or one dot-separated part of a full name): a
/// letter or `_`, then letters, digits or `_`.
pub fn check_simple(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    match chars.next() {
        None => return Err("an empty name (or an empty part between dots)".into()),
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
        Some(c) => {
            return Err(format!("`{name}` starts with `{c}`, not a letter or `_`"));
        }
    }
    match chars.find(|c| !(c.is_ascii_alphanumeric() || *c == '_')) {
        Some(c) => Err(format!(
            "`{name}` has `{c}`; a name has only letters, digits and `_`"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_names_follow_the_namespace_rules() {
        assert_eq!(full_name("A", None, "").unwrap(), "A");
        assert_eq!(full_name("A", None, "com.acme").unwrap(), "com.acme.A");
        assert_eq!(full_name("A", Some("x.y"), "com.acme").unwrap(), "x.y.A");
        assert_eq!(full_name("A", Some(""), "com.acme").unwrap(), "A");
        assert_eq!(full_name("p.q.A", Some("x.y"), "com").unwrap(), "p.q.A");
        assert!(full_name("int", None, "").is_err());
        assert!(full_name("a-b", None, "").unwrap_err().contains("`-`"));
        assert!(full_name("A", Some("com..acme"), "").is_err());
        assert!(full_name("1A", None, "").is_err());
        assert_eq!(namespace_of("com.acme.A"), "com.acme");
        assert_eq!(namespace_of("A"), "");
        assert_eq!(candidates("A", "com"), vec!["com.A", "A"]);
        assert_eq!(candidates("x.A", "com"), vec!["x.A"]);
        assert_eq!(candidates("A", ""), vec!["A"]);
    }
}
