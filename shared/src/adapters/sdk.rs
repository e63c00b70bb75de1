//! The AWS SDK configuration every function's `main.rs` starts from, built once per process.
//!
//! Lambda hands a function its region and credentials in the environment (`AWS_REGION`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), so the configuration takes
//! them from there only, instead of `aws_config::load_from_env`'s default chains (profile files,
//! SSO, web identity, ECS and IMDS providers), each of which costs init CPU to set up. Everything
//! else the loader reads from the environment still applies: `AWS_ENDPOINT_URL` (and the
//! per-service `AWS_ENDPOINT_URL_<SERVICE>`), retry and timeout settings.
//!
//! One HTTPS client serves every SDK client built from the configuration (hyper 1 + rustls with
//! the aws-lc-rs provider, the stack the SDK's `default-https-client` uses), where each client
//! would otherwise build its own. Its trust store is the five root certificates of Amazon Trust
//! Services ([`AWS_ROOTS_PEM`]), compiled into the binary, rather than the system's, which the
//! default client reads from disk and parses (some 150 certificates) at every cold start. The
//! functions talk to AWS service endpoints only, and every one of them, FIPS and VPC endpoints
//! included, presents a certificate that chains to these roots; Amazon Trust Services recommends
//! exactly these five for a custom trust store (<https://www.amazontrust.com/repository/>). A
//! server whose certificate does not chain to them is refused: an endpoint behind a
//! TLS-intercepting proxy, or a non-AWS HTTPS endpoint set in `AWS_ENDPOINT_URL`, is not trusted.
//! Server certificates are verified as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::environment::{EnvironmentVariableCredentialsProvider, EnvironmentVariableRegionProvider};
use aws_config::meta::region::ProvideRegion;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_smithy_http_client::Connector;
use aws_smithy_http_client::tls::{self, TlsContext, TrustStore};
use aws_smithy_runtime_api::client::http::{
    HttpConnectorSettings, SharedHttpClient, SharedHttpConnector, http_client_fn,
};
/// What keeps the SDK configuration from being built.
#[derive(thiserror::Error)]
pub enum SdkConfigError {
    #[error("AWS_REGION (or AWS_DEFAULT_REGION) is not set: the SDK clients need a region")]
    NoRegion,
    #[error("the HTTPS client's TLS configuration: {0}")]
    Tls(String),
}

/// The message itself: a function's `main` returning this error prints it with `Debug`.
impl std::fmt::Debug for SdkConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// The SDK configuration the functions' clients are built from: region and credentials from the
/// environment, `AWS_ENDPOINT_URL` honoured, and one shared HTTPS client ([`Https`]) whose
/// connector for the configuration's timeouts is built here, in init.
///
/// Fails when no region is set (Lambda always sets `AWS_REGION`), rather than letting the first
/// request fail.
pub async fn config() -> Result<SdkConfig, SdkConfigError> {
    let region = EnvironmentVariableRegionProvider::new().region().await.ok_or(SdkConfigError::NoRegion)?;
    let https = Https::new()?;
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .region(region)
        .credentials_provider(EnvironmentVariableCredentialsProvider::new())
        .http_client(https.client())
        .load()
        .await;
    // The connector the clients that keep these timeouts will ask for on their first request:
    // built now, with the CPU unthrottled, instead of in the first invocation.
    let timeouts = sdk.timeout_config().cloned().unwrap_or_else(|| TimeoutConfig::builder().build());
    let mut settings = HttpConnectorSettings::builder();
    settings.set_connect_timeout(timeouts.connect_timeout()).set_read_timeout(timeouts.read_timeout());
    https.connector(&settings.build());
    Ok(sdk)
}

/// The HTTPS client every SDK client of the process shares: rustls (aws-lc-rs) over hyper 1,
/// trusting the roots of Amazon Trust Services ([`AWS_ROOTS_PEM`]), not the system's.
///
/// A connector (TLS configuration, root store, connection pool) is built once per pair of
/// connect and read timeouts a client asks for, and then shared by every client that asks for the
/// same pair. The SDK's own HTTPS client also builds one per pair, lazily on the first request, and
/// in addition a throw-away one each time an SDK client is constructed (to read the system's roots
/// early): with compiled-in roots that is only a cost, so this client has none.
#[derive(Clone, Debug)]
pub struct Https {
    inner: Arc<HttpsInner>,
}

/// A connector's (connect timeout, read timeout).
type Timeouts = (Option<Duration>, Option<Duration>);

#[derive(Debug)]
struct HttpsInner {
    tls: TlsContext,
    connectors: Mutex<HashMap<Timeouts, SharedHttpConnector>>,
}

