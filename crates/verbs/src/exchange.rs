//! The out-of-band exchange over TCP (perftest's port 18515): one JSON
//! object per line, each side sends first and then reads, so either side
//! may start. The same connection then serves as the control channel
//! (start, done, results) for tools like `roce perf`.

use crate::error::{Error, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// perftest's default exchange port.
pub const EXCHANGE_PORT: u16 = 18515;

/// Longest line accepted from the peer.
const MAX_LINE: u64 = 1 << 20;

/// A TCP control connection carrying JSON lines.
pub struct Control {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
}

fn xerr(peer: impl ToString, why: impl ToString) -> Error {
    Error::Exchange {
        peer: peer.to_string(),
        why: why.to_string(),
    }
}

impl Control {
    fn from_stream(s: TcpStream) -> Result<Control> {
        let peer = s.peer_addr().map_err(|e| xerr("?", e))?;
        let local = s.local_addr().map_err(|e| xerr(peer, e))?;
        let _ = s.set_nodelay(true);
        let writer = s.try_clone().map_err(|e| xerr(peer, e))?;
        Ok(Control {
            reader: BufReader::new(s),
            writer,
            peer,
            local,
        })
    }

    /// Connects to `server` (host:port), trying for at most `timeout`.
    pub fn connect(server: &str, timeout: Duration) -> Result<Control> {
        let addrs: Vec<SocketAddr> = server
            .to_socket_addrs()
            .map_err(|e| xerr(server, format!("cannot resolve: {e}")))?
            .collect();
        let mut last = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, timeout) {
                Ok(s) => return Self::from_stream(s),
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => xerr(
                server,
                "connection refused: is the server side (`roce perf TEST` without SERVER) running there?",
            ),
            Some(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                xerr(server, format!("unreachable: no answer within {timeout:?}"))
            }
            Some(e) => xerr(server, format!("unreachable: {e}")),
            None => xerr(server, "resolves to no address"),
        })
    }

    /// Accepts one connection on `listener`.
    pub fn accept(listener: &TcpListener) -> Result<Control> {
        let (s, _) = listener.accept().map_err(|e| {
            xerr(
                listener.local_addr().map_or("?".into(), |a| a.to_string()),
                e,
            )
        })?;
        Self::from_stream(s)
    }

    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
    /// The local address of the connection: the IP the peer reached us on,
    /// which is the IP to open the RDMA device on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Limits how long a `recv` waits (None: forever).
    pub fn set_timeout(&self, t: Option<Duration>) -> Result<()> {
        self.writer
            .set_read_timeout(t)
            .map_err(|e| xerr(self.peer, e))
    }

    pub fn send<T: Serialize>(&mut self, v: &T) -> Result<()> {
        let mut line = serde_json::to_vec(v).map_err(|e| xerr(self.peer, e))?;
        line.push(b'\n');
        self.writer
            .write_all(&line)
            .map_err(|e| xerr(self.peer, format!("send failed: {e}")))
    }

    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<T> {
        let mut line = String::new();
        let n = (&mut self.reader)
            .take(MAX_LINE)
            .read_line(&mut line)
            .map_err(|e| xerr(self.peer, format!("receive failed: {e}")))?;
        if n == 0 {
            return Err(xerr(self.peer, "the peer closed the connection"));
        }
        serde_json::from_str(line.trim_end()).map_err(|e| {
            xerr(
                self.peer,
                format!("unexpected message ({e}): {}", line.trim_end()),
            )
        })
    }

    /// Sends `mine` and returns what the peer sent.
    pub fn exchange<T: Serialize + DeserializeOwned>(&mut self, mine: &T) -> Result<T> {
        self.send(mine)?;
        self.recv()
    }

    /// True when the peer has sent something (non-blocking check).
    pub fn readable(&mut self) -> bool {
        if !self.reader.buffer().is_empty() {
            return true;
        }
        let _ = self.writer.set_nonblocking(true);
        let mut b = [0u8; 1];
        let r = self.writer.peek(&mut b);
        let _ = self.writer.set_nonblocking(false);
        matches!(r, Ok(n) if n > 0) || matches!(r, Ok(0))
    }
}

/// The connection's socket, so a device can wake when the peer speaks
/// ([`Context::watch_fd`](crate::Context::watch_fd)).
impl std::os::fd::AsRawFd for Control {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.writer.as_raw_fd()
    }
}
