//! Requester and completer (IBA 9.7.4–9.7.6, 9.9): segmentation by path MTU,
//! PSN assignment, AckReq placement, the outstanding window and read/atomic
//! credits; then ACK/NAK/response processing, go-back-N retransmission from
//! the oldest unacknowledged PSN, the retransmission and RNR timers, and the
//! in-order retirement of WQEs into completions.

use crate::TransmitSink;
use crate::memory::{Memory, Payload, PayloadRef};
use crate::qp::{Ctx, Qp, QpState, SendWqe};
use crate::types::{Access, Nanos, QpType, Wc, WcFlags, WcOpcode, WcStatus, WrOpcode, sge_pieces};
use roce_wire::{
    AtomicEthRepr, BthRepr, DethRepr, NakCode, Opcode, Psn, RNR_TIMER_US, RethRepr, Syndrome,
    TransportRepr,
};

impl Qp {
    fn outstanding(&self) -> u32 {
        self.next_psn.distance_from(self.una)
    }

    /// Packets in flight, what picks IRN's RTO (§3.1): those BDP-FC lets
    /// be in flight (the oldest unacknowledged PSN and what follows it,
    /// up to the cap, sent or about to be) less those the responder
    /// reported holding, which have arrived. A resend lost behind a BDP of
    /// held packets, which no NAK can reveal while BDP-FC is closed, is
    /// then the few-in-flight case the paper gives RTO_low; counting every
    /// PSN to the message's end made it RTO_high. Not-yet-sent packets the
    /// cap admits count, so a message's first packet does not arm RTO_low.
    ///
    /// A READ's PSNs are its response packets: requested and not yet
    /// received, they are in flight; received past a missing one, they have
    /// arrived, as held request packets have.
    fn in_flight(&self) -> u32 {
        if self.irn() {
            let bdp = self.irn_cfg.bdp_pkts.max(1);
            self.outstanding()
                .min(bdp)
                .saturating_sub(self.sacked.held_count())
                .saturating_sub(self.irn_read_ahead(bdp))
        } else {
            self.outstanding()
        }
    }

    /// The retransmission deadline to arm at `now`: `rto_now(in_flight())`
    /// from `now`, with the packets in flight counted only for IRN, the
    /// one mode whose timeout depends on them (`in_flight` is a call of
    /// its own, and this runs on every ACK that moves `una`).
    #[inline]
    fn rto_from(&self, now: Nanos) -> Option<Nanos> {
        if self.irn() {
            self.rto_now(self.in_flight()).map(|d| now + d)
        } else {
            self.rto_ns().map(|d| now + d)
        }
    }

    /// READ responses received past a missing one, in the WQEs within a
    /// BDP of the oldest unacknowledged PSN (only those can have any).
    fn irn_read_ahead(&self, bdp: u32) -> u32 {
        let una = self.una;
        self.sq
            .iter()
            .map_while(|w| w.first_psn.map(|f| (f, w)))
            .take_while(|(f, _)| !(f.after(una) && f.distance_from(una) >= bdp))
            .filter(|(_, w)| !w.done)
            .map(|(_, w)| w.got_ahead)
            .sum()
    }

    /// READ/ATOMIC credits the WQEs before `upto` hold at the responder
    /// (IBA 9.7.5.1.2's max_rd_atomic): one per atomic or unsplit READ,
    /// one per unanswered request of a READ that IRN's BDP-FC split.
    fn rd_atomic_in_flight(&self, upto: usize) -> usize {
        self.sq
            .iter()
            .take(upto)
            .filter(|w| w.wr.opcode.is_read_or_atomic() && w.first_psn.is_some() && !w.done)
            .map(SendWqe::rd_credits)
            .sum()
    }

    /// BDP-FC for READ responses (IRN §3.2): a READ's responses take PSNs
    /// as request packets do, so the responses asked for are bounded by
    /// the cap like packets sent. A READ at response `k` of WQE `i` is
    /// asked for in segments of at most the room left under the cap, each
    /// its own READ request (IBA 9.4.4: RETH address and length, PSN of
    /// its first response), the next once responses make room. `None`:
    /// not now. A segment waits for a quarter of the cap (or the rest of
    /// the READ) to be free, so a long READ is not asked for one response
    /// per request, and for a READ credit, which each unanswered segment
    /// holds at the responder.
    fn irn_read_span(&self, i: usize, k: u32) -> Option<u32> {
        let w = &self.sq[i];
        let bdp = self.irn_cfg.bdp_pkts.max(1);
        let left = w.npkts.saturating_sub(k).max(1);
        let used = self.cursor_psn().distance_from(self.una);
        let room = bdp.saturating_sub(used);
        if room < left.min((bdp / 4).max(1)) {
            return None;
        }
        if k > 0 && self.rd_atomic_in_flight(i + 1) >= usize::from(self.max_rd_atomic.max(1)) {
            return None;
        }
        Some(room.min(left))
    }