impl Https {
    pub fn new() -> Result<Self, SdkConfigError> {
        let tls = TlsContext::builder()
            .with_trust_store(TrustStore::empty().with_native_roots(false).with_pem_certificate(AWS_ROOTS_PEM))
            .build()
            .map_err(|e| SdkConfigError::Tls(e.to_string()))?;
        Ok(Https { inner: Arc::new(HttpsInner { tls, connectors: Mutex::new(HashMap::new()) }) })
    }

    /// The client to hand to the SDK configuration (a handle on this one).
    pub fn client(&self) -> SharedHttpClient {
        let https = self.clone();
        http_client_fn(move |settings, _components| https.connector(settings))
    }

    /// The connector for `settings`' timeouts, built on the first call for them.
    pub fn connector(&self, settings: &HttpConnectorSettings) -> SharedHttpConnector {
        let key = (settings.connect_timeout(), settings.read_timeout());
        let mut connectors = self.inner.connectors.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        connectors
            .entry(key)
            .or_insert_with(|| {
                SharedHttpConnector::new(
                    Connector::builder()
                        .connector_settings(settings.clone())
                        .tls_provider(tls::Provider::Rustls(tls::rustls_provider::CryptoMode::AwsLc))
                        .tls_context(self.inner.tls.clone())
                        .build(),
                )
            })
            .clone()
    }
}

/// The trust store: Amazon Root CA 1–4 and Starfield Services Root Certificate Authority – G2, the
/// roots every AWS service endpoint's certificate chains to (Amazon Trust Services' repository,
/// <https://www.amazontrust.com/repository/>, whose SHA-256 fingerprints the tests pin, as they pin
/// that Mozilla's root store holds each of them). Parsing five certificates in init instead of
/// Mozilla's ~150 is most of what the SDK configuration cost at a cold start.
pub const AWS_ROOTS_PEM: &[u8] = include_bytes!("../../certs/amazon-trust-services.pem");

#[cfg(test)]
mod tests {
    use super::*;

    use base64::Engine;
    use sha2::{Digest, Sha256};

    /// The DER of each certificate in a PEM bundle.
    fn ders(pem: &[u8]) -> Vec<Vec<u8>> {
        let text = std::str::from_utf8(pem).expect("PEM is ASCII");
        text.split("-----BEGIN CERTIFICATE-----")
            .skip(1)
            .map(|block| {
                let body = block.split("-----END CERTIFICATE-----").next().expect("an END line");
                let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
                base64::engine::general_purpose::STANDARD.decode(b64).expect("base64")
            })
            .collect()
    }

    #[test]
    fn the_trust_store_is_the_five_amazon_trust_services_roots_and_mozilla_trusts_each() {
        // As published at https://www.amazontrust.com/repository/ (SHA-256 of the DER).
        let published = [
            "8ecde6884f3d87b1125ba31ac3fcb13d7016de7f57cc904fe1cb97c6ae98196e", // Amazon Root CA 1
            "1ba5b2aa8c65401a82960118f80bec4f62304d83cec4713a19c39c011ea46db4", // Amazon Root CA 2
            "18ce6cfe7bf14e60b2e347b8dfe868cb31d02ebb3ada271569f50343b46db3a4", // Amazon Root CA 3
            "e35d28419ed02025cfa69038cd623962458da5c695fbdea3c22b0bfb25897092", // Amazon Root CA 4
            "568d6905a2c88708a4b3025190edcfedb1974a606a13c6e5290fcb2ae63edab5", // Starfield Services G2
        ];
        let certs = ders(AWS_ROOTS_PEM);
        let fingerprints: Vec<String> = certs.iter().map(|der| hex::encode(Sha256::digest(der))).collect();
        assert_eq!(fingerprints, published);
        for (der, fingerprint) in certs.iter().zip(&fingerprints) {
            assert!(
                webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter().any(|root| root.as_ref() == der.as_slice()),
                "{fingerprint} is not in Mozilla's root store"
            );
        }
    }

    #[test]
    fn one_connector_per_timeout_pair_and_every_root_parses() {
        // Building a connector decodes the trust store's PEM and parses each certificate,
        // panicking on a bad one.
        let https = Https::new().expect("the TLS configuration");
        let settings =
            |connect: u64| HttpConnectorSettings::builder().connect_timeout(Duration::from_secs(connect)).build();
        let _ = https.connector(&settings(3));
        let _ = https.connector(&settings(3));
        let _ = https.connector(&settings(1));
        assert_eq!(https.inner.connectors.lock().expect("not poisoned").len(), 2);
    }
}
