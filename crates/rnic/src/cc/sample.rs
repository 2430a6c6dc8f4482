//! What an ACK tells the sender's congestion control beyond "bytes
//! acknowledged": a round-trip-time sample, the minimum RTT seen, whether the
//! receiver echoed a CE mark, and the sequence space (in payload bytes) sent
//! and acknowledged so far — the `snd_nxt`/`snd_una` that window-based
//! controllers use to act "once per window".
//!
//! Samples follow Karn's rule (Karn & Partridge, SIGCOMM 1987): a packet
//! sent more than once gives no sample, since the ACK cannot say which copy
//! it answers — after a go-back-N the first send time would inflate the RTT
//! by the whole recovery. The sample is taken from the packet the ACK names
//! (the newest it acknowledges): with coalesced ACKs that is the packet that
//! asked for the ACK, so the sample holds no ACK-coalescing delay. READ
//! requests give no sample (the time to their last response includes the
//! responder streaming the data back).

use crate::types::Nanos;
use roce_wire::Psn;
use std::collections::VecDeque;

/// One round-trip-time measurement, with the smallest RTT the QP has seen
/// (the propagation-plus-serialization floor delay-based controllers compare against).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RttSample {
    pub rtt: Nanos,
    pub min_rtt: Nanos,
}

/// Everything an ACK that moved the acknowledged point carries for congestion control.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckFeedback {
    /// Payload bytes newly acknowledged.
    pub acked_bytes: u64,
    /// RTT of the packet the ACK names, unless that packet was retransmitted.
    pub rtt: Option<RttSample>,
    /// The responder saw a CE mark on data this ACK covers (DCTCP's ECE,
    /// carried in the ACK's BTH BECN bit; only when the responder's RNIC
    /// has `RnicConfig::ecn_echo` on).
    pub ecn_echo: bool,
    /// Payload bytes acknowledged since the QP started (after this ACK).
    pub snd_una: u64,
    /// Payload bytes of new (first-time) packets sent since the QP started.
    pub snd_nxt: u64,
    /// Payload bytes before the next packet the QP sends: `snd_nxt` until
    /// a go-back-N, which moves it back to where the resend starts; it
    /// then grows again with the resent packets. This is ns-3's
    /// `RdmaQueuePair::snd_nxt` (RecoverQueue rewinds it on a NAK), which
    /// HPCC's once-per-RTT update reads; TCP-style controllers (DCTCP,
    /// TIMELY) keep `snd_nxt`, which a TCP sender does not rewind.
    pub send_point: u64,
}

/// One first transmission, in 8 bytes: a QP without congestion control
/// may keep 16,384 packets in flight, and thousands of QPs at once do in a
/// large fabric (issue 12: 3.8 M packets in flight on a k=32 fat tree, and
/// these records a fifth of the run's heap), so this record is what a
/// packet in flight costs its sender. Its PSNs are implicit: records
/// follow one another in PSN order, each covering [`Sent::span`] PSNs from
/// where the one before it ended (the log keeps the front record's first
/// PSN), so no PSN is stored. The send time is kept relative to the log's
/// [`SentLog::base`].
#[derive(Debug, Clone, Copy)]
struct Sent {
    /// Sent at `base + at` ns.
    at: u32,
    /// The top bit set while the record may give an RTT sample (cleared
    /// once retransmitted, Karn; never set for READ requests). Below it,
    /// [`Sent::SPAN`] clear: one packet's payload bytes (at most an MTU).
    /// Set: the record carries no payload and covers as many PSNs as the
    /// low bits say — a READ request (its responses' PSNs), or, with
    /// [`Sent::GAP`] also set, PSNs that were never sent (a WQE finished
    /// before all its packets left, on a peer's ACK for PSNs it never got),
    /// which stand in the sequence only to keep the records' PSNs implicit.
    info: u32,
}

impl Sent {
    const SAMPLE: u32 = 1 << 31;
    const SPAN: u32 = 1 << 30;
    const GAP: u32 = 1 << 29;
    const LOW: u32 = Self::GAP - 1;

    fn bytes(&self) -> u64 {
        if self.info & Self::SPAN != 0 {
            0
        } else {
            u64::from(self.info & Self::LOW)
        }
    }