    /// The next requester packet, if one may leave now.
    ///
    /// The tests that turn a poll away (the QP's state, an RNR wait, a
    /// pacing gap) are inlined into the transmit poll, and only a QP that
    /// passes them calls out for its packet: with HPCC on the mid-size
    /// fat5ms run about 40 % of the requester polls are a rate-paced QP
    /// an ACK marked ready before its gap ended, and each paid a call of
    /// its own to be turned away (issue 12).
    ///
    /// The packet goes to `sink` where it is built (see `Rnic::poll_transmit_into`);
    /// `Err` hands the sink back when nothing may leave.
    #[inline(always)]
    pub(crate) fn next_request<Mem: Memory + ?Sized, S: TransmitSink>(
        &mut self,
        now: Nanos,
        ctx: &mut Ctx<'_, Mem>,
        sink: S,
    ) -> Result<S::Out, S> {
        self.last_poll = now;
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return Err(sink);
        }
        if let Some(t) = self.rnr_until {
            if now < t {
                return Err(sink);
            }
            self.rnr_until = None;
        }
        if now < self.next_send_at {
            return Err(sink);
        }
        self.next_request_due(now, ctx, sink)
    }

    /// [`next_request`](Self::next_request) for a QP nothing turned away:
    /// retransmissions (IRN), the send queue's next packet, the window.
    #[inline(never)]
    fn next_request_due<Mem: Memory + ?Sized, S: TransmitSink>(
        &mut self,
        now: Nanos,
        ctx: &mut Ctx<'_, Mem>,
        sink: S,
    ) -> Result<S::Out, S> {
        let mut sink = sink;
        if self.irn() {
            // Retransmissions first, and never held back by BDP-FC: they
            // are what lets the window move (IRN §3.2).
            match self.irn_retransmit(now, ctx, sink) {
                Ok(r) => return Ok(r),
                Err(f) => sink = f,
            }
            if self.state == QpState::Err {
                return Err(sink);
            }
        }
        loop {
            let (i, k) = self.cursor;
            let Some(w) = self.sq.get(i) else {
                return Err(sink);
            };
            if w.done && w.first_psn.is_some() {
                self.cursor = (i + 1, 0);
                continue;
            }
            if w.first_psn.is_some() && k < w.acked && !w.wr.opcode.is_atomic() {
                // Go-back-N need not resend what is known to have arrived.
                self.cursor = (i, w.acked);
                continue;
            }
            if w.first_psn.is_none() && self.start_wqe(i, ctx) != Some(true) {
                return Err(sink);
            }
            let window = self
                .cc
                .window_bytes()
                .filter(|_| self.init.qp_type == QpType::Rc);
            if window.is_some_and(|win| self.inflight_bytes >= win && self.inflight_bytes > 0) {
                return Err(sink);
            }
            // BDP-FC (IRN §3.2): no new packet beyond a BDP past the oldest unacknowledged.
            if self.irn()
                && self.max_sent_psn_after(self.cursor_psn())
                && self.cursor_psn().distance_from(self.una) >= self.irn_cfg.bdp_pkts.max(1)
            {
                return Err(sink);
            }
            let read = matches!(self.sq[i].wr.opcode, WrOpcode::RdmaRead { .. });
            let span = if self.irn() && read {
                match self.irn_read_span(i, k) {
                    Some(s) => s,
                    None => return Err(sink),
                }
            } else {
                u32::MAX
            };
            return self.emit_packet(now, i, k, span, ctx, sink);
        }
    }

    /// Starts WQE `i`: fence and credit checks, local key checks, PSNs.
    /// `Some(false)` means "not now"; `None` means the QP just failed.
    fn start_wqe<Mem: Memory + ?Sized>(
        &mut self,
        i: usize,
        ctx: &mut Ctx<'_, Mem>,
    ) -> Option<bool> {
        if self.state == QpState::Sqd {
            return Some(false);
        }
        let w = &self.sq[i];
        let op = w.wr.opcode;
        if w.wr.flags.fence && self.rd_atomic_in_flight(i) > 0 {
            return Some(false);
        }
        if op.is_read_or_atomic()
            && self.rd_atomic_in_flight(i) >= usize::from(self.max_rd_atomic.max(1))
        {
            return Some(false);
        }
        let mtu = u64::from(self.mtu.bytes());
        let npkts = match op {
            WrOpcode::AtomicCmpAndSwp { .. } | WrOpcode::AtomicFetchAndAdd { .. } => 1,
            _ => w.len.div_ceil(mtu).max(1) as u32,
        };
        if self.init.qp_type == QpType::Rc
            && self.outstanding() > 0
            && self.outstanding() + npkts > ctx.cfg.max_outstanding_pkts
            && !op.is_read_or_atomic()
        {
            return Some(false);
        }
        // Local checks before any byte moves (IBA 10.6.3.1 / C10-xx).
        let mut fail = None;
        let too_long = (self.init.qp_type == QpType::Ud && w.len > mtu) || w.len > (1u64 << 31);
        if too_long || (op.is_atomic() && w.len != 8) {
            fail = Some(WcStatus::LocLenErr);
        } else if w.inline.is_none() {
            let need = if op.is_read_or_atomic() {
                Access::LOCAL_WRITE
            } else {
                Access::NONE
            };
            for s in &w.wr.sg_list {
                if ctx
                    .mrs
                    .check_local(self.init.pd, s.lkey, s.addr, u64::from(s.length), need)
                    .is_err()
                {
                    fail = Some(WcStatus::LocProtErr);
                    break;
                }
            }
        }
        let psn = self.next_psn;
        let irn = self.irn();
        let w = &mut self.sq[i];
        w.first_psn = Some(psn);
        w.npkts = npkts;
        w.checked = true;
        if let Some(st) = fail {
            w.done = true;
            w.status = st;
            self.retire(ctx);
            return None;
        }
        if irn && matches!(w.wr.opcode, WrOpcode::RdmaRead { .. }) {
            w.got = vec![false; npkts as usize];
        }
        self.next_psn = psn.add(npkts);
        Some(true)
    }

    /// Gathers `len` bytes at message offset `off` of WQE `i`.
    fn gather<Mem: Memory + ?Sized>(
        &self,
        i: usize,
        off: u64,
        len: u64,
        ctx: &mut Ctx<'_, Mem>,
    ) -> Option<Payload> {
        let w = &self.sq[i];
        if let Some(Payload::Bytes(b)) = &w.inline {
            return Some(Payload::Bytes(
                b[off as usize..(off + len) as usize].to_vec(),
            ));
        }
        let mut out = ctx.mem.empty_payload();
        if let Payload::Bytes(v) = &mut out {
            v.reserve(len as usize);
        }
        for (_, addr, n) in sge_pieces(&w.wr.sg_list, off, len) {
            ctx.mem.read_into(addr, n as usize, &mut out).ok()?;
        }
        Some(out)
    }

    /// Emits packet `k` of WQE `i`; a READ request asks for at most `span`
    /// response packets from there (IRN re-requests a missing range only).
    fn emit_packet<Mem: Memory + ?Sized, S: TransmitSink>(
        &mut self,
        now: Nanos,
        i: usize,
        k: u32,
        span: u32,
        ctx: &mut Ctx<'_, Mem>,
        sink: S,
    ) -> Result<S::Out, S> {
        let mtu = u64::from(self.mtu.bytes());
        let (op, len, first_psn, npkts) = {
            let w = &self.sq[i];
            let Some(first_psn) = w.first_psn else {
                return Err(sink);
            };
            (w.wr.opcode, w.len, first_psn, w.npkts)
        };
        let psn = first_psn.add(k);
        let first = k == 0;
        let last = k + 1 >= npkts;
        let mut t = TransportRepr::new(BthRepr {
            dest_qp: self.dest_qpn,
            psn,
            ..Default::default()
        });
        let mut payload = Payload::empty();
        // The payload's length, read once: each `Payload::len` is a match
        // on its kind, which the compiler did not share between uses.
        let mut bytes = payload.len() as u64;
        let mut next_cursor = if last { (i + 1, 0) } else { (i, k + 1) };
        // A READ request's responses: the PSNs it takes.
        let mut read_span = 1;
        let ud = self.init.qp_type == QpType::Ud;
        match op {
            WrOpcode::RdmaRead { remote_addr, rkey } => {
                t.bth.opcode = Opcode::RcReadRequest;
                let off = u64::from(k) * mtu;
                t.reth = Some(RethRepr {
                    va: remote_addr.wrapping_add(off),
                    rkey,
                    dma_len: len
                        .saturating_sub(off)
                        .min(u64::from(span).saturating_mul(mtu))
                        as u32,
                });
                t.bth.ack_req = true;
                read_span = span.min(npkts.saturating_sub(k)).max(1);
                // IRN asks for a READ cut by BDP-FC a segment at a time.
                next_cursor = if self.irn() && k + read_span < npkts {
                    (i, k + read_span)
                } else {
                    (i + 1, 0)
                };
            }
            WrOpcode::AtomicCmpAndSwp {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                t.bth.opcode = Opcode::RcCompareSwap;
                t.atomic_eth = Some(AtomicEthRepr {
                    va: remote_addr,
                    rkey,
                    swap_add: swap,
                    compare,
                });
                t.bth.ack_req = true;
            }
            WrOpcode::AtomicFetchAndAdd {
                remote_addr,
                rkey,
                add,
            } => {
                t.bth.opcode = Opcode::RcFetchAdd;
                t.atomic_eth = Some(AtomicEthRepr {
                    va: remote_addr,
                    rkey,
                    swap_add: add,
                    compare: 0,
                });
                t.bth.ack_req = true;
            }
            _ => {
                let off = u64::from(k) * mtu;
                let n = mtu.min(len - off.min(len));
                payload = match self.gather(i, off, n, ctx) {
                    Some(p) => p,
                    None => {
                        self.fail_wqe(i, WcStatus::LocProtErr, ctx);
                        return Err(sink);
                    }
                };
                bytes = payload.len() as u64;
                t.bth.opcode = data_opcode(op, first, last, ud);
                match op {
                    WrOpcode::RdmaWrite { remote_addr, rkey }
                    | WrOpcode::RdmaWriteWithImm {
                        remote_addr, rkey, ..
                    } if first => {
                        t.reth = Some(RethRepr {
                            va: remote_addr,
                            rkey,
                            dma_len: len as u32,
                        });
                    }
                    _ => {}
                }
                if last {
                    match op {
                        WrOpcode::SendWithImm(imm) | WrOpcode::RdmaWriteWithImm { imm, .. } => {
                            t.immdt = Some(imm)
                        }
                        WrOpcode::SendWithInv(rkey) => t.ieth = Some(rkey),
                        _ => {}
                    }
                    t.bth.solicited =
                        self.sq[i].wr.flags.solicited && !matches!(op, WrOpcode::RdmaWrite { .. });
                }
                self.since_ackreq += 1;
                // Under a congestion window, ask for ACKs once half of it is
                // in flight: otherwise the window could fill with packets no
                // one acknowledges until the message ends.
                let window_half = self
                    .cc
                    .window_bytes()
                    .is_some_and(|w| 2 * (self.inflight_bytes + bytes) >= w);
                // Under IRN's BDP cap likewise: ask at least twice per BDP,
                // or a sender whose ACK interval exceeds its cap stops at
                // the cap with nothing acknowledged until a timeout.
                let every = if self.irn() {
                    ctx.cfg
                        .ack_req_every
                        .min((self.irn_cfg.bdp_pkts / 2).max(1))
                } else {
                    ctx.cfg.ack_req_every
                };
                // IRN: the first packet that can show a selective resend
                // lost asks to be acknowledged, so the responder's SACK
                // (sent only when asked, or when its holes change) comes
                // back while the resend's hole is still open.
                let sack_probe = self
                    .irn_probe_at
                    .is_some_and(|at| !psn.before(at) && self.max_sent_psn_after(psn));
                if sack_probe {
                    self.irn_probe_at = None;
                }
                t.bth.ack_req =
                    !ud && (last || window_half || sack_probe || self.since_ackreq >= every);
            }
        }
        let dst;
        if ud {
            let Some(d) = self.sq[i].wr.ud else {
                return Err(sink);
            };
            let qkey = if d.remote_qkey & 0x8000_0000 != 0 {
                self.qkey
            } else {
                d.remote_qkey
            };
            t.deth = Some(DethRepr {
                qkey,
                src_qp: self.qpn,
            });
            t.bth.dest_qp = d.remote_qpn;
            t.bth.psn = psn;
            dst = d.addr;
        } else {
            let Some(a) = self.ah else {
                return Err(sink);
            };
            dst = a;
        }
        if t.bth.ack_req {
            self.since_ackreq = 0;
        }
        self.cursor = next_cursor;
        let wire = bytes + t.header_len() as u64 + crate::PACKET_OVERHEAD;
        let retransmit = !self.max_sent_psn_after(psn);
        if retransmit {
            ctx.counters.retransmits += 1;
            // In flight again (its `sent_log` entry stays from the first send).
            self.inflight_bytes += bytes;
            self.sent_log.resent(psn);
        } else {
            let read = matches!(op, WrOpcode::RdmaRead { .. });
            let lastp = if read { psn.add(read_span - 1) } else { psn };
            if read && self.irn() {
                let w = &mut self.sq[i];
                w.segs.push(k);
                w.issued = k + read_span;
            }
            // A UD QP's packets are never acknowledged: it keeps no log.
            if !ud {
                self.sent_log.sent(psn, lastp, now, bytes, !read);
            }
            self.inflight_bytes += bytes;
            self.max_sent = Some(lastp);
        }
        ctx.counters.tx_pkts += 1;
        ctx.counters.tx_bytes += wire;
        self.cc.on_send(now, wire as usize);
        let gap_from = if let Some(rate) = self.cc.rate_bps().filter(|r| *r > 0) {
            self.cc_min_rate = Some(self.cc_min_rate.map_or(rate, |m| m.min(rate)));
            let behind = now.saturating_sub(ctx.cfg.pacing_catch_up_ns);
            let from = self.next_send_at.max(behind);
            self.next_send_at = from + pacing_gap(wire, rate);
            from
        } else {
            now
        };
        if self.cc.rescales_gap().is_some() {
            self.gap_from = gap_from;
            self.gap_wire = u32::try_from(wire).unwrap_or(u32::MAX);
        }
        if ud {
            let w = &mut self.sq[i];
            w.done = true;
            w.status = WcStatus::Success;
            self.una = self.next_psn;
            self.retire(ctx);
        } else if self.rto_deadline.is_none() {
            self.rto_deadline = self.rto_from(now);
        }
        Ok(self.put(sink, dst, self.dscp, ctx.cfg.ecn, t, payload))
    }

    fn max_sent_psn_after(&self, psn: Psn) -> bool {
        match self.max_sent {
            None => true,
            Some(m) => psn.after(m),
        }
    }

    /// PSN of the packet the cursor points at.
    pub(crate) fn cursor_psn(&self) -> Psn {
        let (i, k) = self.cursor;
        match self.sq.get(i).and_then(|w| w.first_psn) {
            Some(f) => f.add(k),
            None => self.next_psn,
        }
    }

    /// Moves the transmit cursor back to `psn` (go-back-N). A no-op when the
    /// cursor is already at or before `psn`: that resend is under way.
    pub(crate) fn rewind<Mem: Memory + ?Sized>(
        &mut self,
        now: Nanos,
        psn: Psn,
        ctx: &mut Ctx<'_, Mem>,
    ) {
        if self.irn() {
            // IRN never goes back: resend what is missing from `psn` on.
            let end = self.max_sent.map_or(psn, Psn::next);
            self.irn_note_loss(psn, end, true);
            ctx.counters.rewinds += 1;
            return;
        }
        if !self.cursor_psn().after(psn) {
            return;
        }
        ctx.counters.rewinds += 1;
        self.move_cursor_back(psn);
        // What was sent from here on is lost as far as the window goes
        // (go-back-N sends it again): in flight is what lies before the
        // cursor, as ns-3's snd_nxt − snd_una. Left counted, a window
        // smaller than the lost bytes would block the very resend that
        // could acknowledge them, until the retries ran out.
        let cursor = self.cursor_psn();
        self.inflight_bytes = self.sent_log.bytes_before(cursor);
        // Sending resumes here: congestion control that acts once per
        // window of sent data (HPCC) counts from this point, as ns-3's
        // RecoverQueue rewinds snd_nxt before its HPCC reads it.
        self.cc
            .on_rewind(now, self.sent_log.snd_una() + self.inflight_bytes);
    }

    fn move_cursor_back(&mut self, psn: Psn) {
        for (i, w) in self.sq.iter().enumerate() {
            let (Some(first), Some(last)) = (w.first_psn, w.last_psn()) else {
                self.cursor = (i, 0);
                return;
            };
            if w.done || psn.after(last) {
                continue;
            }
            // The first unfinished WQE that reaches `psn`: resume inside it,
            // or at its start when `psn` fell in a WQE already finished.
            self.cursor = (
                i,
                if psn.before(first) {
                    0
                } else {
                    psn.distance_from(first)
                },
            );
            return;
        }
        self.cursor = (self.sq.len(), 0);
    }

    /// The oldest PSN not yet known to have arrived: the first unfinished
    /// WQE's first PSN plus what of it is acknowledged.
    fn oldest_unacked(&self) -> Psn {
        for w in &self.sq {
            if w.done {
                continue;
            }
            return match w.first_psn {
                Some(f) => f.add(w.acked),
                None => self.next_psn,
            };
        }
        self.next_psn
    }

    /// Recomputes `una` after acknowledgements; forward progress resets the
    /// retry counters, restarts the retransmission timer and feeds congestion control.
    fn refresh_una(&mut self, now: Nanos) {
        let new_una = self.oldest_unacked();
        self.advance_una(now, new_una);
    }

    /// [`refresh_una`](Self::refresh_una) with the oldest unacknowledged
    /// PSN already known (`new_una`, what `oldest_unacked` would give).
    #[inline(always)]
    fn advance_una(&mut self, now: Nanos, new_una: Psn) {
        if new_una.after(self.una) {
            self.una = new_una;
            self.retries_left = self.retry_cnt;
            self.rnr_retries_left = self.rnr_retry;
            if self.rewound_at.is_some_and(|r| r.before(new_una)) {
                self.rewound_at = None;
            }
            let mut fb = self.sent_log.acked_before(new_una, now);
            fb.ecn_echo = std::mem::take(&mut self.ece_rx);
            self.inflight_bytes = self.inflight_bytes.saturating_sub(fb.acked_bytes);
            // Go-back-N sends again what lies past the cursor: the send
            // point is what lies before it (IRN never goes back).
            if !self.irn() {
                fb.send_point = fb.snd_una + self.inflight_bytes;
            }
            self.cc.on_ack(now, &fb);
            if self.irn() {
                let una = self.una;
                self.sacked.advance(una);
                self.resent_at.retain(|&p, _| !Psn::new(p).before(una));
                if self.episode.is_some_and(|e| e.until.before(una)) {
                    self.episode = None;
                }
            }
            self.rto_deadline = self.rto_from(now);
        }
        if self.outstanding() == 0 {
            self.rto_deadline = None;
        }
    }

    /// Everything up to and including `p` is acknowledged.
    fn ack_upto<Mem: Memory + ?Sized>(&mut self, now: Nanos, p: Psn, ctx: &mut Ctx<'_, Mem>) {
        // Only PSNs in [una-1, next_psn-1] can be acknowledged; others are stale.
        if !p.in_window(self.una.sub(1), self.outstanding() + 1) {
            ctx.counters.stale_acks += 1;
            return;
        }
        // The common case first: `p` falls inside the oldest WQE, still
        // unfinished, a SEND or WRITE (an ACK per packet or per few of a
        // long message). The walk below would stop at that WQE having
        // raised its count, the oldest unacknowledged PSN is then its
        // first plus that count, and nothing retires (the head is not
        // done): the same effects, without the second walk of the queue
        // `oldest_unacked` makes and the call to `retire` (about 90
        // instructions an ACK on the 1 ms HPCC fat tree).
        if let Some(w) = self.sq.front_mut()
            && !w.done
            && let Some(first) = w.first_psn
            && !p.before(first)
            && first.add(w.npkts.max(1) - 1).after(p)
            && !w.wr.opcode.is_read_or_atomic()
        {
            w.acked = w.acked.max(p.distance_from(first) + 1);
            let new_una = first.add(w.acked);
            self.advance_una(now, new_una);
            return;
        }
        for i in 0..self.sq.len() {
            let (Some(first), Some(last)) = (self.sq[i].first_psn, self.sq[i].last_psn()) else {
                break;
            };
            if self.sq[i].done {
                continue;
            }
            if p.before(first) {
                break;
            }
            if self.sq[i].wr.opcode.is_read_or_atomic() {
                // An ACK that covers an unanswered READ/ATOMIC: its responses
                // were lost (IBA 9.7.5.1.3, implied NAK) — ask again.
                let resume = first.add(self.sq[i].acked);
                if self.irn() {
                    // Only this READ's missing responses (or the atomic) are
                    // asked for again, of those asked for so far.
                    let w = &self.sq[i];
                    let end = if matches!(w.wr.opcode, WrOpcode::RdmaRead { .. }) {
                        first.add(w.issued.min(w.npkts))
                    } else {
                        last.next()
                    };
                    if end.after(resume) {
                        self.irn_note_loss(resume, end, false);
                    }
                } else {
                    self.rewind(now, resume, ctx);
                }
                break;
            }
            if !last.after(p) {
                self.sq[i].done = true;
                self.sq[i].status = WcStatus::Success;
            } else {
                let w = &mut self.sq[i];
                w.acked = w.acked.max(p.distance_from(first) + 1);
                break;
            }
        }
        self.refresh_una(now);
        self.retire(ctx);
    }

    /// Completer: an ACK, NAK, atomic ACK or read response arrived.
    pub(crate) fn on_response<Mem: Memory + ?Sized>(
        &mut self,
        now: Nanos,
        t: &TransportRepr,
        payload: PayloadRef<'_>,
        ctx: &mut Ctx<'_, Mem>,
    ) {
        if !matches!(self.state, QpState::Rts | QpState::Sqd | QpState::Rtr) {
            ctx.counters.rx_dropped_state += 1;
            return;
        }
        let psn = t.bth.psn;
        let op = t.bth.opcode;
        if op.is_read_response() {
            self.on_read_response(now, t, payload, ctx);
            return;
        }
        let Some(aeth) = t.aeth else { return };
        match (op, aeth.syndrome) {
            (Opcode::RcAtomicAck, _) => {
                let Some(orig) = t.atomic_ack_eth.map(|a| a.orig) else {
                    return;
                };
                let is_ours =
                    |w: &SendWqe| w.first_psn == Some(psn) && w.wr.opcode.is_atomic() && !w.done;
                if !self.sq.iter().any(is_ours) {
                    ctx.counters.stale_acks += 1;
                    return;
                }
                self.ack_upto(now, psn.sub(1), ctx);
                let Some(i) = self.sq.iter().position(is_ours) else {
                    return;
                };
                let sge = self.sq[i].wr.sg_list.first().copied();
                let ok = sge.is_some_and(|s| ctx.mem.write_u64(s.addr, orig).is_ok());
                let w = &mut self.sq[i];
                w.done = true;
                w.status = if ok {
                    WcStatus::Success
                } else {
                    WcStatus::LocProtErr
                };
                w.acked = 1;
                self.refresh_una(now);
                self.retire(ctx);
            }
            (_, Syndrome::Ack { .. }) => {
                // The responder's ECN echo rides on the ACK (DCTCP's ECE).
                self.ece_rx = t.bth.becn;
                self.ack_upto(now, psn, ctx);
                self.ece_rx = false;
            }
            (_, Syndrome::RnrNak { timer }) => {
                ctx.counters.rnr_naks_rx += 1;
                self.ack_upto(now, psn.sub(1), ctx);
                if self.state != QpState::Rts && self.state != QpState::Sqd {
                    return;
                }
                if self.rnr_retry != 7 {
                    if self.rnr_retries_left == 0 {
                        self.fail_oldest(WcStatus::RnrRetryExcErr, ctx);
                        return;
                    }
                    self.rnr_retries_left -= 1;
                }
                let wait = u64::from(RNR_TIMER_US[usize::from(timer & 31)]) * 1000;
                self.rnr_until = Some(now + wait);
                self.rto_deadline = None;
                // The responder refused `psn` and dropped it, however it
                // had reported holding it: resend from there as if nothing were held.
                self.sacked.clear();
                self.rewind(now, psn, ctx);
            }
            (_, Syndrome::Nak(NakCode::PsnSequenceError)) if self.irn() => {
                ctx.counters.naks_rx += 1;
                self.ack_upto(now, psn.sub(1), ctx);
                let block = crate::irn::decode_sack(psn, aeth.msn);
                self.irn_on_sack(now, psn, block, ctx);
            }
            (_, Syndrome::Nak(code)) => {
                ctx.counters.naks_rx += 1;
                self.cc.on_nak(now);
                self.ack_upto(now, psn.sub(1), ctx);
                if self.state != QpState::Rts && self.state != QpState::Sqd {
                    return;
                }
                let status = match code {
                    NakCode::PsnSequenceError => {
                        // A NAK for a PSN already acknowledged, or never sent,
                        // is stale (a delayed or duplicated copy): ignore it.
                        if !psn.in_window(self.una, self.outstanding()) {
                            ctx.counters.stale_acks += 1;
                            return;
                        }
                        // A copy of a NAK already acted on (no progress since) is ignored.
                        if self.rewound_at == Some(psn) {
                            return;
                        }
                        self.rewound_at = Some(psn);
                        if self.retries_left == 0 {
                            self.fail_oldest(WcStatus::RetryExcErr, ctx);
                        } else {
                            self.retries_left -= 1;
                            self.rewind(now, psn, ctx);
                        }
                        return;
                    }
                    NakCode::InvalidRequest | NakCode::InvalidRdRequest => WcStatus::RemInvReqErr,
                    NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                    NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                    NakCode::Reserved(_) => WcStatus::BadRespErr,
                };
                self.fail_at(psn, status, ctx);
            }
            (_, Syndrome::Reserved(_)) => ctx.counters.rx_malformed += 1,
        }
    }

    fn on_read_response<Mem: Memory + ?Sized>(
        &mut self,
        now: Nanos,
        t: &TransportRepr,
        payload: PayloadRef<'_>,
        ctx: &mut Ctx<'_, Mem>,
    ) {
        let psn = t.bth.psn;
        let Some(i) = self.sq.iter().position(|w| {
            matches!(w.wr.opcode, WrOpcode::RdmaRead { .. })
                && !w.done
                && w.first_psn
                    .is_some_and(|f| !psn.before(f) && !psn.after(f.add(w.npkts - 1)))
        }) else {
            ctx.counters.stale_acks += 1;
            return;
        };
        let first = self.sq[i].first_psn.unwrap_or(psn);
        let expected = first.add(self.sq[i].acked);
        if self.irn() && !self.sq[i].got.is_empty() {
            self.irn_read_response(now, i, t, payload, ctx);
            return;
        }
        if psn != expected {
            if psn.after(expected) {
                ctx.counters.out_of_sequence += 1;
                self.rewind(now, expected, ctx);
            }
            return;
        }
        let Some(i) = self.ack_before_read(now, i, first, ctx) else {
            return;
        };
        let mtu = u64::from(self.mtu.bytes());
        let (index, npkts, len) = (self.sq[i].acked, self.sq[i].npkts, self.sq[i].len);
        let want = read_response_opcode(index, npkts);
        let off = u64::from(index) * mtu;
        let expect_len = mtu.min(len - off.min(len));
        // A replayed read may restart with FIRST/ONLY where MIDDLE/LAST was
        // expected: accept any opcode at the right position as long as it
        // closes the message where we expect it to.
        let closes = matches!(
            t.bth.opcode,
            Opcode::RcReadResponseLast | Opcode::RcReadResponseOnly
        );
        let position_ok = t.bth.opcode == want || (closes && index + 1 == npkts);
        if !position_ok || payload.len() as u64 != expect_len {
            self.fail_wqe(i, WcStatus::BadRespErr, ctx);
            return;
        }
        if !self.scatter_response(i, off, payload, ctx) {
            return;
        }
        let w = &mut self.sq[i];
        w.acked += 1;
        if w.acked == npkts {
            w.done = true;
            w.status = WcStatus::Success;
        }
        self.refresh_una(now);
        self.retire(ctx);
    }

    /// Retransmission and RNR timers.
    pub(crate) fn on_timer<Mem: Memory + ?Sized>(&mut self, now: Nanos, ctx: &mut Ctx<'_, Mem>) {
        if self.rto_deadline.is_some_and(|d| d <= now) {
            if self.outstanding() == 0 {
                self.rto_deadline = None;
                return;
            }
            ctx.counters.timeouts += 1;
            self.cc.on_timeout(now);
            if self.retries_left == 0 {
                self.fail_oldest(WcStatus::RetryExcErr, ctx);
                return;
            }
            self.retries_left -= 1;
            let una = self.una;
            if self.irn() {
                // A timeout resends the oldest unacknowledged packet even if
                // reported held: when the ACK for what the responder used
                // was lost, its duplicate is what draws a fresh ACK.
                // Everything else reported held stays skipped; clearing the
                // whole scoreboard (as RFC 2018 §8 suggests for TCP) resent
                // a BDP of duplicates per timeout on real sockets.
                self.sacked.remove(una);
            }
            self.rewind(now, una, ctx);
            self.rto_deadline = self.rto_from(now);
        }
    }

    /// Completes the WQE holding `psn` with `status` and moves the QP to ERR.
    fn fail_at<Mem: Memory + ?Sized>(
        &mut self,
        psn: Psn,
        status: WcStatus,
        ctx: &mut Ctx<'_, Mem>,
    ) {
        let i = self
            .sq
            .iter()
            .position(|w| {
                !w.done
                    && w.first_psn.is_some_and(|f| !psn.before(f))
                    && w.last_psn().is_some_and(|l| !psn.after(l))
            })
            .or_else(|| self.sq.iter().position(|w| !w.done));
        match i {
            Some(i) => self.fail_wqe(i, status, ctx),
            None => self.enter_error(ctx),
        }
    }

    /// Retries exhausted: the oldest unfinished WQE takes the error.
    fn fail_oldest<Mem: Memory + ?Sized>(&mut self, status: WcStatus, ctx: &mut Ctx<'_, Mem>) {
        match self.sq.iter().position(|w| !w.done) {
            Some(i) => self.fail_wqe(i, status, ctx),
            None => self.enter_error(ctx),
        }
    }

    pub(crate) fn fail_wqe<Mem: Memory + ?Sized>(
        &mut self,
        i: usize,
        status: WcStatus,
        ctx: &mut Ctx<'_, Mem>,
    ) {
        if let Some(w) = self.sq.get_mut(i) {
            w.done = true;
            w.status = status;
        }
        // Earlier unfinished WQEs cannot complete successfully any more.
        self.retire(ctx);
        if self.state != QpState::Err {
            self.enter_error(ctx);
        }
    }

    /// Pops finished WQEs from the head of the SQ, in order, into completions.
    pub(crate) fn retire<Mem: Memory + ?Sized>(&mut self, ctx: &mut Ctx<'_, Mem>) {
        let mut failed = false;
        while self.sq.front().is_some_and(|w| w.done) {
            let Some(w) = self.sq.pop_front() else { break };
            // The cursor indexes the SQ: shift it with the queue, and if it
            // pointed into the WQE just retired, restart at the next one.
            self.cursor = match self.cursor {
                (0, _) => (0, 0),
                (i, k) => (i - 1, k),
            };
            if w.signaled || self.init.sq_sig_all || w.status != WcStatus::Success {
                ctx.complete(self.init.send_cq, send_wc(self.qpn, &w, w.status));
            }
            if w.status != WcStatus::Success {
                failed = true;
                break;
            }
        }
        if failed && self.state != QpState::Err {
            self.enter_error(ctx);
        }
    }

    /// Moves the QP to ERR: every outstanding WQE completes with WR_FLUSH_ERR
    /// (IBA 10.3.1 / C10-28), receive WQEs too (SRQ WQEs stay in the SRQ).
    pub(crate) fn enter_error<Mem: Memory + ?Sized>(&mut self, ctx: &mut Ctx<'_, Mem>) {
        self.state = QpState::Err;
        while let Some(w) = self.sq.pop_front() {
            let st = if w.done {
                w.status
            } else {
                WcStatus::WrFlushErr
            };
            ctx.complete(self.init.send_cq, send_wc(self.qpn, &w, st));
        }
        while let Some(r) = self.rq.pop_front() {
            ctx.complete(
                self.init.recv_cq,
                Wc::flushed(r.wr_id, WcOpcode::Recv, self.qpn),
            );
        }
        if let Some(crate::qp::InMsg::Send { wqe, .. }) = self.in_msg.take() {
            ctx.complete(
                self.init.recv_cq,
                Wc::flushed(wqe.wr_id, WcOpcode::Recv, self.qpn),
            );
        }
        self.cursor = (0, 0);
        self.rto_deadline = None;
        self.rnr_until = None;
        self.resp_q
            .retain(|r| matches!(r, crate::qp::RespItem::Nak { .. }));
        self.sent_log.clear();
        self.inflight_bytes = 0;
        self.sacked.clear();
        self.resent_at.clear();
        self.irn_probe_at = None;
        self.episode = None;
        self.held.clear();
        self.top_run = None;
        self.held_write = None;
    }
}

