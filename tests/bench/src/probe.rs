//! A wrapper around the harness's Runtime API stand-in that notes when the function first asks
//! for work. The harness has no hook for "time of the first `GET …/invocation/next`", so this is a
//! loopback TCP forwarder placed in front of it: it looks at the first bytes of each connection
//! the function opens, stamps the first `GET /2018-06-01/runtime/invocation/next`, and passes
//! everything through unchanged (cost: one extra loopback hop, tens of microseconds).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::Result;

const NEXT: &[u8] = b"GET /2018-06-01/runtime/invocation/next";

pub struct NextProbe {
    addr: SocketAddr,
    first_next: Arc<Mutex<Option<Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl NextProbe {
    /// Forwards to `upstream` (`host:port`, the stand-in's address).
    pub async fn start(upstream: String) -> Result<NextProbe> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let first_next = Arc::new(Mutex::new(None));
        let stamp = first_next.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { continue };
                let (stamp, upstream) = (stamp.clone(), upstream.clone());
                tokio::spawn(async move {
                    let _ = forward(client, &upstream, &stamp).await;
                });
            }
        });
        Ok(NextProbe { addr, first_next, task })
    }

    /// The value for `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// When the function first asked for an invocation, if it has.
    pub fn first_next(&self) -> Option<Instant> {
        self.first_next.lock().ok().and_then(|t| *t)
    }
}

impl Drop for NextProbe {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(mut client: TcpStream, upstream: &str, stamp: &Mutex<Option<Instant>>) -> std::io::Result<()> {
    let mut buf = vec![0u8; 8192];
    let n = client.read(&mut buf).await?;
    if buf[..n].starts_with(NEXT)
        && let Ok(mut t) = stamp.lock()
    {
        t.get_or_insert_with(Instant::now);
    }
    let mut server = TcpStream::connect(upstream).await?;
    server.write_all(&buf[..n]).await?;
    tokio::io::copy_bidirectional(&mut client, &mut server).await?;
    Ok(())
}
