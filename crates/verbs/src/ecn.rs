//! A queue-driven ECN marker for real sockets: RED over the receive
//! socket's backlog, marking received packets Congestion Experienced as a
//! switch egress queue would (Floyd & Jacobson 1993; DCQCN's switch
//! configuration, Zhu et al. SIGCOMM 2015 §3.1: no mark below Kmin, a
//! probability rising linearly to Pmax at Kmax, every packet above Kmax).
//!
//! The kernels these tools run on may lack every ECN-marking qdisc (`red`,
//! `fq_codel`, `netem`), yet the one queue that builds when a receiver falls
//! behind is its socket's receive queue. The backlog is read after each
//! receive, so the packets just taken are judged by the queue they left.
//!
//! The backlog is the socket's receive-memory charge (`SO_MEMINFO`'s
//! `SK_MEMINFO_RMEM_ALLOC`), which is what the kernel compares with
//! `SO_RCVBUF` when it drops; for UDP, `FIONREAD` reports only the next
//! datagram's length, not the queue. The charge counts each datagram's
//! buffer (`truesize`), so Kmin and Kmax are in those bytes, as the socket
//! buffer size is.
//!
//! With UDP GRO on, one receive may hold several datagrams coalesced; the
//! marker judges the receive, so they are marked (or not) together, as a
//! burst leaving one queue would be.

use crate::sys::RecvMeta;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::os::fd::RawFd;

/// RED thresholds (bytes of receive-queue charge) and the marking
/// probability at Kmax.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RedConfig {
    pub kmin_bytes: u64,
    pub kmax_bytes: u64,
    pub pmax: f64,
}

/// A RED setting that cannot work, naming the value at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RedError {
    #[error("RED needs KMIN,KMAX,PMAX (three comma-separated values), got \"{0}\"")]
    Shape(String),
    #[error("RED {what}: cannot read \"{text}\" as a number")]
    Number { what: &'static str, text: String },
    #[error("RED thresholds: expected KMIN < KMAX, got {kmin} ≥ {kmax} bytes")]
    Order { kmin: u64, kmax: u64 },
    #[error("RED PMAX: expected 0 < PMAX ≤ 1, got {0}")]
    Pmax(f64),
}

impl RedConfig {
    pub fn new(kmin_bytes: u64, kmax_bytes: u64, pmax: f64) -> Result<RedConfig, RedError> {
        if kmin_bytes >= kmax_bytes {
            return Err(RedError::Order {
                kmin: kmin_bytes,
                kmax: kmax_bytes,
            });
        }
        if !(pmax > 0.0 && pmax <= 1.0) {
            return Err(RedError::Pmax(pmax));
        }
        Ok(RedConfig {
            kmin_bytes,
            kmax_bytes,
            pmax,
        })
    }

    /// `KMIN,KMAX,PMAX`, the thresholds in bytes with an optional `K`/`M`
    /// suffix (KiB, MiB): `--ce-red 64K,512K,0.2`.
    pub fn parse(s: &str) -> Result<RedConfig, RedError> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let [kmin, kmax, pmax] = parts[..] else {
            return Err(RedError::Shape(s.to_string()));
        };
        let bytes = |what: &'static str, t: &str| {
            let (num, mult) = match t.char_indices().last() {
                Some((i, 'K' | 'k')) => (&t[..i], 1024),
                Some((i, 'M' | 'm')) => (&t[..i], 1024 * 1024),
                _ => (t, 1),
            };
            num.parse::<u64>()
                .ok()
                .and_then(|n| n.checked_mul(mult))
                .ok_or_else(|| RedError::Number {
                    what,
                    text: t.to_string(),
                })
        };
        let p = pmax.parse::<f64>().map_err(|_| RedError::Number {
            what: "PMAX",
            text: pmax.to_string(),
        })?;
        RedConfig::new(bytes("KMIN", kmin)?, bytes("KMAX", kmax)?, p)
    }

    /// The marking probability at `backlog` bytes.
    pub fn probability(&self, backlog: u64) -> f64 {
        if backlog <= self.kmin_bytes {
            0.0
        } else if backlog >= self.kmax_bytes {
            1.0
        } else {
            self.pmax * (backlog - self.kmin_bytes) as f64
                / (self.kmax_bytes - self.kmin_bytes) as f64
        }
    }
}

/// What the marker saw and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RedStats {
    /// Packets it marked CE.
    pub marked: u64,
    /// Backlog readings (one per receive that found datagrams).
    pub samples: u64,
    pub backlog_max_bytes: u64,
    /// Mean of the readings.
    pub backlog_mean_bytes: u64,
    /// Readings above Kmax.
    pub above_kmax: u64,
}

/// The marker of one engine: seeded, so a run's marks are repeatable for
/// the same sequence of backlogs.
pub struct RedMarker {
    cfg: RedConfig,
    rng: ChaCha8Rng,
    sum: f64,
    pub stats: RedStats,
}

