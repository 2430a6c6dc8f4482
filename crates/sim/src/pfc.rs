//! The switch buffer (MMU) and priority flow control (IEEE 802.1Qbb).
//!
//! Buffer accounting is per *ingress* port × priority, the way PFC needs it:
//! a port must tell its upstream neighbour to stop before the bytes that
//! neighbour sends overflow what the switch set aside for it. Each ingress
//! queue has three pools, filled in this order and drained in the reverse:
//!
//! 1. a guaranteed *reserve*;
//! 2. a share of the common pool limited by a *dynamic threshold*
//!    `alpha × (free shared bytes)` (Choudhury & Hahne, "Dynamic queue length
//!    thresholds for shared-memory packet switches", IEEE/ACM ToN 1998), or a
//!    static byte limit;
//! 3. for lossless priorities, a per-port *headroom* that absorbs what is
//!    still in flight after XOFF is sent: about two link delays of traffic
//!    plus a maximum frame at each end (802.1Qbb Annex N; the HPCC ns-3
//!    simulator uses three link-delay BDPs).
//!
//! XOFF goes out when an ingress queue reaches the threshold (or starts
//! using headroom) and XON when it has drained to `threshold - xon_offset`
//! with no headroom in use. Lossy priorities never pause and are dropped
//! when the reserve and the shared share are both exhausted; lossless
//! packets are dropped only when headroom overflows, which a correctly
//! sized headroom never allows.

use serde::{Deserialize, Serialize};

/// How the XOFF threshold is computed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Threshold {
    /// `alpha × free shared bytes` (dynamic threshold).
    Dynamic { alpha: f64 },
    /// A fixed number of shared bytes per ingress queue.
    Static { bytes: u64 },
}

/// Buffer and PFC settings of one switch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BufferConfig {
    pub size_bytes: u64,
    /// Guaranteed bytes per ingress port × priority.
    pub reserve_bytes: u64,
    pub threshold: Threshold,
    /// XON when the shared use is this far below the threshold.
    pub xon_offset_bytes: u64,
    /// Headroom per ingress port × lossless priority; `None` sizes it from
    /// the attached link (see [`auto_headroom`]).
    pub headroom_bytes: Option<u64>,
    /// Bit `p` set: priority `p` is lossless (PFC-enabled).
    pub lossless: u8,
    /// Pause time carried by XOFF frames, in 512-bit-time quanta (the
    /// same count on every link, so a shorter pause on a faster link).
    pub pause_quanta: u16,
    /// A pause *time* instead, the same on every link: each XOFF carries
    /// it in the quanta of the link it is sent on (see
    /// [`pause_quanta_at`](Self::pause_quanta_at)). The HPCC simulator's
    /// `PAUSE_TIME` is one time in µs for every link speed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_time_ps: Option<u64>,
    /// With a dynamic threshold: a port faster than this rate doubles its
    /// alpha for each doubling of speed over it, up to 1 (the HPCC ns-3
    /// simulator's `pfc_a_shift`, set per port from the NIC rate in
    /// third.cc), so a fast fabric port may hold a larger share of the
    /// pool than a host port. `None`: one alpha for every port.
    #[serde(default)]
    pub alpha_speed_ref_bps: Option<u64>,
    /// When `headroom_bytes` is `None`: the headroom of a port is this many
    /// bandwidth-delay products of its link (`rate × delay`), as ns-3's
    /// third.cc sizes it (3); `None` sizes it with [`auto_headroom`].
    #[serde(default)]
    pub headroom_link_bdps: Option<u64>,
    /// Take the reserve out of the common pool once per port rather than
    /// once per port × priority (ns-3's `total_rsrv`: only its one data
    /// queue per port ever uses a reserve).
    #[serde(default)]
    pub reserve_once_per_port: bool,
}

impl BufferConfig {
    /// The quanta an XOFF sent on a `rate_bps` link carries: 802.1Qbb
    /// counts pause time in quanta of 512 bit times *of that link*
    /// (IEEE 802.1Q-2018 §36.1.3.1), so one pause time is 976.6 quanta at
    /// 100 Gb/s and 3,906.25 at 400 Gb/s. A time is rounded up to whole
    /// quanta (the pause lasts at least that long) and capped at 0xffff
    /// (335 µs at 100 Gb/s, 84 µs at 400 Gb/s).
    pub fn pause_quanta_at(&self, rate_bps: u64) -> u16 {
        match self.pause_time_ps {
            None => self.pause_quanta.max(1),
            Some(ps) => quanta_for(ps, rate_bps),
        }
    }
}

/// `ps` of pause in 512-bit-time quanta at `rate_bps`, rounded up and kept
/// to `1..=0xffff`.
pub fn quanta_for(ps: u64, rate_bps: u64) -> u16 {
    let bits = u128::from(ps) * u128::from(rate_bps);
    let q = bits.div_ceil(512 * 1_000_000_000_000);
    q.clamp(1, 0xffff) as u16
}

impl Default for BufferConfig {
    fn default() -> Self {
        BufferConfig {
            size_bytes: 32 << 20,
            reserve_bytes: 0,
            threshold: Threshold::Dynamic { alpha: 0.125 },
            xon_offset_bytes: 2 * 1100,
            headroom_bytes: None,
            lossless: 1 << 3,
            pause_quanta: 0xffff,
            pause_time_ps: None,
            alpha_speed_ref_bps: None,
            headroom_link_bdps: None,
            reserve_once_per_port: false,
        }
    }
}

impl BufferConfig {
    /// The headroom of a port on a link of `rate_bps` and `delay_ps`
    /// carrying frames of up to `max_frame` bytes (see
    /// [`headroom_link_bdps`](Self::headroom_link_bdps)).
    pub fn headroom_for(&self, rate_bps: u64, delay_ps: u64, max_frame: u64) -> u64 {
        match (self.headroom_bytes, self.headroom_link_bdps) {
            (Some(b), _) => b,
            // third.cc: `rate * delay / 8 / 1e9 * 3` with the delay in ns.
            (None, Some(n)) => {
                (u128::from(rate_bps) * u128::from(delay_ps / 1000) / 8 / 1_000_000_000) as u64 * n
            }
            (None, None) => auto_headroom(rate_bps, delay_ps, max_frame),
        }
    }

    /// The dynamic-threshold alpha of a port of `rate_bps` (see
    /// [`alpha_speed_ref_bps`](Self::alpha_speed_ref_bps)).
    pub fn alpha_for(&self, alpha: f64, rate_bps: u64) -> f64 {
        let Some(reference) = self.alpha_speed_ref_bps else {
            return alpha;
        };
        // third.cc: `while (rate > nic_rate && shift > 0) { shift--; rate /= 2; }`.
        let (mut a, mut r) = (alpha, rate_bps);
        while r > reference && a < 1.0 {
            a = (a * 2.0).min(1.0);
            r /= 2;
        }
        a
    }
}

