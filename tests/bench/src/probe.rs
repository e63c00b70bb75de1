//! A wrapper around the harness's Runtime API stand-in that notes when the function asks for work.
//! The harness has no hook for "time of the first `GET …/invocation/next`", so this is a loopback
//! TCP forwarder placed in front of it: it looks at the first bytes of each connection the
//! function opens, stamps the first two `GET /2018-06-01/runtime/invocation/next` (the end of the
//! init, and the end of the first invocation: the runtime asks for the next event right after
//! posting its answer) with the time and the function's CPU time so far, read after holding the
//! request [`HOLD`] (the function waits for the answer then, off the CPU), and passes everything
//! through unchanged (cost: one extra loopback hop, tens of microseconds, and the hold, which
//! the first-response time leaves out).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::Result;

const NEXT: &[u8] = b"GET /2018-06-01/runtime/invocation/next";

/// One `GET /next`: when, and the function's CPU time (all threads) by then.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    pub at: Instant,
    pub cpu: Option<Duration>,
    /// How long the probe held the request before reading the CPU time and passing it on.
    pub held: Duration,
}

/// How long the probe holds each of the first two `GET /next` before reading the function's CPU
/// time: long enough for its thread to leave the CPU (it waits for the answer), which brings the
/// scheduler's account of it up to date.
pub const HOLD: Duration = Duration::from_millis(2);

#[derive(Default)]
struct Shared {
    /// The function's process id (0 until it is set).
    pid: AtomicU32,
    /// The first two `GET /next`s.
    nexts: Mutex<Vec<Stamp>>,
}

pub struct NextProbe {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl NextProbe {
    /// Forwards to `upstream` (`host:port`, the stand-in's address).
    pub async fn start(upstream: String) -> Result<NextProbe> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let stamps = shared.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { continue };
                let (stamps, upstream) = (stamps.clone(), upstream.clone());
                tokio::spawn(async move {
                    let _ = forward(client, &upstream, &stamps).await;
                });
            }
        });
        Ok(NextProbe { addr, shared, task })
    }

    /// The value for `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// The process whose CPU time the stamps read.
    pub fn watch(&self, pid: u32) {
        self.shared.pid.store(pid, Ordering::SeqCst);
    }

    /// When the function first asked for an invocation, if it has.
    pub fn first_next(&self) -> Option<Instant> {
        self.next(0).map(|s| s.at)
    }

    /// The `n`th `GET /next` (0: the end of the init; 1: the end of the first invocation).
    pub fn next(&self, n: usize) -> Option<Stamp> {
        self.shared.nexts.lock().ok().and_then(|s| s.get(n).copied())
    }
}

impl Drop for NextProbe {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(mut client: TcpStream, upstream: &str, shared: &Shared) -> std::io::Result<()> {
    let mut buf = vec![0u8; 8192];
    let n = client.read(&mut buf).await?;
    if buf[..n].starts_with(NEXT) {
        stamp(shared).await;
    }
    let mut server = TcpStream::connect(upstream).await?;
    server.write_all(&buf[..n]).await?;
    // A keep-alive connection carries the next requests too: `relay` looks at each.
    relay(client, server, shared).await
}

/// Copies both ways until either side closes, stamping each `GET /next` the function sends.
async fn relay(mut client: TcpStream, mut server: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    let up = async {
        let mut buf = vec![0u8; 65536];
        loop {
            let n = cr.read(&mut buf).await?;
            if n == 0 {
                sw.shutdown().await?;
                return Ok::<(), std::io::Error>(());
            }
            if buf[..n].starts_with(NEXT) {
                stamp(shared).await;
            }
            sw.write_all(&buf[..n]).await?;
        }
    };
    let down = tokio::io::copy(&mut sr, &mut cw);
    let (a, b) = tokio::join!(up, down);
    a?;
    b?;
    Ok(())
}

async fn stamp(shared: &Shared) {
    let at = Instant::now();
    if shared.nexts.lock().map(|s| s.len() >= 2).unwrap_or(true) {
        return;
    }
    tokio::time::sleep(HOLD).await;
    let pid = shared.pid.load(Ordering::SeqCst);
    let cpu = (pid != 0).then(|| crate::cpu_clock::of_process(pid)).flatten();
    let held = at.elapsed();
    if let Ok(mut s) = shared.nexts.lock()
        && s.len() < 2
    {
        s.push(Stamp { at, cpu, held });
    }
}
