//! Why a schema could not be had from the Schema Registry, sorted by what the caller does
//! about it: retry later ([`RegistryError::Unavailable`]), stop the task
//! ([`RegistryError::Denied`], [`RegistryError::Invalid`]), or fail the records of one
//! schema ([`RegistryError::NotFound`], [`RegistryError::Unusable`]).

/// A failed schema lookup.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// No URL answered (connect error, timeout, I/O error), or every URL answered 5xx:
    /// transient, worth retrying.
    #[error("schema registry {url}: {message}")]
    Unavailable { url: String, message: String },
    /// 401 or 403: the credentials are wrong or lack the right; permanent.
    #[error(
        "schema registry {url} refused the request ({status}): check schema_registry.username/password/token"
    )]
    Denied { url: String, status: u16 },
    /// The registry has no such schema (404 with error_code 40403, or 404 on a GUID): the
    /// record names a schema that does not exist (or was hard-deleted).
    #[error("{what} is not in the schema registry")]
    NotFound { what: String },
    /// The registry answered something that cannot be used at all: another 4xx, a body
    /// that is not JSON, a 404 without a registry's error code (a URL that is not the
    /// registry's): the settings are wrong, permanent.
    #[error("schema registry {url}: {message}")]
    Invalid { url: String, message: String },
    /// The registry answered one schema in a form that cannot be used (no `schema` text,
    /// an unknown `schemaType`, malformed references, a reference cycle, references nested
    /// too deep, an answer larger than [`MAX_BODY`](super::transport::MAX_BODY)): that
    /// schema's records fail (`decode_failed`), not the task, and it is not retried.
    #[error("{what}: {message}")]
    Unusable { what: String, message: String },
}

impl RegistryError {
    /// Whether trying again later may succeed (only [`RegistryError::Unavailable`]: no
    /// answer, 5xx, 408 or 429).
    pub fn is_transient(&self) -> bool {
        matches!(self, RegistryError::Unavailable { .. })
    }

    /// The observer's name of this outcome.
    pub(crate) fn outcome(&self) -> &'static str {
        match self {
            RegistryError::Unavailable { .. } => "unavailable",
            RegistryError::Denied { .. } => "denied",
            RegistryError::NotFound { .. } => "not_found",
            RegistryError::Invalid { .. } | RegistryError::Unusable { .. } => "invalid",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unavailable_is_transient_and_denied_names_the_settings() {
        let unavailable = RegistryError::Unavailable {
            url: "http://r:8081".into(),
            message: "connection refused".into(),
        };
        assert!(unavailable.is_transient());
        let denied = RegistryError::Denied {
            url: "http://r:8081".into(),
            status: 401,
        };
        assert!(!denied.is_transient());
        let text = denied.to_string();
        assert!(text.contains("http://r:8081") && text.contains("username/password/token"));
        assert!(
            !RegistryError::NotFound {
                what: "schema id 7".into()
            }
            .is_transient()
        );
        assert!(
            !RegistryError::Invalid {
                url: "u".into(),
                message: "m".into()
            }
            .is_transient()
        );
    }
}
