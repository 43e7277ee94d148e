//! HTTPS for the admin API (`admin.tls: { cert, key }`) and for its client (`sluice status`
//! and the other commands that talk to a running sluice): rustls with the ring provider,
//! PEM files read with rustls-pki-types.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::AdminTls;

/// Why a certificate, key or CA file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: cannot read a PEM certificate from it: {message}")]
    Cert { path: PathBuf, message: String },
    #[error(
        "{path}: no PEM certificate in it (a file that starts with -----BEGIN CERTIFICATE-----)"
    )]
    NoCert { path: PathBuf },
    #[error("{path}: cannot read a PEM private key from it (PKCS#8, PKCS#1 or SEC1): {message}")]
    Key { path: PathBuf, message: String },
    #[error("{cert} and {key} do not make a usable server certificate: {message}")]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
    #[error("{path}: not a usable CA certificate: {message}")]
    Ca { path: PathBuf, message: String },
}

impl TlsError {
    /// The configuration field the problem is in.
    pub fn field(&self) -> &'static str {
        match self {
            TlsError::Cert { .. } | TlsError::NoCert { .. } | TlsError::Pair { .. } => {
                "admin.tls.cert"
            }
            TlsError::Key { .. } => "admin.tls.key",
            TlsError::Ca { .. } => "admin.tls.ca",
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Cert {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCert {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The server's configuration: the certificate chain and key of `tls`, HTTP/1.1 only.
pub fn server_config(tls: &AdminTls) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certificates(&tls.cert)?;
    let key = PrivateKeyDer::from_pem_file(&tls.key).map_err(|e| TlsError::Key {
        path: tls.key.clone(),
        message: e.to_string(),
    })?;
    let pair = |e: rustls::Error| TlsError::Pair {
        cert: tls.cert.clone(),
        key: tls.key.clone(),
        message: e.to_string(),
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(pair)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(pair)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The client's configuration: trusting the certificates of `ca` when given, else the
/// web's public roots.
pub fn client_config(ca: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            let ca_error = |message: String| TlsError::Ca {
                path: path.to_path_buf(),
                message,
            };
            for cert in certificates(path).map_err(|e| ca_error(e.to_string()))? {
                roots.add(cert).map_err(|e| ca_error(e.to_string()))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Ca {
            path: ca.map(Path::to_path_buf).unwrap_or_default(),
            message: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_empty_files_name_their_field() {
        let dir = tempfile::tempdir().expect("dir");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").expect("write");
        let tls = AdminTls {
            cert: empty.clone(),
            key: dir.path().join("missing.pem"),
            ca: None,
        };
        let error = server_config(&tls).expect_err("no certificate");
        assert!(matches!(error, TlsError::NoCert { .. }), "{error}");
        assert_eq!(error.field(), "admin.tls.cert");
        let error = client_config(Some(&empty)).expect_err("no CA");
        assert_eq!(error.field(), "admin.tls.ca");
    }
}