/// The pacing gap after a packet of `wire` bytes at `rate` b/s (whole ns,
/// rounded down).
fn pacing_gap(wire: u64, rate: u64) -> Nanos {
    wire * 8 * 1_000_000_000 / rate.max(1)
}

impl Qp {
    /// Telemetry an ACK carried back (HPCC's INT, HPCC-PINT's code), to
    /// the controller; for one that re-times a pending gap when its rate
    /// changes ([`CongestionControl::rescales_gap`]), the gap since the
    /// last packet then runs at the new rate from where it began, as the
    /// HPCC ns-3 simulator's `ChangeRate` moves `m_nextAvail` by the
    /// difference of the last packet's times at the two rates. A slower
    /// rate holds the next packet back further; a faster one may let it
    /// out at once. (ns-3 moves the time by each change in turn; one
    /// packet's time at the latest rate is the same sum, rounded once.)
    ///
    /// [`CongestionControl::rescales_gap`]: crate::cc::CongestionControl::rescales_gap
    pub(crate) fn on_telemetry(&mut self, now: Nanos, t: crate::cc::Telemetry<'_>) {
        let before = self.cc.rate_bps();
        self.cc.on_telemetry(now, t);
        if let Some(line) = self.cc.rescales_gap() {
            let after = self.cc.rate_bps();
            if after != before && self.gap_wire > 0 {
                let rate = after.filter(|r| *r > 0).unwrap_or(line);
                let retimed = self.gap_from + pacing_gap(u64::from(self.gap_wire), rate);
                // A gap that ended before `now` moves no earlier than it
                // stood (nor than `now`): a QP that ran dry had its next
                // send raised to the clock when work was posted, so that
                // a driver's catch-up (`RnicConfig::pacing_catch_up_ns`)
                // gives it no credit for the idle time, and a re-timing
                // must not hand that credit back. Without catch-up a time
                // in the past and `now` are the same to the pacer.
                self.next_send_at = retimed.max(self.next_send_at.min(now));
            }
        }
    }
}