impl RedMarker {
    pub fn new(cfg: RedConfig, seed: u64) -> RedMarker {
        RedMarker {
            cfg,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5245_4400),
            sum: 0.0,
            stats: RedStats::default(),
        }
    }

    /// Judges the datagrams just received on `fd` (`metas`) by the backlog
    /// they leave behind, marking the ECN-capable ones CE in place.
    pub fn mark(&mut self, fd: RawFd, metas: &mut [RecvMeta]) {
        let Some(backlog) = rmem_alloc(fd) else {
            return;
        };
        self.observe(backlog, metas);
    }

    /// [`mark`](Self::mark) with a known backlog.
    pub fn observe(&mut self, backlog: u64, metas: &mut [RecvMeta]) {
        let s = &mut self.stats;
        s.samples += 1;
        s.backlog_max_bytes = s.backlog_max_bytes.max(backlog);
        self.sum += backlog as f64;
        s.backlog_mean_bytes = (self.sum / s.samples as f64).round() as u64;
        if backlog >= self.cfg.kmax_bytes {
            s.above_kmax += 1;
        }
        let p = self.cfg.probability(backlog);
        if p <= 0.0 {
            return;
        }
        for m in metas.iter_mut().filter(|m| m.tos & 3 == 2) {
            let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            if u < p {
                m.tos |= 3;
                self.stats.marked += 1;
            }
        }
    }
}

/// The socket's receive-queue charge in bytes (`SO_MEMINFO`).
pub fn rmem_alloc(fd: RawFd) -> Option<u64> {
    // SK_MEMINFO_VARS is 9 (SK_MEMINFO_DROPS + 1) since Linux 4.4.
    let mut info = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    (r == 0).then(|| u64::from(info[libc::SK_MEMINFO_RMEM_ALLOC as usize]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(tos: u8) -> RecvMeta {
        RecvMeta {
            len: 100,
            src: "127.0.0.1:1".parse().unwrap(),
            tos,
            truncated: false,
            seg: 0,
            ctrunc: false,
        }
    }

    #[test]
    fn parse_reads_suffixes_and_names_what_is_wrong() {
        let r = RedConfig::parse("64K, 1M ,0.2").unwrap();
        assert_eq!((r.kmin_bytes, r.kmax_bytes, r.pmax), (65536, 1 << 20, 0.2));
        assert!(matches!(RedConfig::parse("1,2"), Err(RedError::Shape(_))));
        assert!(matches!(
            RedConfig::parse("x,2,0.1"),
            Err(RedError::Number { what: "KMIN", .. })
        ));
        assert!(matches!(
            RedConfig::parse("9,2,0.1"),
            Err(RedError::Order { .. })
        ));
        assert!(matches!(
            RedConfig::parse("1,2,1.5"),
            Err(RedError::Pmax(_))
        ));
        assert!(matches!(RedConfig::parse("1,2,0"), Err(RedError::Pmax(_))));
    }

    #[test]
    fn marks_follow_the_red_curve_and_spare_non_ect() {
        let cfg = RedConfig::new(1000, 3000, 0.5).unwrap();
        assert_eq!(cfg.probability(1000), 0.0);
        assert_eq!(cfg.probability(2000), 0.25);
        assert_eq!(cfg.probability(3000), 1.0);
        let mut m = RedMarker::new(cfg, 1);
        let mut below = vec![meta(2); 100];
        m.observe(500, &mut below);
        assert!(below.iter().all(|x| x.tos == 2));
        let mut above = vec![meta(2); 100];
        m.observe(5000, &mut above);
        assert!(above.iter().all(|x| x.tos == 3));
        let mut not_ect = vec![meta(0); 10];
        m.observe(5000, &mut not_ect);
        assert!(not_ect.iter().all(|x| x.tos == 0));
        let mut mid = vec![meta(2); 4000];
        m.observe(2000, &mut mid);
        let marked = mid.iter().filter(|x| x.tos == 3).count();
        assert!(
            (800..1200).contains(&marked),
            "{marked} of 4000 at p = 0.25"
        );
        assert_eq!(m.stats.marked, 100 + marked as u64);
        assert_eq!(m.stats.backlog_max_bytes, 5000);
        assert_eq!(m.stats.above_kmax, 2);
    }

    #[test]
    fn a_fresh_socket_has_no_backlog() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        use std::os::fd::AsRawFd;
        assert_eq!(rmem_alloc(s.as_raw_fd()), Some(0));
        let t = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        t.send_to(&[0u8; 1000], s.local_addr().unwrap()).unwrap();
        // Loopback delivers inside the sending call.
        assert!(rmem_alloc(s.as_raw_fd()).unwrap() >= 1000);
    }
}
