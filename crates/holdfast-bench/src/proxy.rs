//! The latency proxy behind `--db-latency`: a TCP proxy between the client
//! and the database (or Redis) that delays every chunk it forwards, in each
//! direction, by a fixed time, preserving order. It models an application
//! server in another rack, where a transaction's locks are held across every
//! round trip.
//!
//! Each direction of each connection is a reader thread that stamps what it
//! reads with its due time and a writer thread that sleeps until then. Plain
//! threads, because tokio's timer has a 1 ms resolution and the delays
//! modelled here are fractions of that; `thread::sleep` is accurate to tens of
//! microseconds.
//!
//! The same proxy injects the network faults of `holdfast bench verify`:
//! it can cut every open connection (mid-transaction, as a crashed database
//! or a broken network does), refuse new ones for a while (a database
//! restarting), and stall all traffic (a network partition that heals).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct Control {
    /// Both ends of every connection opened so far (closed ones included;
    /// shutting those down again is harmless).
    open: Mutex<Vec<(TcpStream, TcpStream)>>,
    refuse: AtomicBool,
    stall: AtomicBool,
}

#[derive(Debug)]
pub struct LatencyProxy {
    addr: SocketAddr,
    control: Arc<Control>,
}

impl LatencyProxy {
    /// Listens on 127.0.0.1 (a free port) and forwards to `upstream`
    /// ("host:port"), adding `delay` to every chunk each way.
    pub fn start(upstream: String, delay: Duration) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let control = Arc::new(Control::default());
        let ctl = control.clone();
        thread::Builder::new().name("latency-proxy".into()).spawn(move || {
            for client in listener.incoming().flatten() {
                if ctl.refuse.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let upstream = upstream.clone();
                let ctl = ctl.clone();
                thread::spawn(move || {
                    if let Ok(server) = TcpStream::connect(&upstream) {
                        let _ = client.set_nodelay(true);
                        let _ = server.set_nodelay(true);
                        if let (Ok(a), Ok(b)) = (client.try_clone(), server.try_clone()) {
                            let mut open = ctl.open.lock().expect("proxy lock");
                            open.retain(|(c, _)| c.peer_addr().is_ok());
                            open.push((a, b));
                        }
                        pipe(&client, &server, delay, ctl.clone());
                        pipe(&server, &client, delay, ctl);
                    }
                });
            }
        })?;
        Ok(Self { addr, control })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every open connection, both ways, wherever its transaction is.
    pub fn cut(&self) {
        for (c, s) in self.control.open.lock().expect("proxy lock").drain(..) {
            let _ = c.shutdown(Shutdown::Both);
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Refuses (closes at once) new connections while `on`.
    pub fn refuse(&self, on: bool) {
        self.control.refuse.store(on, Ordering::SeqCst);
    }

    /// Holds back all traffic, both ways, while `on`; nothing is lost.
    pub fn stall(&self, on: bool) {
        self.control.stall.store(on, Ordering::SeqCst);
    }

    /// `url` with its host:port replaced by the proxy's.
    pub fn rewrite(&self, url: &str) -> String {
        let Some(start) = url.find("://").map(|i| i + 3) else { return url.to_string() };
        let rest = &url[start..];
        let host_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let userinfo_end = rest[..host_end].rfind('@').map(|i| i + 1).unwrap_or(0);
        format!("{}{}{}{}", &url[..start], &rest[..userinfo_end], self.addr, &rest[host_end..])
    }
}

/// The `host:port` a URL points at (default port by scheme).
pub fn upstream_of(url: &str) -> Option<String> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let host_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let hostport = &rest[rest[..host_end].rfind('@').map(|i| i + 1).unwrap_or(0)..host_end];
    if hostport.contains(':') {
        return Some(hostport.to_string());
    }
    let port = match &url[..start - 3] {
        "postgres" | "postgresql" => 5432,
        "mysql" | "mariadb" => 3306,
        "redis" => 6379,
        _ => return None,
    };
    Some(format!("{}:{port}", if hostport.is_empty() { "127.0.0.1" } else { hostport }))
}

/// Forwards `from` → `to`, each chunk delayed by `delay`, in order, and
/// held back while the proxy is stalled.
fn pipe(from: &TcpStream, to: &TcpStream, delay: Duration, ctl: Arc<Control>) {
    let (Ok(mut reader), Ok(mut writer)) = (from.try_clone(), to.try_clone()) else { return };
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = reader.shutdown(Shutdown::Read);
    });
    thread::spawn(move || {
        for (due, bytes) in rx {
            let now = Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
            while ctl.stall.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(1));
            }
            if writer.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = writer.shutdown(Shutdown::Write);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(upstream_of("postgres://u@127.0.0.1:5432/db").unwrap(), "127.0.0.1:5432");
        assert_eq!(upstream_of("mysql://root@localhost/db").unwrap(), "localhost:3306");
        assert_eq!(upstream_of("redis://127.0.0.1/").unwrap(), "127.0.0.1:6379");
        let p = LatencyProxy { addr: "127.0.0.1:9999".parse().unwrap(), control: Default::default() };
        assert_eq!(p.rewrite("postgres://u:p@127.0.0.1:5432/db?x=1"), "postgres://u:p@127.0.0.1:9999/db?x=1");
    }

    #[test]
    fn delays_each_way_and_keeps_order() {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let echo_addr = echo.local_addr().unwrap();
        thread::spawn(move || {
            let (mut s, _) = echo.accept().unwrap();
            let mut buf = [0u8; 1024];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => s.write_all(&buf[..n]).unwrap(),
                }
            }
        });
        let proxy = LatencyProxy::start(echo_addr.to_string(), Duration::from_millis(20)).unwrap();
        let mut c = TcpStream::connect(proxy.addr()).unwrap();
        let t0 = Instant::now();
        c.write_all(b"abc").unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        while got.len() < 3 {
            let n = c.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"abc");
        // Two delays: client → server and back.
        assert!(t0.elapsed() >= Duration::from_millis(40), "{:?}", t0.elapsed());
    }
}