fn send_wc(qpn: u32, w: &SendWqe, status: WcStatus) -> Wc {
    Wc {
        wr_id: w.wr.wr_id,
        status,
        opcode: w.wr.opcode.wc_opcode(),
        byte_len: if status == WcStatus::Success {
            w.len as u32
        } else {
            0
        },
        imm_data: 0,
        qp_num: qpn,
        src_qp: 0,
        wc_flags: WcFlags::default(),
        src: None,
    }
}

/// Opcode for a SEND/WRITE packet at a message position.
fn data_opcode(op: WrOpcode, first: bool, last: bool, ud: bool) -> Opcode {
    use Opcode::*;
    if ud {
        return match op {
            WrOpcode::SendWithImm(_) => UdSendOnlyImm,
            _ => UdSendOnly,
        };
    }
    match (op, first, last) {
        (WrOpcode::RdmaWrite { .. } | WrOpcode::RdmaWriteWithImm { .. }, true, false) => {
            RcWriteFirst
        }
        (WrOpcode::RdmaWrite { .. } | WrOpcode::RdmaWriteWithImm { .. }, false, false) => {
            RcWriteMiddle
        }
        (WrOpcode::RdmaWrite { .. }, false, true) => RcWriteLast,
        (WrOpcode::RdmaWrite { .. }, true, true) => RcWriteOnly,
        (WrOpcode::RdmaWriteWithImm { .. }, false, true) => RcWriteLastImm,
        (WrOpcode::RdmaWriteWithImm { .. }, true, true) => RcWriteOnlyImm,
        (_, true, false) => RcSendFirst,
        (_, false, false) => RcSendMiddle,
        (WrOpcode::SendWithImm(_), false, true) => RcSendLastImm,
        (WrOpcode::SendWithImm(_), true, true) => RcSendOnlyImm,
        (WrOpcode::SendWithInv(_), false, true) => RcSendLastInv,
        (WrOpcode::SendWithInv(_), true, true) => RcSendOnlyInv,
        (_, false, true) => RcSendLast,
        (_, true, true) => RcSendOnly,
    }
}

