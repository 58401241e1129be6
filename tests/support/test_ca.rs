//! A throwaway certificate authority for tests that speak real TLS on loopback: a self-signed CA
//! written to a PEM file (what a node's `extra_ca_file` names), and server certificates it
//! signs. Shared by the integration tests through `#[path]`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, Certificate, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

/// A throwaway CA and the PEM file that holds its certificate.
pub struct TestCa {
    pub certificate: Certificate,
    pub key: KeyPair,
    pub pem_file: PathBuf,
}

/// A fresh CA whose certificate is written to `dir/ca.pem`.
pub fn make_ca(dir: &Path) -> TestCa {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "Vigil throwaway test CA");
    let key = KeyPair::generate().unwrap();
    let certificate = params.self_signed(&key).unwrap();
    let pem_file = dir.join("ca.pem");
    std::fs::write(&pem_file, certificate.pem()).unwrap();
    TestCa {
        certificate,
        key,
        pem_file,
    }
}

/// A server certificate for `name`, signed by the CA, and the acceptor that presents it.
pub fn acceptor_for(ca: &TestCa, name: &str) -> TlsAcceptor {
    let params = CertificateParams::new(vec![name.to_string()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = params.signed_by(&key, &ca.certificate, &ca.key).unwrap();
    let chain: Vec<CertificateDer<'static>> = vec![leaf.der().clone()];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    TlsAcceptor::from(Arc::new(config))
}