/// Headroom for a port: the bytes that can still arrive after the switch
/// decides to pause — the XOFF's flight and the peer's reaction (one link
/// delay each way at line rate), a maximum frame the peer has started,
/// one we may be sending ahead of the XOFF, and one more for the decision.
pub fn auto_headroom(rate_bps: u64, delay_ps: u64, max_frame: u64) -> u64 {
    let bdp = (u128::from(rate_bps) * u128::from(delay_ps) / 8 / 1_000_000_000_000) as u64;
    2 * bdp + 3 * max_frame
}

/// Where an admitted packet's bytes were counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Reserve,
    Shared,
    Headroom,
    Drop,
}

/// The accounts of one ingress queue (port × priority), together so a
/// packet touches one cache line of them. 32 bytes, aligned to 32: with
/// the allocator's 16-byte alignment every other account straddled two
/// lines (on the 320-host fat tree the account was the simulator's
/// largest single source of cache misses, two per admitted packet).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(32))]
struct Ingress {
    rsv: u64,
    shared: u64,
    hdrm: u64,
    xoff: bool,
    /// The priority's configuration, copied into the account's padding
    /// so that admitting a packet reads no configuration line: whether
    /// it is lossless.
    lossless: bool,
}

impl Ingress {
    /// Takes `size` bytes off the account: headroom first, then shared
    /// (off the pool's `shared_used` too), then reserve, each no more
    /// than it holds.
    #[inline(always)]
    fn release_walk(&mut self, shared_used: &mut u64, size: u64) {
        let mut left = size;
        let h = self.hdrm.min(left);
        self.hdrm -= h;
        left -= h;
        let s = self.shared.min(left);
        self.shared -= s;
        *shared_used -= s;
        left -= s;
        self.rsv -= self.rsv.min(left);
    }

    /// XOFF is due (see [`Mmu::check_xoff`]): `above_zero` tells whether
    /// every port's threshold is at least a byte now, `threshold` gives
    /// this port's (computed only when needed).
    #[inline(always)]
    fn xoff_due(&self, above_zero: bool, threshold: impl FnOnce() -> u64) -> bool {
        if !self.lossless || self.xoff {
            return false;
        }
        // An empty share is at the threshold only when that is zero, which
        // the smallest alpha rules out without reading this port's.
        let over = self.shared > 0 || !above_zero;
        self.hdrm > 0 || (over && self.shared >= threshold())
    }

    /// XON is due (see [`Mmu::check_xon`]).
    #[inline(always)]
    fn xon_due(&self, xon_offset: u64, threshold: impl FnOnce() -> u64) -> bool {
        if !self.xoff || self.hdrm > 0 {
            return false;
        }
        self.shared == 0 || self.shared + xon_offset <= threshold()
    }
}

/// `threshold`'s limit for a port of `alpha` with `free` shared bytes
/// (see [`Mmu::threshold`]).
#[inline(always)]
fn threshold_of(threshold: Threshold, alpha: impl FnOnce() -> f64, free: u64) -> u64 {
    match threshold {
        Threshold::Dynamic { .. } => {
            let alpha = alpha();
            // `(alpha × free as f64) as u64`, through the signed
            // conversions (one instruction each) wherever they give
            // the same value: `free` below 2⁶³ and the product below
            // 2⁶³ (a negative product is 0 either way).
            if free < 1 << 63 {
                let x = alpha * free as i64 as f64;
                if x < 9_223_372_036_854_775_808.0 {
                    return (x as i64).max(0) as u64;
                }
            }
            (alpha * free as f64) as u64
        }
        Threshold::Static { bytes } => bytes,
    }
}

