//! HTTPS for `holdfast serve` (`--tls-cert`, `--tls-key`): TLS 1.2 and 1.3
//! by rustls, the certificate read again on SIGHUP so a renewal needs no
//! restart.
//!
//! [`TlsListener`] is an `axum::serve` listener: a task accepts TCP
//! connections and runs each handshake on a task of its own (a slow or
//! silent client holds up nobody else), and `accept` hands out the
//! connections whose handshake finished. The configuration sits behind a
//! lock that a reload swaps: connections already open keep the certificate
//! they were opened with, new ones get the new one. A reload that fails (a
//! file half written, a key that does not match) is logged and the old
//! certificate stays in use.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Longest a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the certificate and key are read from, and what was read last.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    current: Arc<RwLock<Arc<ServerConfig>>>,
}

impl TlsFiles {
    /// Reads the certificate chain and key; fails on anything rustls would
    /// refuse, naming the file.
    pub fn load(cert: &Path, key: &Path) -> anyhow::Result<Self> {
        let config = server_config(cert, key)?;
        Ok(Self { cert: cert.to_owned(), key: key.to_owned(), current: Arc::new(RwLock::new(Arc::new(config))) })
    }

    /// Reads both files again; on success new connections use them.
    pub fn reload(&self) -> anyhow::Result<()> {
        let config = server_config(&self.cert, &self.key)?;
        *self.current.write().expect("tls config lock") = Arc::new(config);
        Ok(())
    }

    fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.read().expect("tls config lock").clone())
    }

    /// Reloads on every SIGHUP until the process ends, logging the outcome.
    pub fn reload_on_sighup(&self) {
        #[cfg(unix)]
        {
            let files = self.clone();
            tokio::spawn(async move {
                let kind = tokio::signal::unix::SignalKind::hangup();
                let Ok(mut hup) = tokio::signal::unix::signal(kind) else {
                    tracing::warn!("cannot listen for SIGHUP: the certificate is read at start-up only");
                    return;
                };
                while hup.recv().await.is_some() {
                    match files.reload() {
                        Ok(()) => tracing::info!(cert = %files.cert.display(), "SIGHUP: TLS certificate reloaded"),
                        Err(e) => tracing::error!(
                            error = format!("{e:#}"),
                            "SIGHUP: TLS certificate not reloaded; still serving the previous one"
                        ),
                    }
                }
            });
        }
    }
}

fn server_config(cert: &Path, key: &Path) -> anyhow::Result<ServerConfig> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading the TLS certificate {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading the TLS certificate {}", cert.display()))?;
    anyhow::ensure!(!chain.is_empty(), "{}: no PEM certificate in it", cert.display());
    let key = PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading the TLS key {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .with_context(|| format!("{} and its key do not make a usable certificate", cert.display()))?;
    // The service speaks HTTP/1.1 only.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// TCP connections after their TLS handshake, for `axum::serve`.
#[derive(Debug)]
pub struct TlsListener {
    addr: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Takes over `tcp`: from now on its connections are accepted and
    /// handshaken in the background, until this listener is dropped.
    pub fn new(tcp: TcpListener, files: TlsFiles) -> io::Result<Self> {
        let addr = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = tokio::select! {
                    _ = tx.closed() => return,
                    accepted = tcp.accept() => match accepted {
                        Ok(c) => c,
                        Err(e) => {
                            // Out of file descriptors and the like: wait, as axum's own listener does.
                            tracing::warn!(error = %e, "accepting a connection failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                };
                let (tx, acceptor) = (tx.clone(), files.acceptor());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { addr, ready })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accepting task ends only when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