/// IRN's requester side (Mittal et al., SIGCOMM 2018, §3.1; see `crate::irn`).
impl Qp {
    /// Notes that the PSNs in `[from, end)` not reported held are lost.
    /// Within an episode the range only grows (each packet is resent once
    /// per episode); `restart` (a timeout or an RNR NAK) begins a new one.
    pub(crate) fn irn_note_loss(&mut self, from: Psn, end: Psn, restart: bool) {
        let until = self.max_sent.unwrap_or(self.una);
        match &mut self.episode {
            Some(e) if !restart => {
                if end.after(e.end) {
                    e.end = end;
                }
                if until.after(e.until) {
                    e.until = until;
                }
            }
            _ => {
                self.episode = Some(crate::irn::Episode {
                    next: from,
                    end,
                    until,
                    resume: None,
                })
            }
        }
    }

    /// A PSN-sequence-error NAK under IRN: `cum` is the first PSN the
    /// responder lacks, `block` a run of PSNs above it that it holds.
    fn irn_on_sack<Mem: Memory + ?Sized>(
        &mut self,
        now: Nanos,
        cum: Psn,
        block: Option<(Psn, Psn)>,
        ctx: &mut Ctx<'_, Mem>,
    ) {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return;
        }
        let outstanding = self.outstanding();
        if !cum.in_window(self.una, outstanding) {
            ctx.counters.stale_acks += 1;
            return;
        }
        // Only what was sent can be held: a block reaching past it is cut.
        let block = block.and_then(|(first, last)| {
            if !first.in_window(self.una, outstanding) {
                return None;
            }
            let newest = self.una.add(outstanding - 1);
            Some((first, if last.after(newest) { newest } else { last }))
        });
        if let Some((first, last)) = block {
            self.sacked.insert(self.una, first, last);
            self.irn_lower_rto(now);
        }
        if self.episode.is_none() {
            // One congestion signal per loss episode, not one per NAK.
            self.cc.on_nak(now);
        }
        // The paper's rule: what lies below a PSN reported held and was not
        // reported held itself is lost.
        let end = block.map_or(cum.next(), |(first, _)| first);
        self.irn_note_loss(cum, end, false);
        // A lost resend: the responder still lacks `cum`, yet holds a packet
        // first sent more than N packets (the paper's RTO_low count, slack
        // for reordering) after `cum` was resent. Without this, a lost
        // retransmission waits a whole RTO (IRN §3.1 leaves it to the timer),
        // which on real sockets is milliseconds with BDP-FC closed.
        let slack = self.irn_cfg.rto_low_pkts;
        if let Some((_, newest_held)) = block
            && let Some(mark) = self.resent_at.get(&cum.value()).copied()
            && newest_held.after(mark.add(slack))
        {
            self.resent_at.remove(&cum.value());
            if let Some(e) = &mut self.episode
                && cum.before(e.next)
            {
                e.resume = Some(e.next);
                e.next = cum;
            }
        }
    }

    /// Held packets (or READ responses placed past a gap) are no longer in
    /// flight: once at most N are, RTO_low applies from this feedback on (§3.1).
    fn irn_lower_rto(&mut self, now: Nanos) {
        if let Some(low) = self.rto_from(now)
            && self.rto_deadline.is_some_and(|d| low < d)
        {
            self.rto_deadline = Some(low);
        }
    }

    /// The next selective retransmission of the current episode, if any.
    fn irn_retransmit<Mem: Memory + ?Sized, S: TransmitSink>(
        &mut self,
        now: Nanos,
        ctx: &mut Ctx<'_, Mem>,
        sink: S,
    ) -> Result<S::Out, S> {
        loop {
            let Some(e) = self.episode else {
                return Err(sink);
            };
            let mut next = e.next;
            if next.before(self.una) {
                next = self.una;
            }
            if !next.before(e.end) {
                self.episode = Some(crate::irn::Episode { next, ..e });
                return Err(sink);
            }
            let skip = |q: &mut Qp, to: Psn| {
                q.episode = Some(crate::irn::Episode { next: to, ..e });
            };
            let Some(i) = self.sq.iter().position(|w| {
                !w.done
                    && w.first_psn.is_some_and(|f| !next.before(f))
                    && w.last_psn().is_some_and(|l| !next.after(l))
            }) else {
                skip(self, next.next());
                continue;
            };
            let w = &self.sq[i];
            // A held SEND/WRITE packet needs no resend (nor do the held
            // ones after it in this WQE, skipped at once); a held READ or
            // ATOMIC request still owes its response, so it is never skipped.
            if self.sacked.contains(next) && !w.wr.opcode.is_read_or_atomic() {
                let last = w.last_psn().unwrap_or(next);
                let mut to = next.next();
                while !to.after(last) && to.before(e.end) && self.sacked.contains(to) {
                    to = to.next();
                }
                skip(self, to);
                continue;
            }
            let Some(first) = w.first_psn else {
                return Err(sink);
            };
            let (npkts, acked) = (w.npkts, w.acked);
            let k = next.distance_from(first);
            let (k, span) = match w.wr.opcode {
                WrOpcode::RdmaRead { .. } => {
                    let missing = |j: u32| !w.got.get(j as usize).copied().unwrap_or(true);
                    // Only responses asked for can be missing; the rest
                    // of a READ split by BDP-FC is asked for as it goes.
                    let issued = w.issued.min(npkts);
                    let Some(k0) = (k.max(acked)..issued).find(|&j| missing(j)) else {
                        skip(self, first.add(npkts));
                        continue;
                    };
                    if !first.add(k0).before(e.end) {
                        skip(self, first.add(k0));
                        continue;
                    }
                    // One re-request stays within one segment: the
                    // responder finds the READ it repeats by the PSN and
                    // answers within that READ only (IBA 9.7.5.1.5).
                    let (_, seg_end) = w.seg_of(k0);
                    let limit = e.end.distance_from(first).min(seg_end).min(issued);
                    let span = (k0..limit).take_while(|&j| missing(j)).count() as u32;
                    (k0, span.max(1))
                }
                _ if w.wr.opcode.is_atomic() => (0, 1),
                _ if k < acked => {
                    skip(self, first.add(acked));
                    continue;
                }
                _ => (k, 1),
            };
            skip(self, first.add(k + span));
            let cursor = self.cursor;
            if let Some(m) = self.max_sent {
                self.resent_at.insert(first.add(k).value(), m);
                // What `irn_on_sack` needs to see held to call this resend lost.
                let probe = m.add(self.irn_cfg.rto_low_pkts + 1);
                if self.irn_probe_at.is_none_or(|at| probe.after(at)) {
                    self.irn_probe_at = Some(probe);
                }
            }
            let t = self.emit_packet(now, i, k, span, ctx, sink);
            if self.state != QpState::Err {
                self.cursor = cursor;
            }
            if let Some(ep) = &mut self.episode
                && let Some(r) = ep.resume.take()
                && r.after(ep.next)
            {
                ep.next = r;
            }
            return t;
        }
    }

    /// An IRN READ response: placed at its offset whatever the order;
    /// a response past a gap marks the responses before it lost.
    fn irn_read_response<Mem: Memory + ?Sized>(
        &mut self,
        now: Nanos,
        i: usize,
        t: &TransportRepr,
        payload: PayloadRef<'_>,
        ctx: &mut Ctx<'_, Mem>,
    ) {
        let psn = t.bth.psn;
        let Some(first) = self.sq[i].first_psn else {
            return;
        };
        let idx = psn.distance_from(first);
        if idx >= self.sq[i].issued {
            // A response to nothing asked for yet (BDP-FC holds the rest).
            ctx.counters.stale_acks += 1;
            return;
        }
        if self.sq[i].got.get(idx as usize).copied().unwrap_or(true) {
            ctx.counters.duplicates += 1;
            return;
        }
        let Some(i) = self.ack_before_read(now, i, first, ctx) else {
            return;
        };
        let mtu = u64::from(self.mtu.bytes());
        let (npkts, len, acked) = (self.sq[i].npkts, self.sq[i].len, self.sq[i].acked);
        // Each READ request is answered FIRST…LAST on its own (IBA 9.4.4).
        let (s0, s1) = self.sq[i].seg_of(idx);
        let want = read_response_opcode(idx - s0, s1 - s0);
        let off = u64::from(idx) * mtu;
        let expect_len = mtu.min(len - off.min(len));
        if t.bth.opcode != want || payload.len() as u64 != expect_len {
            self.fail_wqe(i, WcStatus::BadRespErr, ctx);
            return;
        }
        if !self.scatter_response(i, off, payload, ctx) {
            return;
        }
        let w = &mut self.sq[i];
        w.got[idx as usize] = true;
        if idx > acked {
            w.got_ahead += 1;
        }
        while w.acked < npkts && w.got[w.acked as usize] {
            // Past `acked`, a response placed earlier is counted ahead.
            if w.acked > acked {
                w.got_ahead = w.got_ahead.saturating_sub(1);
            }
            w.acked += 1;
        }
        if w.acked == npkts {
            w.done = true;
            w.status = WcStatus::Success;
            w.got = Vec::new();
            w.got_ahead = 0;
        }
        if idx > acked {
            ctx.counters.out_of_sequence += 1;
            self.irn_note_loss(first.add(acked), psn, false);
            // Fewer responses in flight: RTO_low may now apply (§3.1).
            self.irn_lower_rto(now);
        }
        self.refresh_una(now);
        self.retire(ctx);
    }
}

