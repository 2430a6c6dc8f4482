//! Workloads for the analysis: what the application asks of the path.
//!
//! Keys (the `roce analyze --workload KEY=VALUE` contract): `op`
//! (send|write|read|atomic), `size`, `qps`, `sges`, `signal_every`,
//! `inline` (true|false), `batch`, `incast`, `numa` (local|remote),
//! `mtu`, and `threads` (cores posting and polling, default 1).

use crate::numa::Placement;
use std::fmt;

/// The verb each work request performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Send,
    Write,
    Read,
    Atomic,
}

impl Op {
    /// Whether the requester holds the payload (SEND, WRITE) or the
    /// responder does (READ, ATOMIC).
    pub fn requester_is_source(self) -> bool {
        matches!(self, Self::Send | Self::Write)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Write => "write",
            Self::Read => "read",
            Self::Atomic => "atomic",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A bad workload key or value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    #[error("workload: expected KEY=VALUE, got `{0}`")]
    Syntax(String),
    #[error("workload: unknown key `{0}` (known: {KEYS})")]
    UnknownKey(String),
    #[error("workload: {key}={value}: {msg}")]
    Value {
        key: String,
        value: String,
        msg: String,
    },
}

const KEYS: &str = "op, size, qps, sges, signal_every, inline, batch, incast, numa, mtu, threads";

/// One workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub op: Op,
    /// Message size, bytes.
    pub size: u64,
    /// Queue pairs in use on each sender.
    pub qps: u32,
    /// Scatter/gather entries per WQE.
    pub sges: u32,
    /// One signaled WQE (one CQE) every this many.
    pub signal_every: u32,
    /// Push small payloads inside the WQE.
    pub inline: bool,
    /// WQEs per doorbell.
    pub batch: u32,
    /// Senders writing to one receiver.
    pub incast: u32,
    pub numa: Placement,
    /// RoCE path MTU, bytes.
    pub mtu: u64,
    /// Cores posting and polling on each side.
    pub threads: u32,
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            op: Op::Write,
            size: 65536,
            qps: 1,
            sges: 1,
            signal_every: 1,
            inline: false,
            batch: 1,
            incast: 1,
            numa: Placement::Local,
            mtu: 4096,
            threads: 1,
        }
    }
}

/// Parses `64`, `4K`, `4KiB`, `2M`, `1G` (binary multiples).
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, mul) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], 1u64 << 10),
        'm' | 'M' => (&t[..t.len() - 1], 1 << 20),
        'g' | 'G' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

impl Workload {
    /// Applies one `KEY=VALUE`.
    pub fn set(&mut self, kv: &str) -> Result<(), WorkloadError> {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| WorkloadError::Syntax(kv.into()))?;
        let (k, v) = (k.trim(), v.trim());
        let bad = |msg: &str| WorkloadError::Value {
            key: k.into(),
            value: v.into(),
            msg: msg.into(),
        };
        let count = |min: u32| -> Result<u32, WorkloadError> {
            match parse_size(v) {
                Some(n) if n >= u64::from(min) && n <= u64::from(u32::MAX) => Ok(n as u32),
                _ => Err(bad(&format!("expected a whole number ≥ {min}"))),
            }
        };
        match k {
            "op" => {
                self.op = match v {
                    "send" => Op::Send,
                    "write" => Op::Write,
                    "read" => Op::Read,
                    "atomic" => Op::Atomic,
                    _ => return Err(bad("expected send, write, read or atomic")),
                }
            }
            "size" => {
                self.size = parse_size(v).ok_or_else(|| bad("expected bytes, e.g. 64, 4K, 1M"))?
            }
            "qps" => self.qps = count(1)?,
            "sges" => self.sges = count(1)?,
            "signal_every" => self.signal_every = count(1)?,
            "batch" => self.batch = count(1)?,
            "incast" => self.incast = count(1)?,
            "threads" => self.threads = count(1)?,
            "inline" => {
                self.inline = match v {
                    "true" => true,
                    "false" => false,
                    _ => return Err(bad("expected true or false")),
                }
            }
            "numa" => {
                self.numa = match v {
                    "local" => Placement::Local,
                    "remote" => Placement::Remote,
                    _ => return Err(bad("expected local or remote")),
                }
            }
            "mtu" => {
                self.mtu = match parse_size(v) {
                    Some(m @ (256 | 512 | 1024 | 2048 | 4096)) => m,
                    _ => return Err(bad("expected 256, 512, 1024, 2048 or 4096")),
                }
            }
            _ => return Err(WorkloadError::UnknownKey(k.into())),
        }
        Ok(())
    }

    /// A workload from `KEY=VALUE` pairs over the defaults.
    pub fn from_pairs<S: AsRef<str>>(pairs: &[S]) -> Result<Self, WorkloadError> {
        let mut w = Self::default();
        for p in pairs {
            w.set(p.as_ref())?;
        }
        Ok(w)
    }

    /// The workload as `KEY=VALUE` pairs (for printing).
    pub fn describe(&self) -> String {
        format!(
            "op={} size={} qps={} sges={} signal_every={} inline={} batch={} incast={} numa={} mtu={} threads={}",
            self.op,
            self.size,
            self.qps,
            self.sges,
            self.signal_every,
            self.inline,
            self.batch,
            self.incast,
            match self.numa {
                Placement::Local => "local",
                Placement::Remote => "remote",
            },
            self.mtu,
            self.threads
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys() {
        let w = Workload::from_pairs(&[
            "op=send",
            "size=4K",
            "qps=2000",
            "inline=true",
            "numa=remote",
            "mtu=1024",
        ])
        .unwrap();
        assert_eq!(
            (w.op, w.size, w.qps, w.inline, w.numa, w.mtu),
            (Op::Send, 4096, 2000, true, Placement::Remote, 1024)
        );
        assert_eq!(parse_size("4M"), Some(4 << 20));
        assert_eq!(parse_size("64"), Some(64));
        assert_eq!(parse_size("2KiB"), Some(2048));
        assert!(matches!(
            Workload::from_pairs(&["colour=red"]),
            Err(WorkloadError::UnknownKey(_))
        ));
        assert!(matches!(
            Workload::from_pairs(&["mtu=1500"]),
            Err(WorkloadError::Value { .. })
        ));
        assert!(matches!(
            Workload::from_pairs(&["qps=0"]),
            Err(WorkloadError::Value { .. })
        ));
        assert!(matches!(
            Workload::from_pairs(&["size"]),
            Err(WorkloadError::Syntax(_))
        ));
    }
}
