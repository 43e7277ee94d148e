//! How a record's key and value are read (`format:`, `key_format:`), and the Schema
//! Registry the schema-carrying formats fetch their schemas from (`schema_registry:`).
//! What each format decodes to is in `docs/formats.md`; the decoders are in
//! `crate::format`.

use std::fmt;
use std::path::PathBuf;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::Secret;

/// How a record's value (or key) is read.
///
/// `json`, `string` and `bytes` reach the transforms as they came; the others decode on
/// arrival to JSON text, before transforms, dedup and the mapping.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Format {
    /// A JSON document; `from: /pointer` reads into it.
    #[default]
    Json,
    /// UTF-8 text, available as `$value`.
    String,
    /// Raw bytes, available as `$value`.
    Bytes,
    /// Avro in the Confluent wire format, its schema from the Schema Registry.
    Avro,
    /// Protobuf in the Confluent wire format, its schema from the Schema Registry.
    Protobuf,
    /// JSON in the Confluent wire format, checked against its JSON Schema from the
    /// Schema Registry.
    JsonSchema,
    /// Kafka Connect's `JsonConverter` envelope with `schemas.enable=true`:
    /// `{"schema": …, "payload": …}`.
    ConnectJson,
    /// Bare Avro datums (no frame, no registry) written with the schema in this file.
    AvroFile {
        /// The `.avsc` file; a relative path is read from the directory of the
        /// configuration file.
        schema: PathBuf,
    },
}

impl Format {
    /// Its name as `connectors.yaml` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::String => "string",
            Format::Bytes => "bytes",
            Format::Avro => "avro",
            Format::Protobuf => "protobuf",
            Format::JsonSchema => "json_schema",
            Format::ConnectJson => "connect_json",
            Format::AvroFile { .. } => "avro (schema file)",
        }
    }

    /// Whether it decodes on arrival (to JSON text, with a schema beside it).
    pub fn decodes(&self) -> bool {
        !matches!(self, Format::Json | Format::String | Format::Bytes)
    }

    /// Whether its schemas come from a Schema Registry.
    pub fn uses_registry(&self) -> bool {
        matches!(self, Format::Avro | Format::Protobuf | Format::JsonSchema)
    }

    /// How the mapping reads the value once it arrived: every decoding format hands on
    /// JSON text.
    pub fn mapped(&self) -> Format {
        match self {
            Format::String => Format::String,
            Format::Bytes => Format::Bytes,
            _ => Format::Json,
        }
    }
}

const NAMES: &[&str] = &[
    "json",
    "string",
    "bytes",
    "avro",
    "protobuf",
    "json_schema",
    "connect_json",
];

impl<'de> Deserialize<'de> for Format {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FormatVisitor;

        /// `{ avro: { schema: FILE } }`.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct AvroFile {
            /// The `.avsc` file.
            schema: PathBuf,
        }

        impl<'de> Visitor<'de> for FormatVisitor {
            type Value = Format;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "one of json, string, bytes, avro, protobuf, json_schema, connect_json, or { avro: { schema: FILE.avsc } }",
                )
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<Format, E> {
                Ok(match name {
                    "json" => Format::Json,
                    "string" => Format::String,
                    "bytes" => Format::Bytes,
                    "avro" => Format::Avro,
                    "protobuf" => Format::Protobuf,
                    "json_schema" => Format::JsonSchema,
                    "connect_json" => Format::ConnectJson,
                    other => return Err(E::unknown_variant(other, NAMES)),
                })
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Format, A::Error> {
                let Some(name) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(
                        "an empty map is no format: write { avro: { schema: FILE.avsc } }",
                    ));
                };
                if name != "avro" {
                    return Err(de::Error::unknown_field(&name, &["avro"]));
                }
                let file: AvroFile = map.next_value()?;
                if let Some(more) = map.next_key::<String>()? {
                    return Err(de::Error::unknown_field(&more, &[]));
                }
                Ok(Format::AvroFile {
                    schema: file.schema,
                })
            }
        }

        deserializer.deserialize_any(FormatVisitor)
    }
}

/// One URL or a list of them. `Debug` prints them with any `user:password@` masked.
#[derive(Clone, PartialEq, Eq)]
pub struct Urls(pub Vec<String>);

impl fmt::Debug for Urls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|url| super::redact_url(url)))
            .finish()
    }
}

impl<'de> Deserialize<'de> for Urls {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(String),
            Many(Vec<String>),
        }
        let urls = match OneOrMany::deserialize(deserializer)
            .map_err(|_| de::Error::custom("a URL (https://registry:8081) or a list of URLs"))?
        {
            OneOrMany::One(url) => vec![url],
            OneOrMany::Many(urls) => urls,
        };
        if urls.is_empty() {
            return Err(de::Error::custom("the list of URLs is empty"));
        }
        Ok(Urls(urls))
    }
}

/// A Schema Registry (Confluent's REST API: Confluent, Karapace, Apicurio's compatibility
/// API, Redpanda).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaRegistryConfig {
    /// `http://` or `https://` base URL, or a list of them: a URL that does not answer
    /// hands the request to the next.
    pub url: Urls,
    /// HTTP basic authentication's user (with `password`).
    #[serde(default)]
    pub username: Option<String>,
    /// HTTP basic authentication's password; never printed.
    #[serde(default)]
    pub password: Option<Secret>,
    /// A bearer token, in place of `username`/`password`; never printed.
    #[serde(default)]
    pub token: Option<Secret>,
    /// TLS settings of `https://` URLs.
    #[serde(default)]
    pub tls: Option<RegistryTls>,
}

