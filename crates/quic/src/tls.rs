//! Certificates and TLS configurations for QUIC endpoints (rustls with
//! ring, ALPN `h3`).
use std::sync::Arc;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating a certificate: {0}")]
    Generate(String),
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// A certificate chain with its key.
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Identity {
    /// A self-signed certificate for `names` (DNS names or IP addresses).
    pub fn self_signed(names: &[String]) -> Result<Identity, TlsError> {
        let c = rcgen::generate_simple_self_signed(names.to_vec())
            .map_err(|e| TlsError::Generate(e.to_string()))?;
        Ok(Identity {
            chain: vec![c.cert.der().clone()],
            key: PrivatePkcs8KeyDer::from(c.key_pair.serialize_der()).into(),
        })
    }

    /// A certificate chain and its private key from PEM files.
    pub fn from_pem_files(
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> Result<Identity, TlsError> {
        use rustls::pki_types::pem::PemObject;
        let chain = certs_from_pem(cert)?;
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| TlsError::Config(format!("{}: {e}", key.display())))?;
        Ok(Identity { chain, key })
    }

    /// SHA-256 of the leaf certificate, as `AB:CD:...` (what
    /// `openssl x509 -fingerprint -sha256` prints).
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.chain[0])
    }
}

pub fn fingerprint(cert: &CertificateDer<'_>) -> String {
    Sha256::digest(cert.as_ref())
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A QUIC server configuration presenting `id`, offering `alpn`.
pub fn server_config(id: Identity, alpn: &[&[u8]]) -> Result<quinn::ServerConfig, TlsError> {
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(id.chain, id.key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    tls.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    let q = QuicServerConfig::try_from(tls).map_err(|e| TlsError::Config(e.to_string()))?;
    Ok(quinn::ServerConfig::with_crypto(Arc::new(q)))
}

/// Whom a client trusts.
pub enum Trust {
    /// These CA (or self-signed) certificates.
    Certs(Vec<CertificateDer<'static>>),
    /// Any certificate (`--insecure`): the handshake still checks the
    /// server's signature, not who it is.
    Anything,
}

impl Trust {
    /// The certificates of a PEM file (a CA, or a server's own).
    pub fn from_pem_file(path: &std::path::Path) -> Result<Trust, TlsError> {
        Ok(Trust::Certs(certs_from_pem(path)?))
    }
}

/// The certificates of a PEM file; an error naming the file when it has none.
fn certs_from_pem(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Config(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsError::Config(format!(
            "{}: no certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

/// A QUIC client configuration with `trust`, offering `alpn`.
pub fn client_config(trust: Trust, alpn: &[&[u8]]) -> Result<quinn::ClientConfig, TlsError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let mut tls = match trust {
        Trust::Certs(certs) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| TlsError::Config(format!("a trusted certificate: {e}")))?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::Anything => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer(provider())))
            .with_no_client_auth(),
    };
    tls.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    let q = QuicClientConfig::try_from(tls).map_err(|e| TlsError::Config(e.to_string()))?;
    Ok(quinn::ClientConfig::new(Arc::new(q)))
}

/// Accepts any server certificate; signatures are still verified.
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_identity_has_a_sha256_fingerprint() {
        let id = Identity::self_signed(&["localhost".into(), "198.18.0.1".into()]).unwrap();
        let f = id.fingerprint();
        assert_eq!(f.len(), 32 * 3 - 1, "{f}");
        assert!(f
            .split(':')
            .all(|b| b.len() == 2 && u8::from_str_radix(b, 16).is_ok()));
        assert_eq!(f, fingerprint(&id.chain[0]));
        server_config(id, &[b"h3"]).unwrap();
        client_config(Trust::Anything, &[b"h3"]).unwrap();
    }
}