    fn sample(&self) -> bool {
        self.info & Self::SAMPLE != 0
    }

    /// PSNs covered: one for a packet, more for a READ request or a gap.
    fn span(&self) -> u32 {
        if self.info & Self::SPAN != 0 {
            self.info & Self::LOW
        } else {
            1
        }
    }

    fn gap(&self) -> bool {
        self.info & Self::GAP != 0
    }

    /// Pushed by [`SentLog::push_span`] (counted in [`SentLog::spans`]).
    fn spanned(&self) -> bool {
        self.info & Self::SPAN != 0
    }
}

/// The requester's record of packets in flight: one entry per first
/// transmission, in PSN order. `repr(C)`: what every send and ACK reads
/// comes first (see `Qp`'s layout).
#[derive(Debug, Clone, Default)]
#[repr(C)]
pub(crate) struct SentLog {
    recs: VecDeque<Sent>,
    /// The first PSN the front record covers.
    front: Psn,
    /// The PSN after the last record's.
    end: Psn,
    /// Records covering more than one PSN (READs, gaps): while there are
    /// none, the record of a PSN is found by its distance from `front`.
    spans: u32,
    /// The time records' `at` count from: the send time of the record that
    /// found the log empty, moved up to the oldest record's when a send
    /// comes more than 2³² ns (4.3 s) after it.
    base: Nanos,
    snd_nxt: u64,
    snd_una: u64,
    min_rtt: Option<Nanos>,
}

/// Logs up to this many records' room keep it.
const SHRINK_FROM: usize = 1024;

impl SentLog {
    /// A first transmission of PSNs `first..=last` at `at`: one packet of
    /// `bytes`, or a READ request (no bytes, no sample) asking for the
    /// responses those PSNs stand for.
    ///
    /// Inlined into the requester's one caller, which runs for every
    /// packet sent: as a call of its own, its prologue and epilogue were a
    /// fifth of its instructions (issue 12).
    #[inline(always)]
    pub(crate) fn sent(&mut self, first: Psn, last: Psn, at: Nanos, bytes: u64, sample: bool) {
        // One packet's payload: an MTU at most, far below the flag bits.
        debug_assert!(bytes <= u64::from(Sent::LOW));
        let b = bytes.min(u64::from(Sent::LOW)) as u32;
        if self.recs.is_empty() {
            self.base = at;
            self.front = first;
            self.end = first;
        }
        let mut off = at.saturating_sub(self.base);
        if off > u64::from(u32::MAX) {
            self.rebase();
            off = at.saturating_sub(self.base);
        }
        // Still out of reach only when the oldest packet in flight went out
        // 4.3 s before this one: this one then gives no sample.
        let (at, sample) = match u32::try_from(off) {
            Ok(o) => (o, sample),
            Err(_) => (u32::MAX, false),
        };
        // New PSNs follow the last sent; any skipped stand as a gap.
        if first.after(self.end) {
            self.push_span(at, first.distance_from(self.end), Sent::GAP);
        }
        let span = last.distance_from(first) + 1;
        if span > 1 || b == 0 && !sample {
            // A READ request (no payload, no sample, however many PSNs).
            debug_assert!(b == 0 && !sample);
            self.push_span(at, span, 0);
        } else {
            self.recs.push_back(Sent {
                at,
                info: if sample { b | Sent::SAMPLE } else { b },
            });
        }
        self.end = last.next();
        self.snd_nxt += u64::from(b);
    }

    fn push_span(&mut self, at: u32, span: u32, gap: u32) {
        self.spans += 1;
        self.recs.push_back(Sent {
            at,
            info: Sent::SPAN | gap | span.min(Sent::LOW),
        });
    }

    /// Counts the records' times from the oldest record's (rare: once per
    /// 4.3 s of a log that never empties).
    #[cold]
    fn rebase(&mut self) {
        // A zero shift (the oldest record is already the base) would make
        // every later send walk the whole log for nothing.
        let Some(shift) = self.recs.front().map(|r| r.at).filter(|&s| s > 0) else {
            return;
        };
        self.base += u64::from(shift);
        for r in &mut self.recs {
            r.at -= shift;
        }
    }