impl Qp {
    /// Scatters a READ response's `payload`, `off` bytes into the READ at
    /// `i`, into its local SGEs (checked for LOCAL_WRITE when the WQE
    /// started); `false` after failing the WQE with LOC_PROT_ERR.
    fn scatter_response<Mem: Memory + ?Sized>(
        &mut self,
        i: usize,
        off: u64,
        payload: PayloadRef<'_>,
        ctx: &mut Ctx<'_, Mem>,
    ) -> bool {
        let mut done_bytes = 0usize;
        let mut failed = false;
        for (_, addr, n) in sge_pieces(&self.sq[i].wr.sg_list, off, payload.len() as u64) {
            let n = n as usize;
            if ctx.mem.write(addr, payload.slice(done_bytes, n)).is_err() {
                failed = true;
                break;
            }
            done_bytes += n;
        }
        if failed {
            self.fail_wqe(i, WcStatus::LocProtErr, ctx);
        }
        !failed
    }

    /// A response to the READ at `i` (first PSN `first`) implies the ACK of
    /// everything before it; acknowledging may retire WQEs ahead of it, so
    /// this returns where the READ is now (`None` if it is no longer
    /// pending).
    fn ack_before_read<Mem: Memory + ?Sized>(
        &mut self,
        now: Nanos,
        i: usize,
        first: Psn,
        ctx: &mut Ctx<'_, Mem>,
    ) -> Option<usize> {
        if i > 0 {
            self.ack_upto(now, first.sub(1), ctx);
        }
        self.sq
            .iter()
            .position(|w| w.first_psn == Some(first) && !w.done)
    }
}

/// The READ response opcode at packet `index` of an `npkts`-packet response
/// (IBA 9.4.4: ONLY alone, else FIRST, MIDDLE…, LAST).
fn read_response_opcode(index: u32, npkts: u32) -> Opcode {
    if npkts == 1 {
        Opcode::RcReadResponseOnly
    } else if index == 0 {
        Opcode::RcReadResponseFirst
    } else if index + 1 == npkts {
        Opcode::RcReadResponseLast
    } else {
        Opcode::RcReadResponseMiddle
    }
}