/// TLS of the Schema Registry connection.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryTls {
    /// PEM file of the CA that signed the registry's certificate; without it, the web's
    /// public roots.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// PEM certificate (chain) this client presents (with `key`).
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    #[serde(default)]
    pub key: Option<PathBuf>,
}

/// The checks of a connector's formats that need no file and no network: a registry
/// format with no registry, and the connector's own registry settings (`kafka`'s are
/// checked once, by [`registry_problems`], not once per connector that inherits them).
pub(super) fn format_problems(
    connector: &super::ConnectorConfig,
    kafka_registry: Option<&SchemaRegistryConfig>,
    at: &dyn Fn(&str) -> String,
) -> Vec<super::Problem> {
    let mut problems = Vec::new();
    for (setting, format) in [
        ("format", Some(&connector.format)),
        ("key_format", connector.key_format.as_ref()),
    ] {
        if let Some(format) = format
            && format.uses_registry()
            && connector.schema_registry.is_none()
        {
            problems.push(super::Problem::new(
                at(setting),
                format!(
                    "{} reads its schemas from a Schema Registry: set kafka.schema_registry (or this connector's schema_registry)",
                    format.name()
                ),
            ));
        }
    }
    if let Some(registry) = &connector.schema_registry
        && Some(registry) != kafka_registry
    {
        problems.extend(registry_problems(registry, &at("schema_registry")));
    }
    problems
}

/// A registry's settings: each URL an `http://` or `https://` URL with a host, basic
/// authentication complete, a token not mixed with it, a client certificate with its key.
pub(super) fn registry_problems(registry: &SchemaRegistryConfig, at: &str) -> Vec<super::Problem> {
    let mut problems = Vec::new();
    for (i, url) in registry.url.0.iter().enumerate() {
        if let Err(why) = registry_url_problem(url) {
            let path = if registry.url.0.len() == 1 {
                format!("{at}.url")
            } else {
                format!("{at}.url[{i}]")
            };
            problems.push(super::Problem::new(path, why));
        }
    }
    match (&registry.username, &registry.password, &registry.token) {
        (Some(_), None, _) => problems.push(super::Problem::new(
            format!("{at}.password"),
            "username needs a password",
        )),
        (None, Some(_), _) => problems.push(super::Problem::new(
            format!("{at}.username"),
            "password needs a username",
        )),
        (Some(_), Some(_), Some(_)) => problems.push(super::Problem::new(
            format!("{at}.token"),
            "use either a token or username and password, not both",
        )),
        _ => {}
    }
    if let Some(tls) = &registry.tls
        && tls.cert.is_some() != tls.key.is_some()
    {
        problems.push(super::Problem::new(
            format!("{at}.tls"),
            "a client certificate needs its key, and a key its certificate (cert and key)",
        ));
    }
    problems
}

/// Why `url` is no registry URL.
fn registry_url_problem(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| {
            format!(
                "\"{url}\" is not a Schema Registry URL: use http://host:port or https://host:port"
            )
        })?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    let (host, port) = match host.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (h, Some(p)),
        _ => (host, None),
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(format!("\"{url}\" has no host: use http://host:port"));
    }
    if let Some(port) = port
        && port.parse::<u16>().is_err()
    {
        return Err(format!("\"{url}\": port \"{port}\" is not a port number"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Holder {
        format: Format,
    }

    fn parse(text: &str) -> Result<Format, String> {
        serde_yaml_ng::from_str::<Holder>(text)
            .map(|h| h.format)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn formats_by_name_and_the_avro_file_form() {
        assert_eq!(parse("format: avro").unwrap(), Format::Avro);
        assert_eq!(parse("format: connect_json").unwrap(), Format::ConnectJson);
        assert_eq!(
            parse("format: { avro: { schema: word.avsc } }").unwrap(),
            Format::AvroFile {
                schema: "word.avsc".into()
            }
        );
        let unknown = parse("format: thrift").unwrap_err();
        assert!(unknown.contains("json_schema"), "{unknown}");
        let wrong = parse("format: { protobuf: { schema: a.proto } }").unwrap_err();
        assert!(wrong.contains("avro"), "{wrong}");
        let extra = parse("format: { avro: { schema: a.avsc, strict: true } }").unwrap_err();
        assert!(extra.contains("strict"), "{extra}");
    }

    #[test]
    fn registry_url_is_one_or_many() {
        let one: SchemaRegistryConfig = serde_yaml_ng::from_str("url: http://r:8081").unwrap();
        assert_eq!(one.url.0, vec!["http://r:8081"]);
        let many: SchemaRegistryConfig =
            serde_yaml_ng::from_str("url: [http://a:8081, http://b:8081]").unwrap();
        assert_eq!(many.url.0.len(), 2);
        assert!(serde_yaml_ng::from_str::<SchemaRegistryConfig>("url: []").is_err());
    }

    #[test]
    fn urls_print_without_their_passwords() {
        let urls = Urls(vec!["https://sluice:hunter2@registry:8081".into()]);
        let shown = format!("{urls:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("registry:8081"),
            "{shown}"
        );
    }

    #[test]
    fn registry_urls_are_checked() {
        assert!(registry_url_problem("http://registry:8081").is_ok());
        assert!(registry_url_problem("https://user@r.example.com/path").is_ok());
        assert!(registry_url_problem("http://[::1]:8081").is_ok());
        assert!(
            registry_url_problem("registry:8081")
                .unwrap_err()
                .contains("http://")
        );
        assert!(
            registry_url_problem("http://")
                .unwrap_err()
                .contains("no host")
        );
        assert!(
            registry_url_problem("http://r:80x")
                .unwrap_err()
                .contains("port")
        );
    }
}