    /// `psn` went out again: its ACK can no longer be timed.
    pub(crate) fn resent(&mut self, psn: Psn) {
        if psn.before(self.front) || !psn.before(self.end) {
            return;
        }
        let d = psn.distance_from(self.front);
        // Only the record of this very packet (READ records take no sample).
        let i = if self.spans == 0 {
            d as usize
        } else {
            let mut first = 0u32;
            let Some(i) = self.recs.iter().position(|r| {
                first += r.span();
                first > d
            }) else {
                return;
            };
            if self.recs[i].spanned() {
                return;
            }
            i
        };
        if let Some(r) = self.recs.get_mut(i) {
            r.info &= !Sent::SAMPLE;
        }
    }

    /// Everything before `una` arrived (as seen at `now`): retires those
    /// records and returns the feedback (ECN echo left false).
    pub(crate) fn acked_before(&mut self, una: Psn, now: Nanos) -> AckFeedback {
        let mut acked = 0;
        let mut newest: Option<Sent> = None;
        if self.spans == 0 {
            // One PSN per record: those before `una` are the first
            // `una - front` (what `retire_spanned` finds, without its
            // per-record PSNs; run after them, it would stop at once, at
            // the record of `una` or on an empty log). Popped one by one:
            // with an ACK per packet there is one, and `drain`'s set-up and
            // its drop's bookkeeping cost about 50 instructions an ACK
            // around that one record (cachegrind, fat-tree HPCC).
            let n = if una.after(self.front) {
                (una.distance_from(self.front) as usize).min(self.recs.len())
            } else {
                0
            };
            for _ in 0..n {
                if let Some(r) = self.recs.pop_front() {
                    acked += u64::from(r.info & Sent::LOW);
                    newest = Some(r);
                }
            }
            self.front = self.front.add(n as u32);
        } else {
            self.retire_spanned(una, &mut acked, &mut newest);
        }
        self.ack_tail(acked, newest, now)
    }

    /// [`acked_before`](Self::acked_before) over a log holding records
    /// of more than one PSN: each record's PSNs are counted from `front`.
    fn retire_spanned(&mut self, una: Psn, acked: &mut u64, newest: &mut Option<Sent>) {
        while let Some(r) = self.recs.front().copied() {
            let span = r.span();
            // The record's last PSN.
            if !self.front.add(span - 1).before(una) {
                break;
            }
            self.front = self.front.add(span);
            if r.spanned() {
                self.spans -= 1;
            }
            *acked += r.bytes();
            if !r.gap() {
                *newest = Some(r);
            }
            self.recs.pop_front();
        }
    }

    /// The end of [`acked_before`](Self::acked_before): `acked` bytes
    /// retired, the newest of them `newest`.
    #[inline]
    fn ack_tail(&mut self, acked: u64, newest: Option<Sent>, now: Nanos) -> AckFeedback {
        // A burst that once filled the log (16,384 packets without
        // congestion control) leaves its capacity behind for the QP's
        // life; give back half once three quarters stand empty, so
        // thousands of QPs do not each hold their high-water mark (the
        // copy is of at most a quarter, after as many records retired).
        let cap = self.recs.capacity();
        if cap > SHRINK_FROM && self.recs.len() < cap / 4 {
            self.recs.shrink_to(cap / 2);
        }
        self.snd_una += acked;
        let rtt = newest
            .filter(|r| r.sample())
            .map(|r| now.saturating_sub(self.base + u64::from(r.at)));
        let rtt = rtt.map(|rtt| {
            let min_rtt = self.min_rtt.map_or(rtt, |m| m.min(rtt));
            self.min_rtt = Some(min_rtt);
            RttSample { rtt, min_rtt }
        });
        AckFeedback {
            acked_bytes: acked,
            rtt,
            ecn_echo: false,
            snd_una: self.snd_una,
            snd_nxt: self.snd_nxt,
            send_point: self.snd_nxt,
        }
    }

    /// Hints the oldest record's line (see [`crate::prefetch`]).
    #[inline]
    pub(crate) fn prefetch_front(&self, hint: crate::prefetch::Hint) {
        if let Some(r) = self.recs.front() {
            hint((r as *const Sent).cast());
        }
    }