/// The smallest `shared_used` at which some port's threshold may be zero
/// bytes (see [`Mmu::zero_from`]): with the dynamic threshold, where
/// `min_alpha × (pool - used) as f64 >= 1.0` stops holding — the product
/// never falls as the free pool grows (a conversion and a multiplication
/// by a number not below zero both round monotonically), so the free
/// pools where it holds are those from the smallest one, found by
/// bisection with the very same expression; a static threshold is above
/// zero always (`u64::MAX`) or never (0).
fn zero_from(threshold: Threshold, min_alpha: f64, pool: u64) -> u64 {
    if let Threshold::Static { bytes } = threshold {
        return if bytes > 0 { u64::MAX } else { 0 };
    }
    let above = |free: u64| min_alpha * free as f64 >= 1.0;
    if !above(pool) {
        return 0;
    }
    // `above(hi)` holds, `above(lo)` does not (nothing is at a free pool
    // of 0: the product is 0 or NaN).
    let (mut lo, mut hi) = (0u64, pool);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if above(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    // Above zero while `pool - used >= hi`, i.e. `used <= pool - hi`.
    pool - hi + 1
}

/// Per-switch buffer state.
///
/// Laid out (`repr(C)`, line-aligned) so that admitting or releasing a
/// packet within its queue's reserve, and the XOFF check after it, read
/// one line of it besides the queue's account: the first line holds the
/// accounts' place, the pool totals, the reserve and the smallest alpha;
/// what a packet that needs the shared pool also reads (the threshold,
/// the ports' alphas) comes after. (The packet's priority's configuration
/// is in its account's line.) Spread over the struct as it was, a switch
/// arrival missed four lines of it on the 320-host fat tree, and with the
/// configuration on a second line, two. (A lossless packet admitted into
/// headroom also reads the port's entry of `headroom`, a line of its own:
/// the rare case, under a pause.)
///
/// A measured dead end (session 21): a port's accounts for the data and
/// the ACK priorities (3 and 6) on one line, through a table of where
/// each priority's account sits in its port's block (on the first line,
/// `peak` moved to the second), so that a k=32 fat tree's 41,000 switch
/// ports' accounts touched 41,000 lines rather than 82,000. Outputs were
/// identical, but the extra indirection on every admit and release cost
/// 43 M instructions on the 1 ms HPCC fat tree (15,336 M -> 15,379 M),
/// and user time at k=32 moved by noise only (ratios 0.87-1.11 over four
/// interleaved pairs at load 5-7).
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub struct Mmu {
    /// Indexed by `port × 8 + priority`.
    q: Box<[Ingress]>,
    /// `cfg`'s `reserve_bytes`.
    reserve_bytes: u64,
    shared_pool: u64,
    shared_used: u64,
    /// Bytes held, all pools.
    pub used: u64,
    /// Most bytes ever held.
    pub peak: u64,
    /// Every port's threshold is at least one byte while `shared_used`
    /// is below this (see [`zero_from`]): the zero test of an empty
    /// share's XOFF check (see [`Mmu::check_xoff`]) as one comparison,
    /// not a conversion and a multiplication per packet.
    zero_from: u64,
    /// Dynamic-threshold alpha of each port.
    alpha: Box<[f64]>,
    /// Port `p`'s alpha is `alpha[p & alpha_mask]`: 0 when every port's
    /// is the same (see [`alpha_uniform`](Self::alpha_uniform)), so that
    /// all of a switch's packets read its first, one line that stays
    /// cached, rather than one of its ports' four lines (a k=32 fat tree
    /// admits every packet into the shared pool, its reserve being 0).
    alpha_mask: usize,
    /// `cfg`'s `threshold` and `xon_offset_bytes`.
    threshold: Threshold,
    xon_offset_bytes: u64,
    cfg: BufferConfig,
    headroom: Vec<u64>,
}

const NPRIO: usize = 8;

impl Mmu {
    /// The most bytes this switch can hold at once: every ingress queue's
    /// reserve full, the shared pool used up and every lossless queue's
    /// headroom full (what [`admit`](Self::admit) lets in, each part to its
    /// bound). No egress queue is longer.
    pub fn max_admitted(&self) -> u64 {
        let reserves = u128::from(self.reserve_bytes) * self.q.len() as u128;
        let headroom: u128 = (self.q.iter().enumerate())
            .filter(|(_, q)| q.lossless)
            .map(|(i, _)| u128::from(self.headroom.get(i / NPRIO).copied().unwrap_or(0)))
            .sum();
        let total = reserves + u128::from(self.shared_pool) + headroom;
        u64::try_from(total).unwrap_or(u64::MAX)
    }

    /// Heap bytes of the per-port and per-queue accounts.
    pub fn heap_bytes(&self) -> u64 {
        use std::mem::size_of_val;
        (size_of_val(&self.headroom[..]) + size_of_val(&self.alpha[..]) + size_of_val(&self.q[..]))
            as u64
    }

    /// `headroom[p]` is the headroom of port `p`, `rates[p]` its link rate
    /// (which sets its alpha, see [`BufferConfig::alpha_for`]).
    pub fn new(cfg: BufferConfig, headroom: Vec<u64>, rates: &[u64]) -> Mmu {
        let n = headroom.len();
        let lossless = u64::from(cfg.lossless.count_ones());
        let per_port = if cfg.reserve_once_per_port { 1 } else { NPRIO };
        let reserved = cfg.reserve_bytes * (n * per_port) as u64;
        let hdrm_total: u64 = headroom.iter().sum::<u64>() * lossless;
        let shared_pool = cfg.size_bytes.saturating_sub(reserved + hdrm_total);
        let alpha = match cfg.threshold {
            Threshold::Dynamic { alpha } => (0..n)
                .map(|p| cfg.alpha_for(alpha, rates.get(p).copied().unwrap_or(0)))
                .collect(),
            Threshold::Static { .. } => vec![0.0; n],
        };
        let q = (0..n * NPRIO)
            .map(|i| Ingress {
                lossless: cfg.lossless & (1 << (i % NPRIO)) != 0,
                ..Ingress::default()
            })
            .collect();
        let uniform = alpha
            .windows(2)
            .all(|w: &[f64]| w[0].to_bits() == w[1].to_bits());
        let min_alpha =
            (alpha.iter().copied()).fold(
                f64::INFINITY,
                |m, a| {
                    if a.is_nan() { 0.0 } else { m.min(a) }
                },
            );
        Mmu {
            threshold: cfg.threshold,
            reserve_bytes: cfg.reserve_bytes,
            xon_offset_bytes: cfg.xon_offset_bytes,
            zero_from: zero_from(cfg.threshold, min_alpha, shared_pool),
            cfg,
            headroom,
            alpha: alpha.into_boxed_slice(),
            alpha_mask: if uniform { 0 } else { usize::MAX },
            q,
            shared_pool,
            shared_used: 0,
            used: 0,
            peak: 0,
        }
    }

    /// The configuration it was made with.
    pub fn cfg(&self) -> &BufferConfig {
        &self.cfg
    }

    /// Bytes of the common pool (after reserves and headroom).
    pub fn shared_pool(&self) -> u64 {
        self.shared_pool
    }

    /// The current per-queue shared limit of ingress `port`.
    #[inline]
    pub fn threshold(&self, port: usize) -> u64 {
        let free = self.shared_pool.saturating_sub(self.shared_used);
        threshold_of(self.threshold, || self.alpha[port & self.alpha_mask], free)
    }

    /// True when every port's threshold is at least one byte now (for
    /// the dynamic threshold: the smallest alpha times the free pool is,
    /// and a product rounds no lower for a larger alpha).
    #[inline]
    fn threshold_above_zero(&self) -> bool {
        self.shared_used < self.zero_from
    }

    /// Admits (or refuses) `size` bytes arriving on `port` at `prio`.
    ///
    /// The simulator's switch calls the fused
    /// [`admit_check_xoff`](Self::admit_check_xoff) and
    /// [`release_check_xon`](Self::release_check_xon); the one-step calls
    /// stay for other callers and as the reference those are tested
    /// against (`fused_calls_match_separate_ones`).
    #[inline]
    pub fn admit(&mut self, port: usize, prio: u8, size: u64) -> Admit {
        self.admit_then(port, prio, size, false).0
    }

    /// [`admit`](Self::admit) and, for an admitted packet,
    /// [`check_xoff`](Self::check_xoff) in one look at the queue's
    /// account (a switch asks both of every packet it receives): `None`
    /// when the packet is dropped, else whether to send XOFF now.
    #[inline]
    pub fn admit_check_xoff(&mut self, port: usize, prio: u8, size: u64) -> Option<bool> {
        match self.admit_then(port, prio, size, true) {
            (Admit::Drop, _) => None,
            (_, xoff) => Some(xoff),
        }
    }

    /// For a packet of `size` bytes that arrives on (`port`, `prio`) and
    /// leaves at the same picosecond (its egress port idle): whether
    /// [`admit_check_xoff`](Self::admit_check_xoff) then
    /// [`release_check_xon`](Self::release_check_xon) would leave every
    /// account as it is and send neither XOFF nor XON. Then the caller
    /// makes neither call and books the pass with
    /// [`book_pass`](Self::book_pass) (the peak, as the pair would move
    /// it); else it makes both. (A test apart from the booking, so that a
    /// caller can load the account and the egress port at once and book
    /// only a pass it makes.)
    ///
    /// That holds when the account holds reserve only (no shared bytes,
    /// no headroom), the packet fits whole in what is left of the reserve,
    /// the queue has not paused its peer, and every port's threshold is
    /// above zero: the admission then adds `size` to the reserve and the
    /// release, finding reserve only, takes it back; the XOFF check finds
    /// no headroom and no shared bytes over a threshold of at least a
    /// byte, and the XON check a queue not paused. Most packets a switch
    /// forwards pass so (on the 320-host HPCC and DCQCN runs 98 % of
    /// admissions are to the reserve), and the pair cost each of them
    /// two walks of its account and two pause checks. Skipping them cut
    /// the 1 ms 320-host fat tree's instructions by 4.1 % with HPCC
    /// (14,112.7 M to 13,528.2 M) and 4.5 % with DCQCN (11,843.4 M to
    /// 11,311.1 M; callgrind, outputs identical), but its user time by
    /// only about 1 % on the fat5ms runs (session 46): the loop waits on
    /// loads more than it executes.
    #[inline(always)]
    pub fn pass_untouched(&self, port: usize, prio: u8, size: u64) -> bool {
        let q = &self.q[port * NPRIO + usize::from(prio)];
        (q.hdrm | q.shared) == 0
            && q.rsv + size <= self.reserve_bytes
            && !q.xoff
            && self.shared_used < self.zero_from
    }

    /// Books a pass [`pass_untouched`](Self::pass_untouched) allowed: the
    /// peak, as the admission would have moved it.
    #[inline(always)]
    pub fn book_pass(&mut self, size: u64) {
        self.peak = self.peak.max(self.used + size);
    }

    /// [`admit`](Self::admit), then (with `check`, if admitted)
    /// [`check_xoff`](Self::check_xoff)'s answer.
    #[inline(always)]
    fn admit_then(&mut self, port: usize, prio: u8, size: u64, check: bool) -> (Admit, bool) {
        // The threshold's configuration and the alphas (the struct's second
        // line) only by reference: read only for a packet that needs the
        // shared pool or may pause.
        let (pool, threshold, alpha) = (self.shared_pool, &self.threshold, &self.alpha);
        let ap = port & self.alpha_mask;
        let q = &mut self.q[port * NPRIO + usize::from(prio)];
        // A packet that crosses the end of the reserve fills it and puts
        // only the rest in the shared pool.
        let to_rsv = self.reserve_bytes.saturating_sub(q.rsv).min(size);
        let to_shared = size - to_rsv;
        // The dynamic threshold only for a packet that needs the shared
        // pool (most fit in their queue's reserve).
        let at = if to_shared == 0 {
            q.rsv += size;
            Admit::Reserve
        } else if q.shared + to_shared
            <= threshold_of(
                *threshold,
                || alpha[ap],
                pool.saturating_sub(self.shared_used),
            )
            && self.shared_used + to_shared <= pool
        {
            q.rsv += to_rsv;
            q.shared += to_shared;
            self.shared_used += to_shared;
            Admit::Shared
        } else if q.lossless && q.hdrm + size <= self.headroom[port] {
            q.hdrm += size;
            Admit::Headroom
        } else {
            return (Admit::Drop, false);
        };
        self.used += size;
        self.peak = self.peak.max(self.used);
        if !check {
            return (at, false);
        }
        let used = self.shared_used;
        // `threshold_above_zero`, read apart while `q` is borrowed.
        let xoff = q.xoff_due(used < self.zero_from, || {
            threshold_of(*threshold, || alpha[ap], pool.saturating_sub(used))
        });
        q.xoff |= xoff;
        (at, xoff)
    }

    /// Releases `size` bytes of the ingress queue (`port`, `prio`) when the
    /// packet leaves: headroom first, then shared, then reserve.
    #[inline(always)]
    pub fn release(&mut self, port: usize, prio: u8, size: u64) {
        self.release_then(port, prio, size, false);
    }

    /// [`release`](Self::release), then [`check_xon`](Self::check_xon)
    /// in the same look at the queue's account (a switch asks both of
    /// every frame it sends): whether to send XON now.
    #[inline(always)]
    pub fn release_check_xon(&mut self, port: usize, prio: u8, size: u64) -> bool {
        self.release_then(port, prio, size, true)
    }

    /// [`release`](Self::release), then (with `check`)
    /// [`check_xon`](Self::check_xon)'s answer.
    #[inline(always)]
    fn release_then(&mut self, port: usize, prio: u8, size: u64, check: bool) -> bool {
        let q = &mut self.q[port * NPRIO + usize::from(prio)];
        if q.hdrm | q.shared == 0 {
            // All of it in the reserve, as with most packets (on the
            // 320-host HPCC and DCQCN runs 98 % are admitted to it): the
            // walk below would take nothing from the other two, and its
            // dozen conditional moves per packet sent are skipped behind
            // one branch that rarely changes its mind.
            q.rsv -= q.rsv.min(size);
        } else {
            q.release_walk(&mut self.shared_used, size);
        }
        self.used = self.used.saturating_sub(size);
        if !check {
            return false;
        }
        // The second line only if an XON may be due (see `admit_then`).
        let (threshold, alpha, ap) = (&self.threshold, &self.alpha, port & self.alpha_mask);
        let free = self.shared_pool.saturating_sub(self.shared_used);
        let xon = q.xon_due(self.xon_offset_bytes, || {
            threshold_of(*threshold, || alpha[ap], free)
        });
        q.xoff &= !xon;
        xon
    }

    /// Starts loading the accounts [`admit`](Self::admit) and
    /// [`release`](Self::release) touch for (`port`, `prio`): its ingress
    /// queue's line and the port's alpha (each a miss per packet per hop in
    /// a large fabric, where 1,280 switches' accounts do not stay cached).
    #[inline]
    pub fn prefetch(&self, port: usize, prio: u8) {
        if let Some(q) = self.q.get(port * NPRIO + usize::from(prio & 7)) {
            crate::sim::prefetch_line(q);
        }
        if let Some(a) = self.alpha.get(port & self.alpha_mask) {
            crate::sim::prefetch_line(a);
        }
    }

    /// [`prefetch`](Self::prefetch) without the port's alpha: the
    /// account's line alone. For a driver that knows every port's alpha
    /// is the same ([`alpha_uniform`](Self::alpha_uniform)), so that one
    /// line of them all stays cached: finding the port's alpha's address
    /// reads this struct's second line, a load the look-ahead waited on
    /// (8 % of its perf samples on a k=32 fat tree).
    #[inline]
    pub fn prefetch_account(&self, port: usize, prio: u8) {
        if let Some(q) = self.q.get(port * NPRIO + usize::from(prio & 7)) {
            crate::sim::prefetch_line(q);
        }
    }

    /// Every port has the same alpha (one alpha for all, as without
    /// `alpha_speed_ref_bps`, or one link rate), or the threshold is
    /// static: then the alphas read are one value on one line.
    pub fn alpha_uniform(&self) -> bool {
        self.alpha_mask == 0
    }

    /// True when (`port`, `prio`) should send XOFF now (and records it).
    #[inline]
    pub fn check_xoff(&mut self, port: usize, prio: u8) -> bool {
        let above_zero = self.threshold_above_zero();
        let q = &self.q[port * NPRIO + usize::from(prio)];
        if q.xoff_due(above_zero, || self.threshold(port)) {
            self.q[port * NPRIO + usize::from(prio)].xoff = true;
            return true;
        }
        false
    }

    /// True when (`port`, `prio`) should send XON now (and records it).
    #[inline]
    pub fn check_xon(&mut self, port: usize, prio: u8) -> bool {
        let q = &self.q[port * NPRIO + usize::from(prio)];
        if q.xon_due(self.xon_offset_bytes, || self.threshold(port)) {
            self.q[port * NPRIO + usize::from(prio)].xoff = false;
            return true;
        }
        false
    }

    /// Whether XOFF is in force for (`port`, `prio`).
    pub fn is_xoff(&self, port: usize, prio: u8) -> bool {
        self.q[port * NPRIO + usize::from(prio)].xoff
    }

    /// Bytes held for the ingress queue (`port`, `prio`).
    pub fn ingress_bytes(&self, port: usize, prio: u8) -> u64 {
        let q = &self.q[port * NPRIO + usize::from(prio)];
        q.rsv + q.shared + q.hdrm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alphas_are_uniform_without_a_speed_reference_or_with_one_rate() {
        let mk = |speed_ref: Option<u64>, rates: &[u64]| {
            let cfg = BufferConfig {
                alpha_speed_ref_bps: speed_ref,
                ..BufferConfig::default()
            };
            Mmu::new(cfg, vec![0; rates.len()], rates).alpha_uniform()
        };
        assert!(mk(None, &[100, 400]));
        assert!(mk(Some(100), &[400, 400]));
        assert!(!mk(Some(100), &[100, 400]));
    }

    #[test]
    fn a_packet_reads_two_lines_of_the_mmu() {
        use std::mem::{align_of, offset_of};
        assert_eq!(align_of::<Mmu>(), 64);
        // What a packet within its reserve reads: the first line.
        for end in [
            offset_of!(Mmu, q) + 16,
            offset_of!(Mmu, reserve_bytes) + 8,
            offset_of!(Mmu, shared_pool) + 8,
            offset_of!(Mmu, shared_used) + 8,
            offset_of!(Mmu, used) + 8,
            offset_of!(Mmu, peak) + 8,
            offset_of!(Mmu, zero_from) + 8,
        ] {
            assert!(end <= 64, "{end}");
        }
        // What one that needs the shared pool reads besides: the second.
        for f in [
            offset_of!(Mmu, alpha),
            offset_of!(Mmu, alpha_mask),
            offset_of!(Mmu, threshold),
            offset_of!(Mmu, xon_offset_bytes),
        ] {
            assert!((64..128).contains(&f), "{f}");
        }
        assert_eq!(std::mem::size_of::<Ingress>(), 32);
    }

    fn mmu(threshold: Threshold) -> Mmu {
        Mmu::new(
            BufferConfig {
                size_bytes: 100_000,
                reserve_bytes: 0,
                threshold,
                xon_offset_bytes: 1000,
                headroom_bytes: None,
                lossless: 1 << 3,
                pause_quanta: 0xffff,
                ..BufferConfig::default()
            },
            vec![10_000, 10_000],
            &[100_000_000_000; 2],
        )
    }

    /// A queue with nothing in the shared pool is at a zero threshold
    /// (and pauses) when, and only when, alpha × free is below a byte:
    /// `check_xoff` skips the port's alpha only when the smallest alpha
    /// rules that out.
    #[test]
    fn an_empty_share_pauses_only_at_a_zero_threshold() {
        let with = |alphas: [f64; 2]| {
            let mut m = Mmu::new(
                BufferConfig {
                    size_bytes: 100_000,
                    reserve_bytes: 2000,
                    threshold: Threshold::Dynamic { alpha: 1.0 },
                    lossless: 1 << 3,
                    ..BufferConfig::default()
                },
                vec![0, 0],
                &[0; 2],
            );
            m.alpha = alphas.into();
            m.alpha_mask = usize::MAX;
            m.zero_from = zero_from(m.threshold, alphas[0].min(alphas[1]), m.shared_pool);
            m
        };
        // Free pool 96,000 bytes: 1e-6 × it is below one byte.
        for (alphas, port, pauses) in [
            ([1.0, 1.0], 0, false),
            ([1.0, 1e-6], 0, false),
            ([1.0, 1e-6], 1, true),
            ([1e-6, 1e-6], 1, true),
        ] {
            let mut m = with(alphas);
            assert_eq!(m.admit(port, 3, 1000), Admit::Reserve);
            assert_eq!(m.check_xoff(port, 3), pauses, "{alphas:?} port {port}");
        }
    }

    /// With a static threshold an empty share pauses exactly when the
    /// threshold is zero bytes, and only lossless priorities pause.
    #[test]
    fn an_empty_share_pauses_at_a_zero_static_threshold() {
        for (bytes, pauses) in [(0, true), (1, false), (5000, false)] {
            let mut m = Mmu::new(
                BufferConfig {
                    size_bytes: 100_000,
                    reserve_bytes: 2000,
                    threshold: Threshold::Static { bytes },
                    lossless: 1 << 3,
                    ..BufferConfig::default()
                },
                vec![0, 0],
                &[0; 2],
            );
            for prio in [3, 1] {
                assert_eq!(m.admit(1, prio, 1000), Admit::Reserve);
                assert_eq!(m.check_xoff(1, prio), pauses && prio == 3, "{bytes} {prio}");
            }
        }
    }

    #[test]
    fn xoff_then_headroom_then_xon() {
        let mut m = mmu(Threshold::Static { bytes: 5000 });
        assert_eq!(m.shared_pool(), 80_000);
        for _ in 0..5 {
            assert_eq!(m.admit(0, 3, 1000), Admit::Shared);
        }
        assert!(m.check_xoff(0, 3));
        assert!(!m.check_xoff(0, 3), "XOFF is sent once");
        // In-flight bytes land in headroom, and past it they drop.
        for _ in 0..10 {
            assert_eq!(m.admit(0, 3, 1000), Admit::Headroom);
        }
        assert_eq!(m.admit(0, 3, 1000), Admit::Drop);
        assert!(!m.check_xon(0, 3));
        for _ in 0..10 {
            m.release(0, 3, 1000);
        }
        assert!(!m.check_xon(0, 3), "still at the threshold");
        m.release(0, 3, 1000);
        assert!(m.check_xon(0, 3));
        assert_eq!(m.ingress_bytes(0, 3), 4000);
    }

    #[test]
    fn lossy_drops_at_threshold() {
        let mut m = mmu(Threshold::Static { bytes: 2000 });
        assert_eq!(m.admit(1, 0, 1000), Admit::Shared);
        assert_eq!(m.admit(1, 0, 1000), Admit::Shared);
        assert_eq!(m.admit(1, 0, 1000), Admit::Drop);
        assert!(!m.check_xoff(1, 0));
    }

    #[test]
    fn dynamic_threshold_shrinks_as_pool_fills() {
        let mut m = mmu(Threshold::Dynamic { alpha: 1.0 });
        let t0 = m.threshold(0);
        m.admit(0, 3, 30_000);
        assert!(m.threshold(0) < t0);
        assert_eq!(m.threshold(0), 50_000);
    }

    #[test]
    fn dynamic_threshold_matches_the_unsigned_formula() {
        // The signed fast path against `(alpha × free as f64) as u64`,
        // including alphas that overflow 2⁶³, infinity, NaN and negatives.
        let alphas = [
            0.125,
            1.0,
            0.0,
            -0.5,
            3.7,
            1e12,
            1e30,
            f64::INFINITY,
            f64::NAN,
        ];
        let frees = [
            0u64,
            1,
            1023,
            32 << 20,
            (1 << 53) + 1,
            1 << 62,
            u64::MAX >> 1,
        ];
        for alpha in alphas {
            for free in frees {
                let mut m = mmu(Threshold::Dynamic { alpha });
                m.shared_pool = free;
                assert_eq!(
                    m.threshold(0),
                    (alpha * free as f64) as u64,
                    "{alpha} {free}"
                );
                m.shared_pool = u64::MAX;
                m.shared_used = u64::MAX - free;
                assert_eq!(
                    m.threshold(0),
                    (alpha * free as f64) as u64,
                    "{alpha} {free}"
                );
            }
        }
    }

    #[test]
    fn one_pause_time_is_a_quanta_count_per_link_speed() {
        let at = |ps, gbps: u64| quanta_for(ps, gbps * 1_000_000_000);
        // 5 µs: 976.5625 quanta at 100 Gb/s, 3906.25 at 400, 244.14 at 25.
        assert_eq!(at(5_000_000, 100), 977);
        assert_eq!(at(5_000_000, 400), 3907);
        assert_eq!(at(5_000_000, 25), 245);
        // Each lasts at least the time, and less than one quantum more.
        for gbps in [10, 25, 40, 100, 200, 400] {
            let q = at(5_000_000, gbps);
            let ps = crate::sim::pause_ps(q, gbps * 1_000_000_000);
            let quantum = crate::sim::pause_ps(1, gbps * 1_000_000_000);
            assert!(
                (5_000_000..5_000_000 + quantum + 1).contains(&ps),
                "{gbps}G: {q} quanta = {ps} ps"
            );
        }
        // Past 0xffff quanta (84 µs at 400 Gb/s) the frame holds no more.
        assert_eq!(at(100_000_000, 400), 0xffff);
        assert_eq!(at(1, 10), 1, "a pause is at least one quantum");
        let fixed = BufferConfig::default();
        assert_eq!(fixed.pause_quanta_at(400_000_000_000), 0xffff);
        let timed = BufferConfig {
            pause_time_ps: Some(5_000_000),
            ..fixed
        };
        assert_eq!(timed.pause_quanta_at(100_000_000_000), 977);
        assert_eq!(timed.pause_quanta_at(400_000_000_000), 3907);
    }

    #[test]
    fn alpha_doubles_per_doubling_of_speed_over_the_reference() {
        let cfg = BufferConfig {
            alpha_speed_ref_bps: Some(100_000_000_000),
            ..BufferConfig::default()
        };
        // third.cc's pfc_a_shift: 3 at the NIC's 100G, 1 at 400G, 0 (never
        // below) at 1.6T and beyond.
        assert_eq!(cfg.alpha_for(0.125, 100_000_000_000), 0.125);
        assert_eq!(cfg.alpha_for(0.125, 200_000_000_000), 0.25);
        assert_eq!(cfg.alpha_for(0.125, 400_000_000_000), 0.5);
        assert_eq!(cfg.alpha_for(0.125, 3_200_000_000_000), 1.0);
        assert_eq!(cfg.alpha_for(0.125, 25_000_000_000), 0.125);
        assert_eq!(
            BufferConfig::default().alpha_for(0.125, 400_000_000_000),
            0.125
        );
        // The MMU gives each port its own threshold.
        let mut m = Mmu::new(
            BufferConfig {
                size_bytes: 100_000,
                ..cfg
            },
            vec![10_000, 10_000],
            &[100_000_000_000, 400_000_000_000],
        );
        assert_eq!(m.shared_pool(), 80_000);
        assert_eq!((m.threshold(0), m.threshold(1)), (10_000, 40_000));
        for _ in 0..10 {
            assert_eq!(m.admit(1, 3, 1000), Admit::Shared);
        }
        assert_eq!((m.threshold(0), m.threshold(1)), (8_750, 35_000));
        assert!(!m.check_xoff(1, 3), "10 kB is under the 400G port's 35 kB");
    }

    #[test]
    fn headroom_from_link_bdps_and_reserve_once_per_port() {
        let cfg = BufferConfig {
            headroom_link_bdps: Some(3),
            reserve_bytes: 4096,
            reserve_once_per_port: true,
            ..BufferConfig::default()
        };
        // 3 × 100 Gb/s × 1 µs = 37.5 kB (third.cc), whatever the frame.
        assert_eq!(cfg.headroom_for(100_000_000_000, 1_000_000, 1100), 37_500);
        let m = Mmu::new(
            BufferConfig {
                size_bytes: 1_000_000,
                ..cfg
            },
            vec![37_500; 4],
            &[100_000_000_000; 4],
        );
        assert_eq!(m.shared_pool(), 1_000_000 - 4 * 37_500 - 4 * 4096);
        assert_eq!(
            BufferConfig::default().headroom_for(100_000_000_000, 1_000_000, 1100),
            25_000 + 3300
        );
    }

    #[test]
    fn a_packet_crossing_the_reserve_puts_only_its_excess_in_shared() {
        let mut m = Mmu::new(
            BufferConfig {
                size_bytes: 100_000,
                reserve_bytes: 1500,
                threshold: Threshold::Static { bytes: 5000 },
                ..BufferConfig::default()
            },
            vec![10_000],
            &[100_000_000_000],
        );
        assert_eq!(m.admit(0, 3, 1000), Admit::Reserve);
        assert_eq!(m.admit(0, 3, 1000), Admit::Shared);
        // 500 bytes topped the reserve up; 500 went to the shared pool.
        assert_eq!(m.ingress_bytes(0, 3), 2000);
        for _ in 0..4 {
            assert_eq!(m.admit(0, 3, 1000), Admit::Shared);
        }
        assert!(!m.check_xoff(0, 3), "4.5 kB shared, under 5 kB");
        assert_eq!(m.admit(0, 3, 500), Admit::Shared);
        assert!(m.check_xoff(0, 3));
        // Releasing takes the shared bytes first.
        m.release(0, 3, 3000);
        assert!(m.check_xon(0, 3));
        assert_eq!(m.ingress_bytes(0, 3), 3500);
    }

    #[test]
    fn headroom_default_covers_two_delays() {
        // 100 Gb/s, 1 us: BDP 12.5 kB.
        assert_eq!(
            auto_headroom(100_000_000_000, 1_000_000, 1100),
            25_000 + 3300
        );
    }

    /// The switch the account tests drive: a 60 kB buffer, two ports
    /// (headroom 8,000 and 3,000 bytes, the second at `fast_port` against
    /// the first's 100 for its alpha), priority 3 lossless.
    fn two_port_mmu(reserve: u64, static_bytes: Option<u64>, alpha: f64, fast_port: u64) -> Mmu {
        Mmu::new(
            BufferConfig {
                size_bytes: 60_000,
                reserve_bytes: reserve,
                threshold: match static_bytes {
                    Some(bytes) => Threshold::Static { bytes },
                    None => Threshold::Dynamic { alpha },
                },
                xon_offset_bytes: 1000,
                lossless: 1 << 3,
                alpha_speed_ref_bps: Some(100),
                ..BufferConfig::default()
            },
            vec![8_000, 3_000],
            &[100, fast_port],
        )
    }

    /// A queue that paused its peer with nothing but reserve held (an
    /// XOFF from a moment when the pool's threshold was zero) sends XON
    /// at its next release: a packet passing it at once must not skip the
    /// pair, though its account would be left as it was. The random
    /// accounts below seldom reach this state.
    #[test]
    fn a_queue_that_paused_its_peer_does_not_pass_untouched() {
        let mut m = two_port_mmu(2_000, None, 1.0, 100);
        assert!(m.pass_untouched(1, 3, 1_000));
        m.q[NPRIO + 3].xoff = true;
        assert!(!m.pass_untouched(1, 3, 1_000));
        assert_eq!(m.admit_check_xoff(1, 3, 1_000), Some(false));
        assert!(m.release_check_xon(1, 3, 1_000), "the pair sends XON");
        assert!(
            m.pass_untouched(1, 3, 1_000),
            "and passes untouched after it"
        );
    }

    /// A packet that straddles the end of its queue's reserve and is
    /// refused by the shared pool goes whole to the headroom, leaving
    /// room in the reserve: a packet that fits that room is then admitted
    /// to the reserve but released from the headroom, so the pair moves
    /// bytes between them and the pass must not skip it. The random
    /// accounts below seldom reach this state either.
    #[test]
    fn headroom_beside_room_in_the_reserve_does_not_pass_untouched() {
        let mut m = two_port_mmu(1_000, Some(10), 0.0, 100);
        assert_eq!(m.admit(0, 3, 900), Admit::Reserve);
        assert_eq!(m.admit(0, 3, 200), Admit::Headroom);
        let q = m.q[3];
        assert_eq!((q.rsv, q.shared, q.hdrm), (900, 0, 200));
        assert!(!m.pass_untouched(0, 3, 64));
        m.admit_check_xoff(0, 3, 64);
        m.release_check_xon(0, 3, 64);
        let q = m.q[3];
        assert_eq!((q.rsv, q.hdrm), (964, 136), "the pair moved 64 bytes");
    }

    proptest::proptest! {
        /// The precomputed zero test answers as the product it replaces,
        /// for any smallest alpha (NaN-free, as `Mmu::new` makes it),
        /// pool and use.
        #[test]
        fn zero_from_is_the_products_test(
            min_alpha in proptest::prop_oneof![
                0.0..2.0f64,
                1e-12..1e-3f64,
                proptest::strategy::Just(0.0),
                proptest::strategy::Just(f64::INFINITY),
                -1.0..0.0f64,
            ],
            pool in proptest::prop_oneof![0..100_000u64, 0..u64::MAX],
            used_frac in 0.0..=1.0f64,
        ) {
            let from = zero_from(Threshold::Dynamic { alpha: min_alpha }, min_alpha, pool);
            let used = (pool as f64 * used_frac) as u64;
            // Around the random use, the ends, and both sides of the
            // boundary itself (where an off-by-one would show).
            let edge = from.min(pool);
            for used in [
                used,
                used.saturating_sub(1),
                used.saturating_add(1).min(pool),
                0,
                pool,
                edge,
                edge.saturating_sub(1),
            ] {
                let free = pool.saturating_sub(used);
                proptest::prop_assert_eq!(used < from, min_alpha * free as f64 >= 1.0, "{}", used);
            }
        }

        /// No run of admissions and releases, on any prio (lossless or
        /// not), takes a switch past `max_admitted`, the bound INT's
        /// 32-bit queue length rests on; and it is reached when every
        /// part fills (the bound is not loose by a part).
        #[test]
        fn admitted_bytes_stay_within_max_admitted(
            ops in proptest::collection::vec((0..3usize, 0..8u8, 64..9000u64, proptest::bool::weighted(0.2)), 1..400),
            size in 0..200_000u64,
            reserve in 0..4000u64,
            once_per_port in proptest::bool::ANY,
            lossless in proptest::num::u8::ANY,
            alpha in proptest::prop_oneof![proptest::strategy::Just(f64::INFINITY), 1e-3..8.0f64],
        ) {
            let mut m = Mmu::new(
                BufferConfig {
                    size_bytes: size,
                    reserve_bytes: reserve,
                    threshold: Threshold::Dynamic { alpha },
                    lossless,
                    reserve_once_per_port: once_per_port,
                    ..BufferConfig::default()
                },
                vec![12_000, 0, 30_000],
                &[100_000_000_000; 3],
            );
            let bound = m.max_admitted();
            let mut held: Vec<(usize, u8, u64)> = Vec::new();
            for (port, prio, size, release) in ops {
                if release && !held.is_empty() {
                    let (port, prio, size) = held.swap_remove(size as usize % held.len());
                    m.release(port, prio, size);
                } else if m.admit(port, prio, size) != Admit::Drop {
                    held.push((port, prio, size));
                }
                proptest::prop_assert!(m.used <= bound, "{} > {}", m.used, bound);
            }
            // With no threshold on the shared pool, filling every queue
            // (a kilobyte at a time, then a byte) fills every part.
            if alpha.is_infinite() {
                for step in [1024, 1] {
                    for port in 0..3 {
                        for prio in 0..8 {
                            while m.admit(port, prio, step) != Admit::Drop {}
                        }
                    }
                }
                proptest::prop_assert_eq!(m.used, bound);
            }
        }

        /// A switch's fused calls (`admit_check_xoff`,
        /// `release_check_xon`) give the answers, and leave the accounts,
        /// of `admit` then `check_xoff` and `release` then `check_xon`.
        #[test]
        fn fused_calls_match_separate_ones(
            ops in proptest::collection::vec((0..2usize, 2..5u8, 64..4200u64, proptest::bool::ANY), 1..300),
            alpha in proptest::prop_oneof![proptest::strategy::Just(0.0), 1e-6..4.0f64],
            reserve in proptest::prop_oneof![proptest::strategy::Just(0u64), 1..5000u64],
            static_bytes in proptest::option::of(0..20_000u64),
            fast_port in proptest::prop_oneof![proptest::strategy::Just(100u64), proptest::strategy::Just(400u64)],
        ) {
            let mk = || two_port_mmu(reserve, static_bytes, alpha, fast_port);
            // `b` reads each port's own alpha even when they are all the
            // same (one link rate), as `a` then does not.
            let (mut a, mut b) = (mk(), mk());
            proptest::prop_assert_eq!(a.alpha_uniform(), a.alpha[0].to_bits() == a.alpha[1].to_bits());
            b.alpha_mask = usize::MAX;
            // Frames admitted and not yet released, per queue.
            let mut held: Vec<(usize, u8, u64)> = Vec::new();
            for (port, prio, size, release) in ops {
                if release && !held.is_empty() {
                    let (port, prio, size) = held.remove(size as usize % held.len());
                    a.release(port, prio, size);
                    let xon = a.check_xon(port, prio);
                    proptest::prop_assert_eq!(b.release_check_xon(port, prio, size), xon);
                } else {
                    let at = a.admit(port, prio, size);
                    let want = (at != Admit::Drop).then(|| a.check_xoff(port, prio));
                    proptest::prop_assert_eq!(b.admit_check_xoff(port, prio, size), want);
                    if at != Admit::Drop {
                        held.push((port, prio, size));
                    }
                }
                proptest::prop_assert_eq!((a.used, a.peak, a.shared_used), (b.used, b.peak, b.shared_used));
                for (x, y) in a.q.iter().zip(b.q.iter()) {
                    proptest::prop_assert_eq!((x.rsv, x.shared, x.hdrm, x.xoff), (y.rsv, y.shared, y.hdrm, y.xoff));
                }
            }
        }

        /// Wherever `pass_untouched` says a packet passing at once leaves
        /// the accounts untouched, admitting and releasing it do leave
        /// them so (the peak apart, which both move alike) with no XOFF
        /// and no XON; where it says not, it changes nothing. From
        /// accounts built by random admissions and releases, with reserve,
        /// shared and headroom in use.
        #[test]
        fn a_pass_left_untouched_is_an_admission_and_its_release(
            ops in proptest::collection::vec((0..2usize, 2..5u8, 64..4200u64, proptest::bool::ANY), 1..300),
            alpha in proptest::prop_oneof![proptest::strategy::Just(0.0), 1e-6..4.0f64],
            reserve in proptest::prop_oneof![proptest::strategy::Just(0u64), 1..9000u64],
            static_bytes in proptest::option::of(0..20_000u64),
        ) {
            let mut a = two_port_mmu(reserve, static_bytes, alpha, 100);
            let accounts = |m: &Mmu| {
                let q: Vec<_> = m.q.iter().map(|x| (x.rsv, x.shared, x.hdrm, x.xoff)).collect();
                (m.used, m.peak, m.shared_used, q)
            };
            let mut held: Vec<(usize, u8, u64)> = Vec::new();
            let mut untouched = 0;
            let above = a.threshold_above_zero();
            for (port, prio, size, release) in ops {
                let (mut x, mut y) = (a.clone(), a.clone());
                if x.pass_untouched(port, prio, size) {
                    x.book_pass(size);
                    untouched += 1;
                    proptest::prop_assert_eq!(y.admit_check_xoff(port, prio, size), Some(false));
                    proptest::prop_assert!(!y.release_check_xon(port, prio, size));
                    proptest::prop_assert_eq!(accounts(&x), accounts(&y));
                    proptest::prop_assert!(x.peak >= a.used + size);
                } else {
                    proptest::prop_assert_eq!(accounts(&x), accounts(&a));
                }
                if release && !held.is_empty() {
                    let (port, prio, size) = held.remove(size as usize % held.len());
                    a.release_check_xon(port, prio, size);
                } else if a.admit_check_xoff(port, prio, size).is_some() {
                    held.push((port, prio, size));
                }
            }
            // Not a vacuous pass: with room in the reserve for any packet
            // and a threshold above zero, the first packet passes so.
            if reserve >= 4200 && above {
                proptest::prop_assert!(untouched > 0);
            }
        }

        /// A release takes headroom first, then shared, then reserve: the
        /// short cut for an account holding reserve only leaves what the
        /// full walk ([`Ingress::release_walk`]) leaves, from any account.
        #[test]
        fn release_matches_the_walk(
            rsv in proptest::prop_oneof![proptest::strategy::Just(0u64), 0..10_000u64],
            shared in proptest::prop_oneof![proptest::strategy::Just(0u64), 0..10_000u64],
            hdrm in proptest::prop_oneof![proptest::strategy::Just(0u64), 0..10_000u64],
            size in 0..12_000u64,
        ) {
            let mut m = Mmu::new(BufferConfig::default(), vec![0; 2], &[100, 100]);
            m.shared_used = shared + 5;
            m.used = rsv + shared + hdrm;
            m.q[NPRIO + 3] = Ingress { rsv, shared, hdrm, ..Ingress::default() };
            let (mut q, mut used) = (m.q[NPRIO + 3], m.shared_used);
            q.release_walk(&mut used, size);
            m.release(1, 3, size);
            let got = m.q[NPRIO + 3];
            proptest::prop_assert_eq!((got.rsv, got.shared, got.hdrm, m.shared_used), (q.rsv, q.shared, q.hdrm, used));
            proptest::prop_assert_eq!(m.used, (rsv + shared + hdrm).saturating_sub(size));
        }
    }
}
