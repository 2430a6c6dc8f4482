//! The TCP connection of the out-of-band exchange: perftest's fixed-size
//! steps (the client writes first, the server reads first) and, between
//! two roce peers, the extension's JSON lines on the same stream.

use crate::perftest::{self, BwReport, Keys, PeerVersion, PerftestError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Which side of the exchange this is: perftest's client writes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// What went wrong on the connection.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("out-of-band exchange with {peer}: {why}")]
    Connect { peer: String, why: String },
    #[error("out-of-band exchange with {peer}, {step}: the peer closed the connection")]
    Closed {
        peer: SocketAddr,
        step: &'static str,
    },
    #[error("out-of-band exchange with {peer}, {step}: {source}")]
    Io {
        peer: SocketAddr,
        step: &'static str,
        source: std::io::Error,
    },
    #[error(
        "out-of-band exchange with {peer}, {step}: no answer within {after:?} (is the server busy serving other clients, or started with fewer --threads?)"
    )]
    Silent {
        peer: SocketAddr,
        step: &'static str,
        after: std::time::Duration,
    },
    #[error("out-of-band exchange with {peer}, {step}: {source}")]
    Perftest {
        peer: SocketAddr,
        step: &'static str,
        source: PerftestError,
    },
    #[error("out-of-band exchange with {peer}: unexpected message ({why}): {line}")]
    Json {
        peer: SocketAddr,
        why: String,
        line: String,
    },
}

/// The longest extension line accepted.
const MAX_LINE: u64 = 1 << 20;

pub struct Wire {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    role: Role,
    /// The read timeout in force, to name it when it expires.
    read_timeout: Option<Duration>,
}

/// The connection's socket, so a device blocked in `epoll` wakes when the
/// peer speaks ([`roce_verbs::Context::watch_fd`]).
impl std::os::fd::AsRawFd for Wire {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.writer.as_raw_fd()
    }
}

impl Wire {
    fn from_stream(s: TcpStream, role: Role) -> Result<Wire, WireError> {
        let io = |peer: String, e: std::io::Error| WireError::Connect {
            peer,
            why: e.to_string(),
        };
        let peer = s.peer_addr().map_err(|e| io("?".into(), e))?;
        let local = s.local_addr().map_err(|e| io(peer.to_string(), e))?;
        let _ = s.set_nodelay(true);
        let writer = s.try_clone().map_err(|e| io(peer.to_string(), e))?;
        Ok(Wire {
            reader: BufReader::new(s),
            writer,
            peer,
            local,
            role,
            read_timeout: None,
        })
    }

    /// Gives up a read after `t` (`None`: wait as long as it takes). A
    /// client sets one for the greeting, which a server answers at once
    /// when it serves us at all; the run itself may be silent for `-D`.
    pub fn set_read_timeout(&mut self, t: Option<Duration>) -> Result<(), WireError> {
        self.writer
            .set_read_timeout(t)
            .map_err(|e| self.io("setting a read timeout", e))?;
        self.read_timeout = t;
        Ok(())
    }

