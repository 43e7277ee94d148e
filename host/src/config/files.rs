//! The files a configuration refers to (plugins, `schema:` files, `.avsc` files, TLS
//! files), as paths: a relative one is resolved against the configuration file's
//! directory, so that it names the same file whatever the process's working directory.
//!
//! Nothing here opens them. `config` reads and checks text only; the files are read by the
//! code that uses them, and probed when a file is loaded to run or to validate
//! (`server/referenced_files.rs` for schema, Avro and TLS files, `cli/validate.rs` for
//! plugins).

use std::path::Path;

use super::Config;

/// Resolves the relative paths of a configuration loaded from `path` against the file's
/// directory: plugins, `schema:` files, `.avsc` files, TLS files.
pub(super) fn resolve_relative_paths(config: &mut Config, path: &Path) {
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    for connector in &mut config.connectors {
        for transform in &mut connector.transforms {
            if transform.plugin.is_relative() {
                transform.plugin = base.join(&transform.plugin);
            }
        }
        if let Some(schema) = connector.schema.as_mut()
            && schema.is_relative()
        {
            *schema = base.join(&*schema);
        }
        for format in std::iter::once(&mut connector.format).chain(connector.key_format.as_mut()) {
            if let super::Format::AvroFile { schema } = format
                && schema.is_relative()
            {
                *schema = base.join(&*schema);
            }
        }
        if let Some(tls) = connector
            .schema_registry
            .as_mut()
            .and_then(|r| r.tls.as_mut())
        {
            relative_to(base, tls);
        }
    }
    if let Some(tls) = config
        .kafka
        .schema_registry
        .as_mut()
        .and_then(|r| r.tls.as_mut())
    {
        relative_to(base, tls);
    }
    if let Some(tls) = config.admin.as_mut().and_then(|a| a.tls.as_mut()) {
        for path in [&mut tls.cert, &mut tls.key]
            .into_iter()
            .chain(tls.ca.as_mut())
        {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        }
    }
}

/// A registry's TLS files, relative to the configuration file's directory.
fn relative_to(base: &Path, tls: &mut super::RegistryTls) {
    for path in [&mut tls.ca, &mut tls.cert, &mut tls.key]
        .into_iter()
        .flatten()
    {
        if path.is_relative() {
            *path = base.join(&*path);
        }
    }
}
