//! The TLS client configuration: which certificate authorities are trusted. Mozilla's roots as
//! compiled into `webpki-roots` (no OS trust store, so every machine and every CI run trusts the
//! same set), plus the certificates of an optional extra CA file for a provider behind a private
//! CA (a corporate proxy, a self-hosted gateway). rustls on the `ring` provider.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

/// An extra CA file larger than this (in bytes) is refused: a bundle of a few hundred
/// certificates is far smaller, and the file is read whole.
pub const CA_FILE_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// The only application protocol offered in ALPN: the transport speaks HTTP/1.1.
const ALPN_HTTP_1_1: &[u8] = b"http/1.1";

/// How the outbound client sets up TLS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// A PEM file of CA certificates trusted in addition to Mozilla's roots, for providers behind
    /// a private CA. Read once, when the client is built.
    pub extra_ca_file: Option<PathBuf>,
}

/// Why the TLS configuration could not be built. Each names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error(
        "could not read the extra CA file {path}: {source}; check the path and its permissions"
    )]
    CaFileRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the extra CA file {path} is {bytes} bytes, more than the {max} allowed; give only the CA certificates you need", max = CA_FILE_BYTES_MAX)]
    CaFileTooLarge { path: PathBuf, bytes: u64 },
    #[error("the extra CA file {path} holds no PEM certificate (`-----BEGIN CERTIFICATE-----`); give the CA's certificate in PEM form")]
    CaFileEmpty { path: PathBuf },
    #[error("the extra CA file {path} is not valid PEM: {detail}; give the CA's certificate in PEM form")]
    CaFileInvalid { path: PathBuf, detail: String },
    #[error("a certificate in the extra CA file {path} cannot be a trust root: {detail}; give the CA's own certificate, not a server's")]
    CaCertificateRejected { path: PathBuf, detail: String },
    #[error("could not set up TLS: {detail}")]
    Config { detail: String },
}

/// Builds the rustls client configuration: the roots, TLS 1.2 and 1.3 on `ring`, ALPN `http/1.1`.
///
/// Blocking: reads the extra CA file with `std::fs`. Called once, when an `OutboundClient` is
/// built at start-up, never on a request path.
pub(crate) fn client_config(options: &TlsOptions) -> Result<Arc<ClientConfig>, TlsSetupError> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = &options.extra_ca_file {
        for certificate in read_ca_file(path)? {
            roots
                .add(certificate)
                .map_err(|error| TlsSetupError::CaCertificateRejected {
                    path: path.clone(),
                    detail: error.to_string(),
                })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsSetupError::Config {
            detail: error.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_HTTP_1_1.to_vec()];
    Ok(Arc::new(config))
}

/// Every certificate of a PEM file (other sections, such as keys, are skipped); at least one.
fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let read_error = |source| TlsSetupError::CaFileRead {
        path: path.to_path_buf(),
        source,
    };
    let bytes = std::fs::metadata(path).map_err(read_error)?.len();
    if bytes > CA_FILE_BYTES_MAX {
        return Err(TlsSetupError::CaFileTooLarge {
            path: path.to_path_buf(),
            bytes,
        });
    }
    let pem = std::fs::read(path).map_err(read_error)?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsSetupError::CaFileInvalid {
            path: path.to_path_buf(),
            detail: error.to_string(),
        })?;
    if certificates.is_empty() {
        return Err(TlsSetupError::CaFileEmpty {
            path: path.to_path_buf(),
        });
    }
    Ok(certificates)
}