    /// Connects to `server` (host:port), trying for at most `timeout`.
    pub fn connect(server: &str, timeout: Duration) -> Result<Wire, WireError> {
        let fail = |why: String| WireError::Connect {
            peer: server.to_string(),
            why,
        };
        let addrs: Vec<SocketAddr> = server
            .to_socket_addrs()
            .map_err(|e| fail(format!("cannot resolve: {e}")))?
            .collect();
        let mut last = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, timeout) {
                Ok(s) => return Self::from_stream(s, Role::Client),
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => fail(
                "connection refused: is the server side (`roce perf TEST` without SERVER, or ib_*_bw) running there?".into(),
            ),
            Some(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                fail(format!("unreachable: no answer within {timeout:?}"))
            }
            Some(e) => fail(format!("unreachable: {e}")),
            None => fail("resolves to no address".into()),
        })
    }

    /// Accepts one connection.
    pub fn accept(listener: &TcpListener) -> Result<Wire, WireError> {
        let (s, _) = listener.accept().map_err(|e| WireError::Connect {
            peer: listener.local_addr().map_or("?".into(), |a| a.to_string()),
            why: e.to_string(),
        })?;
        Self::from_stream(s, Role::Server)
    }

    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
    /// The IP the peer reached us on: the one to open the device on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
    pub fn role(&self) -> Role {
        self.role
    }

    fn io(&self, step: &'static str, e: std::io::Error) -> WireError {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            WireError::Closed {
                peer: self.peer,
                step,
            }
        } else if let (Some(after), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =
            (self.read_timeout, e.kind())
        {
            WireError::Silent {
                peer: self.peer,
                step,
                after,
            }
        } else {
            WireError::Io {
                peer: self.peer,
                step,
                source: e,
            }
        }
    }

    fn perftest(&self, step: &'static str, e: PerftestError) -> WireError {
        WireError::Perftest {
            peer: self.peer,
            step,
            source: e,
        }
    }

    /// One of perftest's symmetric steps: the client writes `mine` and
    /// reads as many bytes; the server reads first, then writes.
    pub fn xchg<const N: usize>(
        &mut self,
        step: &'static str,
        mine: &[u8; N],
    ) -> Result<[u8; N], WireError> {
        let mut theirs = [0u8; N];
        if self.role == Role::Client {
            self.writer.write_all(mine).map_err(|e| self.io(step, e))?;
            self.reader
                .read_exact(&mut theirs)
                .map_err(|e| self.io(step, e))?;
        } else {
            self.reader
                .read_exact(&mut theirs)
                .map_err(|e| self.io(step, e))?;
            self.writer.write_all(mine).map_err(|e| self.io(step, e))?;
        }
        Ok(theirs)
    }

    /// Steps 1-3: version, system data, MTU. `mtu` in bytes (a path MTU).
    pub fn greet(&mut self, mtu: u32) -> Result<Greeting, WireError> {
        let v = self.xchg("version", &perftest::encode_version(perftest::ROCE_VERSION))?;
        let version = perftest::decode_version(&v).map_err(|e| self.perftest("version", e))?;
        let cycle = self.xchg(
            "cycle buffer",
            &perftest::encode_int(perftest::CYCLE_BUFFER),
        )?;
        let line = self.xchg(
            "cache line size",
            &perftest::encode_int(perftest::CACHE_LINE),
        )?;
        let cycle_buffer = perftest::decode_int(cycle);
        if cycle_buffer > perftest::MAX_CYCLE_BUFFER {
            return Err(self.perftest(
                "cycle buffer",
                PerftestError::Incompatible(format!(
                    "the peer's cycle buffer of {cycle_buffer} bytes exceeds {} (a page size is expected)",
                    perftest::MAX_CYCLE_BUFFER
                )),
            ));
        }
        let m = perftest::encode_mtu(mtu).ok_or_else(|| {
            self.perftest(
                "MTU",
                PerftestError::Incompatible(format!("{mtu} is not a path MTU")),
            )
        })?;
        let m = self.xchg("MTU", &m)?;
        let peer_mtu = perftest::decode_mtu(m).map_err(|e| self.perftest("MTU", e))?;
        Ok(Greeting {
            version,
            cycle_buffer,
            cache_line: perftest::decode_int(line),
            mtu: peer_mtu,
        })
    }

    /// One QP's key message.
    pub fn keys(&mut self, step: &'static str, mine: &Keys) -> Result<Keys, WireError> {
        let b = self.xchg(step, &mine.encode())?;
        Keys::decode(&b).map_err(|e| self.perftest(step, e))
    }

    /// The client's bandwidth report; the server's side of it is zeros, as
    /// a passive perftest server's.
    pub fn bw_reports(&mut self, mine: &BwReport) -> Result<BwReport, WireError> {
        let mut w = [[0u8; 8]; 5];
        for (i, m) in mine.words().iter().enumerate() {
            w[i] = self.xchg("bandwidth report", m)?;
        }
        Ok(BwReport::from_words(w))
    }

    /// Sends one extension message (roce peers only).
    pub fn send<T: Serialize>(&mut self, v: &T) -> Result<(), WireError> {
        let mut line = serde_json::to_vec(v).map_err(|e| WireError::Json {
            peer: self.peer,
            why: e.to_string(),
            line: String::new(),
        })?;
        line.push(b'\n');
        self.writer
            .write_all(&line)
            .map_err(|e| self.io("roce extension", e))
    }

    /// Receives one extension message.
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<T, WireError> {
        let mut line = String::new();
        let n = (&mut self.reader)
            .take(MAX_LINE)
            .read_line(&mut line)
            .map_err(|e| self.io("roce extension", e))?;
        if n == 0 {
            return Err(WireError::Closed {
                peer: self.peer,
                step: "roce extension",
            });
        }
        serde_json::from_str(line.trim_end()).map_err(|e| WireError::Json {
            peer: self.peer,
            why: e.to_string(),
            line: line.trim_end().to_string(),
        })
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
        // Data or an orderly close (0 bytes) both mean "look".
        r.is_ok()
    }
}

/// What the peer said in steps 1-3.
#[derive(Debug, Clone)]
pub struct Greeting {
    pub version: PeerVersion,
    pub cycle_buffer: u32,
    pub cache_line: u32,
    /// The peer's MTU in bytes.
    pub mtu: u32,
}
