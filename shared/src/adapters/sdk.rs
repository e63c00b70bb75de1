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
//! would otherwise build its own. Its trust store is Mozilla's root certificates compiled into the
//! binary (`webpki-root-certs`) rather than the system's, which the default client reads and
//! decodes from disk at every cold start (`/etc/ssl/certs`, `/etc/pki/tls/certs`). Server
//! certificates are verified as before.

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
use base64::Engine;

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
/// trusting Mozilla's root certificates as compiled into the binary, not the system's.
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
            .with_trust_store(compiled_in_roots())
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

/// Mozilla's root certificates (`webpki-root-certs`) as a trust store without the system's roots.
/// The SDK's trust store takes PEM, so each certificate is wrapped as one.
fn compiled_in_roots() -> TrustStore {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut pem = String::with_capacity(webpki_root_certs::TLS_SERVER_ROOT_CERTS.len() * 2048);
    for cert in webpki_root_certs::TLS_SERVER_ROOT_CERTS {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        pem.push_str(&b64.encode(cert.as_ref()));
        pem.push_str("\n-----END CERTIFICATE-----\n");
    }
    TrustStore::empty().with_native_roots(false).with_pem_certificate(pem.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_connector_per_timeout_pair_and_every_compiled_in_root_parses() {
        // Building a connector decodes the trust store's PEM and parses each certificate,
        // panicking on a bad one.
        assert!(webpki_root_certs::TLS_SERVER_ROOT_CERTS.len() > 100);
        let https = Https::new().expect("the TLS configuration");
        let settings =
            |connect: u64| HttpConnectorSettings::builder().connect_timeout(Duration::from_secs(connect)).build();
        let _ = https.connector(&settings(3));
        let _ = https.connector(&settings(3));
        let _ = https.connector(&settings(1));
        assert_eq!(https.inner.connectors.lock().expect("not poisoned").len(), 2);
    }
}