    /// Payload bytes acknowledged since the QP started.
    pub(crate) fn snd_una(&self) -> u64 {
        self.snd_una
    }

    /// Bytes of the packets first sent before `psn` and not yet acknowledged
    /// (what is still in flight once go-back-N rewinds to `psn`).
    pub(crate) fn bytes_before(&self, psn: Psn) -> u64 {
        let mut first = self.front;
        let mut bytes = 0;
        for r in &self.recs {
            let span = r.span();
            if !first.add(span - 1).before(psn) {
                break;
            }
            first = first.add(span);
            bytes += r.bytes();
        }
        bytes
    }

    /// Heap bytes held (see [`crate::footprint`]).
    pub(crate) fn heap_bytes(&self) -> u64 {
        crate::footprint::deque(&self.recs)
    }

    /// The QP failed: nothing is in flight any more.
    pub(crate) fn clear(&mut self) {
        self.recs.clear();
        self.spans = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_from_the_named_packet_and_karn_excludes_resent_ones() {
        let mut log = SentLog::default();
        for i in 0..4u32 {
            log.sent(Psn::new(i), Psn::new(i), 1_000 * u64::from(i), 1000, true);
        }
        // ACK of PSN 1 at t = 11 µs: the sample is PSN 1's (sent at 1 µs).
        let fb = log.acked_before(Psn::new(2), 11_000);
        assert_eq!(fb.acked_bytes, 2000);
        assert_eq!(
            fb.rtt,
            Some(RttSample {
                rtt: 10_000,
                min_rtt: 10_000
            })
        );
        assert_eq!((fb.snd_una, fb.snd_nxt), (2000, 4000));
        // PSN 3 is retransmitted (go-back-N): its ACK is not timed, even
        // though PSN 2's first copy was never resent.
        log.resent(Psn::new(3));
        let fb = log.acked_before(Psn::new(4), 50_000);
        assert_eq!(fb.acked_bytes, 2000);
        assert_eq!(fb.rtt, None);
        // A later, faster sample lowers the minimum.
        log.sent(Psn::new(4), Psn::new(4), 60_000, 1000, true);
        let fb = log.acked_before(Psn::new(5), 68_000);
        assert_eq!(
            fb.rtt,
            Some(RttSample {
                rtt: 8_000,
                min_rtt: 8_000
            })
        );
    }

    #[test]
    fn a_packet_in_flight_costs_its_sender_8_bytes() {
        assert_eq!(std::mem::size_of::<Sent>(), 8);
        // The flag bit and the byte count stay apart.
        let mut log = SentLog::default();
        log.sent(Psn::new(0), Psn::new(0), 7, 4096, true);
        log.sent(Psn::new(1), Psn::new(1), 8, 4096, false);
        log.resent(Psn::new(0));
        assert_eq!(log.bytes_before(Psn::new(2)), 8192);
        let fb = log.acked_before(Psn::new(1), 20);
        assert_eq!((fb.acked_bytes, fb.rtt), (4096, None));
    }

    #[test]
    fn a_drained_log_gives_back_its_room() {
        let mut log = SentLog::default();
        for i in 0..10_000u32 {
            log.sent(Psn::new(i), Psn::new(i), u64::from(i), 1000, true);
        }
        let full = log.recs.capacity();
        assert!(full >= 10_000);
        let fb = log.acked_before(Psn::new(9_990), 20_000);
        assert_eq!(fb.acked_bytes, 9_990_000);
        assert!(log.recs.capacity() <= full / 2, "{}", log.recs.capacity());
        // What is left is intact.
        assert_eq!(log.bytes_before(Psn::new(10_000)), 10_000);
        assert_eq!(
            log.acked_before(Psn::new(10_000), 30_000).acked_bytes,
            10_000
        );
    }

    #[test]
    fn samples_stay_exact_over_a_log_that_never_empties() {
        // A QP streaming for ten seconds of 1 ms round trips, its log
        // never empty: send times run far past 2³² ns from the first.
        let mut log = SentLog::default();
        let (rtt, gap) = (1_000_000u64, 100_000u64);
        let mut psn = 0u32;
        let t0 = 5_000_000_000u64;
        let mut now = t0;
        while now < t0 + 10_000_000_000 {
            log.sent(Psn::new(psn), Psn::new(psn), now, 1000, true);
            psn += 1;
            now += gap;
            // The ACK of the packet sent one RTT ago arrives now.
            let acked = ((now - t0).saturating_sub(rtt) / gap) as u32;
            if acked > 0 {
                let fb = log.acked_before(Psn::new(acked), now);
                if fb.acked_bytes > 0 {
                    let r = fb.rtt.expect("timed");
                    assert_eq!(r.rtt, now - (t0 + u64::from(acked - 1) * gap));
                }
            }
        }
        assert!(log.base > t0 + u64::from(u32::MAX), "rebased");
        // A packet left in flight 4.3 s before the next one: that one
        // gives no sample, the old one still does.
        let mut log = SentLog::default();
        log.sent(Psn::new(0), Psn::new(0), 10, 1000, true);
        log.sent(Psn::new(1), Psn::new(1), 10 + (1 << 33), 1000, true);
        let fb = log.acked_before(Psn::new(1), 20 + (1 << 33));
        assert_eq!(fb.rtt.map(|r| r.rtt), Some(10 + (1 << 33)));
        let fb = log.acked_before(Psn::new(2), 30 + (1 << 33));
        assert_eq!((fb.acked_bytes, fb.rtt), (1000, None));
    }

    #[test]
    fn reads_give_no_sample() {
        let mut log = SentLog::default();
        log.sent(Psn::new(9), Psn::new(9), 0, 0, false);
        let fb = log.acked_before(Psn::new(10), 5_000);
        assert_eq!(fb.rtt, None);
    }

    /// The log against the one it replaced, which stored each record's
    /// last PSN: random sends (with skipped PSNs and multi-PSN READ
    /// requests, across the 24-bit wrap), resends, ACKs and rewinds give
    /// the same bytes and samples.
    #[test]
    fn implicit_psns_match_stored_ones() {
        // (last PSN, send time, bytes, sample)
        let mut model: Vec<(Psn, Nanos, u64, bool)> = Vec::new();
        let mut log = SentLog::default();
        let mut next = Psn::new(Psn::MASK - 40);
        let mut now: Nanos = 1_000;
        let mut x: u64 = 3;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = x >> 33;
            now += r % 50;
            let oldest = model.first().map_or(next, |m| m.0);
            match r % 10 {
                0..=3 => {
                    // Mostly the next PSN; now and then a few skipped.
                    let first = next.add(if r.is_multiple_of(97) {
                        1 + (r >> 8) as u32 % 4
                    } else {
                        0
                    });
                    let (last, bytes, sample) = if r.is_multiple_of(13) {
                        (first.add((r >> 12) as u32 % 5), 0, false)
                    } else {
                        (first, (r >> 12) % 1025, true)
                    };
                    log.sent(first, last, now, bytes, sample);
                    model.push((last, now, bytes, sample));
                    next = last.next();
                }
                4 => {
                    let psn = oldest.sub(2).add((r >> 8) as u32 % 80);
                    log.resent(psn);
                    let i = model.partition_point(|m| m.0.before(psn));
                    if let Some(m) = model.get_mut(i).filter(|m| m.0 == psn) {
                        m.3 = false;
                    }
                }
                5 => {
                    let psn = oldest.add((r >> 8) as u32 % 80);
                    let want: u64 = model
                        .iter()
                        .take_while(|m| m.0.before(psn))
                        .map(|m| m.2)
                        .sum();
                    assert_eq!(log.bytes_before(psn), want);
                }
                _ => {
                    let una = oldest.add((r >> 8) as u32 % 12);
                    let n = model.partition_point(|m| m.0.before(una));
                    let acked: u64 = model[..n].iter().map(|m| m.2).sum();
                    let rtt = n
                        .checked_sub(1)
                        .map(|k| model[k])
                        .filter(|m| m.3)
                        .map(|m| now - m.1);
                    model.drain(..n);
                    let fb = log.acked_before(una, now);
                    assert_eq!((fb.acked_bytes, fb.rtt.map(|s| s.rtt)), (acked, rtt));
                }
            }
            assert_eq!(log.recs.is_empty(), model.is_empty());
        }
    }
}
