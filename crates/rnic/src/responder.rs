//! Responder (IBA 9.7.5): PSN checking with one NAK per gap, duplicate
//! handling (re-ACK SEND/WRITE, replay READ responses, replay cached ATOMIC
//! results — an atomic never executes twice), RNR NAK when no receive WQE is
//! posted, access checks that answer with the right NAK and write nothing,
//! ACK coalescing, and the ECN notification point (CNP generation).

use crate::memory::{Memory, PayloadRef};
use crate::mr::AccessFault;
use crate::qp::{Ctx, InMsg, Qp, QpState, ReadJob, Resource, RespItem};
use crate::types::{Access, Nanos, QpType, RecvWr, Wc, WcFlags, WcOpcode, WcStatus, sge_pieces};
use crate::{AsyncEvent, TransmitSink};
use roce_wire::{
    AethRepr, AtomicAckEthRepr, BthRepr, NakCode, Opcode, Psn, Syndrome, TransportRepr,
};
use std::net::SocketAddr;

/// Responder resources kept for duplicate READ/ATOMIC detection.
const MAX_RESOURCES: usize = 32;

/// Outcome of a request that failed a check.
enum Reject {
    /// NAK with this code; the responder QP moves to ERR (IBA class B/C/D errors).
    Nak(NakCode),
    /// RNR NAK; nothing advances.
    Rnr,
}

impl Qp {
    /// Notes a CE mark: schedule a CNP unless one went out within the pacing interval.
    pub(crate) fn note_ce<Mem: Memory + ?Sized>(
        &mut self,
        now: Nanos,
        src: SocketAddr,
        src_qpn: u32,
        ctx: &mut Ctx<'_, Mem>,
    ) {
        ctx.counters.ce_rx += 1;
        if self.last_cnp != crate::qp::NO_CNP
            && now.saturating_sub(self.last_cnp) < ctx.cfg.cnp_interval_ns
        {
            return;
        }
        self.last_cnp = now;
        self.cnp_due = Some((src, src_qpn));
    }

    /// Handles a request packet (SEND, WRITE, READ, ATOMIC; RC or UD).
    pub(crate) fn on_request<Mem: Memory + ?Sized>(
        &mut self,
        now: Nanos,
        src: SocketAddr,
        ce: bool,
        t: &TransportRepr,
        payload: PayloadRef<'_>,
        ctx: &mut Ctx<'_, Mem>,
    ) {
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            ctx.counters.rx_dropped_state += 1;
            return;
        }
        if self.init.qp_type == QpType::Ud {
            self.on_ud(src, ce, now, t, payload, ctx);
            return;
        }
        if ce {
            self.note_ce(now, src, self.dest_qpn, ctx);
            self.ece_pending |= ctx.cfg.ecn_echo;
        }
        let psn = t.bth.psn;
        if psn.after(self.epsn) && self.irn() {
            self.irn_hold(src, t, payload, ctx);
            return;
        }
        if psn == self.epsn {
            self.nak_gap = false;
            if self.irn() {
                self.irn_in_order(src, t, payload, ctx);
                return;
            }
            self.execute_in_order(src, t, payload, ctx);
        } else if psn.after(self.epsn) {
            ctx.counters.out_of_sequence += 1;
            if !self.nak_gap {
                self.nak_gap = true;
                ctx.counters.naks_tx += 1;
                self.resp_q.push_back(RespItem::Nak {
                    psn: self.epsn,
                    msn: self.msn,
                    syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                });
            }
        } else {
            ctx.counters.duplicates += 1;
            self.duplicate(t, ctx);
        }
    }

    /// Executes the request at the expected PSN and answers a failed check
    /// with its NAK. `false` when the request was refused.
    fn execute_in_order<Mem: Memory + ?Sized>(
        &mut self,
        src: SocketAddr,
        t: &TransportRepr,
        payload: PayloadRef<'_>,
        ctx: &mut Ctx<'_, Mem>,
    ) -> bool {
        let psn = t.bth.psn;
        match self.execute(src, t, payload, ctx) {
            Ok(()) => true,
            Err(Reject::Rnr) => {
                ctx.counters.rnr_naks_tx += 1;
                self.nak_gap = true;
                let timer = self.min_rnr_timer;
                self.resp_q.push_back(RespItem::Nak {
                    psn,
                    msn: self.msn,
                    syndrome: Syndrome::RnrNak { timer },
                });
                false
            }
            Err(Reject::Nak(code)) => {
                ctx.counters.naks_tx += 1;
                self.resp_q.push_back(RespItem::Nak {
                    psn,
                    msn: self.msn,
                    syndrome: Syndrome::Nak(code),
                });
                // Class B–D errors: the responder's QP goes to ERR after the NAK.
                let keep = std::mem::take(&mut self.resp_q);
                self.enter_error(ctx);
                self.resp_q = keep;
                false
            }
        }
    }

    /// IRN: the expected request arrived; execute it, then every held
    /// packet it makes consecutive. When a gap closed, the new cumulative
    /// PSN goes out at once (IRN §3.1): as an ACK when nothing is held any
    /// more, else as a NAK for the next hole with the run above it.
    fn irn_in_order<Mem: Memory + ?Sized>(
        &mut self,
        src: SocketAddr,
        t: &TransportRepr,
        payload: PayloadRef<'_>,
        ctx: &mut Ctx<'_, Mem>,
    ) {
        let gap = !self.held.is_empty();
        if !self.execute_in_order(src, t, payload, ctx) {
            return;
        }
        while let Some(h) = self.held.take(self.epsn) {
            self.placed = matches!(h.data, crate::irn::HeldData::Placed(_));
            let ok = self.execute_in_order(h.src, &h.repr, h.payload(), ctx);
            self.placed = false;
            if !ok {
                return;
            }
        }
        // Held packets an executed READ's PSN range swallowed are stale.
        let epsn = self.epsn;
        if gap {
            self.held.advance(epsn);
        }
        if self.held.is_empty() {
            self.top_run = None;
        } else if let Some(r) = &mut self.top_run
            && !r.first.after(epsn)
        {
            r.first = epsn.next();
        }
        if !gap || self.state == QpState::Err {
            return;
        }
        match self.lowest_held() {
            None => self.queue_ack(),
            Some(p) => {
                let (first, last) = self.held_run(p);
                self.irn_sack(first, last, ctx);
            }
        }
    }

    /// The lowest PSN held (the end of the first hole), if any.
    fn lowest_held(&self) -> Option<Psn> {
        let top = self.top_run?.last;
        let mut p = self.epsn.next();
        while !p.after(top) {
            if self.held.contains(p) {
                return Some(p);
            }
            p = p.next();
        }
        None
    }

    /// The run of consecutive held PSNs around the held PSN `psn`.
    fn held_run(&self, psn: Psn) -> (Psn, Psn) {
        let (mut first, mut last) = (psn, psn);
        while first.sub(1).after(self.epsn) && self.held.contains(first.sub(1)) {
            first = first.sub(1);
        }
        while self.held.contains(last.next()) {
            last = last.next();
        }
        (first, last)
    }

    /// Queues a SACK NAK: the first missing PSN, and the run `[first, last]`
    /// held above it (see `crate::irn` for the format). A NAK still queued
    /// for the same hole and the same run start is updated instead.
    fn irn_sack<Mem: Memory + ?Sized>(&mut self, first: Psn, last: Psn, ctx: &mut Ctx<'_, Mem>) {
        let cum = self.epsn;
        let Some(msn) = crate::irn::encode_sack(cum, first, last) else {
            return;
        };
        if let Some(RespItem::Nak {
            psn,
            msn: m,
            syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
        }) = self.resp_q.back_mut()
            && *psn == cum
            && crate::irn::decode_sack(cum, *m).is_some_and(|(f, _)| f == first)
        {
            *m = msn;
            return;
        }
        ctx.counters.naks_tx += 1;
        self.resp_q.push_back(RespItem::Nak {
            psn: cum,
            msn,
            syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
        });
    }

    /// IRN direct placement of an out-of-order WRITE packet. RoCE carries
    /// a WRITE's address only in its FIRST packet (IRN §4.2 adds it to
    /// every packet); here the PSN gives the offset instead, from the
    /// FIRST that fixes the message's range:
    /// - the WRITE in progress (its FIRST executed): packet `psn` lands
    ///   `(psn − ePSN) × MTU` bytes past the next byte expected;
    /// - a WRITE whose FIRST is itself held past the gap: its RETH is
    ///   checked as the in-order FIRST will be (rkey, range, REMOTE_WRITE),
    ///   its payload placed, and packet `psn` lands `(psn − FIRST) × MTU`
    ///   past its address.
    ///
    /// Either way the range the RETH was checked for, whose length tells
    /// where the message ends, bounds what is written; only the header
    /// waits for the in-order bookkeeping. Without the second case, at 1 %
    /// loss most held packets belong to messages after the one in progress
    /// and were copied whole (an allocation and a copy per packet, then a
    /// second copy when the gap closed). What fits no WRITE is held whole.
    /// Returns the bytes placed.
    fn irn_place<Mem: Memory + ?Sized>(
        &mut self,
        t: &TransportRepr,
        payload: PayloadRef<'_>,
        ctx: &mut Ctx<'_, Mem>,
    ) -> Option<u32> {
        use Opcode::*;
        let mtu = u64::from(self.mtu.bytes());
        let plen = payload.len() as u64;
        let psn = t.bth.psn;
        let last = matches!(
            t.bth.opcode,
            RcSendLast | RcSendLastImm | RcSendLastInv | RcWriteLast | RcWriteLastImm
        );
        let only = matches!(t.bth.opcode, RcWriteOnly | RcWriteOnlyImm);
        if !last && !only && plen != mtu {
            return None;
        }
        if matches!(t.bth.opcode, RcWriteFirst | RcWriteOnly | RcWriteOnlyImm) {
            let r = t.reth?;
            let len = u64::from(r.dma_len);
            let fits = if only {
                plen == len && plen <= mtu
            } else {
                plen < len
            };
            if !fits
                || self
                    .remote_check(r.rkey, r.va, len, Access::REMOTE_WRITE, ctx)
                    .is_err()
            {
                return None;
            }
            ctx.mem.write(r.va, payload).ok()?;
            self.held_write = (!only).then_some(crate::irn::HeldWrite {
                first: psn,
                va: r.va,
                len,
            });
            return Some(plen as u32);
        }
        if !matches!(t.bth.opcode, RcWriteMiddle | RcWriteLast | RcWriteLastImm) {
            // A SEND's length is nowhere in its packets: a MIDDLE past a gap
            // may already belong to the next message (IRN §4.3 adds a
            // message sequence number for this), so SENDs are held whole.
            return None;
        }
        let fits = |skip: u64, remaining: u64| {
            let end = skip + plen;
            end <= remaining && (last == (end == remaining))
        };
        if let Some(w) = self.held_write
            && psn.after(w.first)
        {
            let skip = u64::from(psn.distance_from(w.first)) * mtu;
            if fits(skip, w.len) {
                ctx.mem.write(w.va + skip, payload).ok()?;
                return Some(plen as u32);
            }
        }
        match &self.in_msg {
            Some(InMsg::Write { va, remaining, .. }) => {
                let skip = u64::from(psn.distance_from(self.epsn)) * mtu;
                if !fits(skip, *remaining) {
                    return None;
                }
                ctx.mem.write(va + skip, payload).ok()?;
            }
            _ => return None,
        }
        Some(plen as u32)
    }

    /// IRN: a request past a gap. Held (up to a BDP beyond the gap, which is
    /// all BDP-FC lets a requester send) and reported by a SACK NAK when the
    /// hole set changes or the packet asks for an acknowledgement (see
    /// `crate::irn` for when and why).
    fn irn_hold<Mem: Memory + ?Sized>(
        &mut self,
        src: SocketAddr,
        t: &TransportRepr,
        payload: PayloadRef<'_>,
        ctx: &mut Ctx<'_, Mem>,
    ) {
        let psn = t.bth.psn;
        ctx.counters.out_of_sequence += 1;
        let cap = self.irn_cfg.bdp_pkts.max(ctx.cfg.max_outstanding_pkts);
        if psn.distance_from(self.epsn) >= cap {
            return;
        }
        if self.held.contains(psn) {
            // A copy of a packet held: the requester believes it lost, so
            // tell it again what is held around it.
            let (first, last) = self.held_run(psn);
            self.irn_sack(first, last, ctx);
            return;
        }
        let data = match self.irn_place(t, payload, ctx) {
            Some(n) => crate::irn::HeldData::Placed(n),
            None => match payload {
                PayloadRef::Bytes(b) => crate::irn::HeldData::Bytes(b.to_vec()),
                PayloadRef::Virtual(n) => crate::irn::HeldData::Virtual(n),
            },
        };
        self.held.insert(
            self.epsn,
            psn,
            crate::irn::Held {
                src,
                repr: *t,
                data,
            },
        );
        let new_run = crate::irn::TopRun {
            first: psn,
            last: psn,
            reported: psn,
        };
        match self.top_run {
            // The first packet past the gap at ePSN: the paper's NACK.
            None => {
                self.top_run = Some(new_run);
                self.irn_sack(psn, psn, ctx);
            }
            // The highest run grows: report it only when asked to.
            Some(r) if psn == r.last.next() => {
                let mut r = crate::irn::TopRun { last: psn, ..r };
                if t.bth.ack_req {
                    r.reported = psn;
                    self.irn_sack(r.first, psn, ctx);
                }
                self.top_run = Some(r);
            }
            // A new hole above the highest run: first what of that run the
            // requester has not heard of, then the packet past the hole.
            Some(r) if psn.after(r.last) => {
                if r.reported != r.last {
                    self.irn_sack(r.first, r.last, ctx);
                }
                self.top_run = Some(new_run);
                self.irn_sack(psn, psn, ctx);
            }
            // Part of a hole below the highest run filled.
            Some(mut r) => {
                let (first, last) = self.held_run(psn);
                if last == r.last {
                    r.first = first;
                    r.reported = last;
                    self.top_run = Some(r);
                }
                self.irn_sack(first, last, ctx);
            }
        }
    }

    #[inline]
    fn queue_ack(&mut self) {
        let psn = self.epsn.sub(1);
        let ce = std::mem::take(&mut self.ece_pending);
        if let Some(RespItem::Ack { psn: p, msn, ece }) = self.resp_q.back_mut() {
            *p = psn;
            *msn = self.msn;
            *ece |= ce;
        } else {
            self.resp_q.push_back(RespItem::Ack {
                psn,
                msn: self.msn,
                ece: ce,
            });
        }
    }

    fn take_recv<Mem: Memory + ?Sized>(&mut self, ctx: &mut Ctx<'_, Mem>) -> Option<RecvWr> {
        match self.init.srq {
            None => self.rq.pop_front(),
            Some(h) => {
                let srq = ctx.srqs.get_mut(&h.0)?;
                let r = srq.queue.pop_front();
                if srq.limit > 0 && (srq.queue.len() as u32) < srq.limit {
                    srq.limit = 0;
                    ctx.events.push_back(AsyncEvent::SrqLimitReached { srq: h });
                }
                r
            }
        }
    }

    fn has_recv<Mem: Memory + ?Sized>(&self, ctx: &Ctx<'_, Mem>) -> bool {
        match self.init.srq {
            None => !self.rq.is_empty(),
            Some(h) => ctx.srqs.get(&h.0).is_some_and(|s| !s.queue.is_empty()),
        }
    }

    /// Scatters `data` at message offset `off` into a receive WQE's SGEs.
    fn scatter<Mem: Memory + ?Sized>(
        &self,
        wqe: &RecvWr,
        off: u64,
        data: PayloadRef<'_>,
        ctx: &mut Ctx<'_, Mem>,
    ) -> Result<(), WcStatus> {
        let cap: u64 = wqe.sg_list.iter().map(|s| u64::from(s.length)).sum();
        if off + data.len() as u64 > cap {
            return Err(WcStatus::LocLenErr);
        }
        let mut done = 0usize;
        for (s, addr, n) in sge_pieces(&wqe.sg_list, off, data.len() as u64) {
            ctx.mrs
                .check_local(self.init.pd, s.lkey, addr, n, Access::LOCAL_WRITE)
                .map_err(|_| WcStatus::LocProtErr)?;
            let n = n as usize;
            ctx.mem
                .write(addr, data.slice(done, n))
                .map_err(|_| WcStatus::LocProtErr)?;
            done += n;
        }
        Ok(())
    }

    fn recv_wc(
        &self,
        wqe: &RecvWr,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u64,
        t: &TransportRepr,
        src: SocketAddr,
    ) -> Wc {
        Wc {
            wr_id: wqe.wr_id,
            status,
            opcode,
            byte_len: byte_len as u32,
            imm_data: t.immdt.or(t.ieth).unwrap_or(0),
            qp_num: self.qpn,
            src_qp: t.deth.map_or(self.dest_qpn, |d| d.src_qp),
            wc_flags: WcFlags {
                grh: self.init.qp_type == QpType::Ud,
                with_imm: t.immdt.is_some(),
                with_inv: t.ieth.is_some(),
            },
            src: Some(src),
        }
    }

    fn remote_check<Mem: Memory + ?Sized>(
        &self,
        rkey: u32,
        va: u64,
        len: u64,
        need: Access,
        ctx: &Ctx<'_, Mem>,
    ) -> Result<(), Reject> {
        if !self.access.contains(need) {
            return Err(Reject::Nak(NakCode::RemoteAccessError));
        }
        ctx.mrs
            .check_remote(self.init.pd, rkey, va, len, need)
            .map_err(|_: AccessFault| Reject::Nak(NakCode::RemoteAccessError))
    }

    /// Executes an in-sequence RC request.
    fn execute<Mem: Memory + ?Sized>(
        &mut self,
        src: SocketAddr,
        t: &TransportRepr,
        payload: PayloadRef<'_>,
        ctx: &mut Ctx<'_, Mem>,
    ) -> Result<(), Reject> {
        use Opcode::*;
        let op = t.bth.opcode;
        let mtu = u64::from(self.mtu.bytes());
        let plen = payload.len() as u64;
        // The common case first: the next packet of the WRITE in progress
        // (MIDDLE, or LAST without immediate), which is nearly every
        // request a simulated flow's responder executes. The same checks,
        // in the same order, and the same effects as the general path
        // below; the message state is updated where it lies rather than
        // rebuilt (the general path decodes the opcode's framing, matches
        // `in_msg` three times and drops and rewrites it per packet: about
        // 120 instructions a packet on the 1 ms HPCC fat tree).
        if matches!(op, RcWriteMiddle | RcWriteLast)
            && let Some(InMsg::Write { va, remaining, .. }) = &mut self.in_msg
        {
            let last = op == RcWriteLast;
            if (!last && plen != mtu)
                || plen > mtu
                || plen > *remaining
                || (last && plen != *remaining)
            {
                return Err(Reject::Nak(NakCode::InvalidRequest));
            }
            let placed = std::mem::take(&mut self.placed);
            if plen > 0 && !placed && ctx.mem.write(*va, payload).is_err() {
                return Err(Reject::Nak(NakCode::RemoteAccessError));
            }
            ctx.counters.rx_payload_bytes += plen;
            if last {
                self.in_msg = None;
                self.msn = (self.msn + 1) & 0xff_ffff;
            } else {
                *va += plen;
                *remaining -= plen;
            }
            self.epsn = self.epsn.next();
            if t.bth.ack_req {
                self.queue_ack();
            }
            return Ok(());
        }
        let first = matches!(
            op,
            RcSendFirst
                | RcSendOnly
                | RcSendOnlyImm
                | RcSendOnlyInv
                | RcWriteFirst
                | RcWriteOnly
                | RcWriteOnlyImm
        );
        let last = !matches!(
            op,
            RcSendFirst | RcSendMiddle | RcWriteFirst | RcWriteMiddle
        );
        // Message framing: FIRST/ONLY only outside a message, MIDDLE/LAST only
        // inside one of the same kind (IBA 9.7.5.1.2 / C9-81..).
        let in_send = matches!(self.in_msg, Some(InMsg::Send { .. }));
        let in_write = matches!(self.in_msg, Some(InMsg::Write { .. }));
        let ok_frame = match op {
            RcSendMiddle | RcSendLast | RcSendLastImm | RcSendLastInv => in_send,
            RcWriteMiddle | RcWriteLast | RcWriteLastImm => in_write,
            _ => self.in_msg.is_none(),
        };
        if !ok_frame {
            return Err(Reject::Nak(NakCode::InvalidRequest));
        }
        if !last && plen != mtu {
            return Err(Reject::Nak(NakCode::InvalidRequest));
        }
        if plen > mtu {
            return Err(Reject::Nak(NakCode::InvalidRequest));
        }
        if op.is_send() {
            let (wqe, off) = if first {
                if !self.has_recv(ctx) {
                    return Err(Reject::Rnr);
                }
                let Some(w) = self.take_recv(ctx) else {
                    return Err(Reject::Rnr);
                };
                (w, 0)
            } else {
                match self.in_msg.take() {
                    Some(InMsg::Send { wqe, offset }) => (wqe, offset),
                    _ => return Err(Reject::Nak(NakCode::InvalidRequest)),
                }
            };
            if let Err(st) = self.scatter(&wqe, off, payload, ctx) {
                let wc = self.recv_wc(&wqe, st, WcOpcode::Recv, off + plen, t, src);
                ctx.complete(self.init.recv_cq, wc);
                // Too small a buffer is the requester's invalid request;
                // a protection fault here is our own operational error.
                return Err(Reject::Nak(if st == WcStatus::LocLenErr {
                    NakCode::InvalidRequest
                } else {
                    NakCode::RemoteOperationalError
                }));
            }
            if last {
                self.msn = (self.msn + 1) & 0xff_ffff;
                let wc = self.recv_wc(&wqe, WcStatus::Success, WcOpcode::Recv, off + plen, t, src);
                ctx.complete(self.init.recv_cq, wc);
            } else {
                self.in_msg = Some(InMsg::Send {
                    wqe,
                    offset: off + plen,
                });
            }
            self.epsn = self.epsn.next();
            ctx.counters.rx_payload_bytes += plen;
            if t.bth.ack_req {
                self.queue_ack();
            }
            return Ok(());
        }
        if op.is_write() {
            let (va, rkey, remaining, total) = if first {
                let Some(r) = t.reth else {
                    return Err(Reject::Nak(NakCode::InvalidRequest));
                };
                let total = u64::from(r.dma_len);
                self.remote_check(r.rkey, r.va, total, Access::REMOTE_WRITE, ctx)?;
                (r.va, r.rkey, total, total)
            } else {
                match &self.in_msg {
                    Some(InMsg::Write {
                        va,
                        rkey,
                        remaining,
                        total,
                    }) => (*va, *rkey, *remaining, *total),
                    _ => return Err(Reject::Nak(NakCode::InvalidRequest)),
                }
            };
            if plen > remaining || (last && plen != remaining) {
                return Err(Reject::Nak(NakCode::InvalidRequest));
            }
            // WRITE WITH IMMEDIATE consumes a receive WQE: check for one
            // before a byte is written, so an RNR retry rewrites nothing new.
            let needs_recv = matches!(op, RcWriteLastImm | RcWriteOnlyImm);
            if needs_recv && !self.has_recv(ctx) {
                return Err(Reject::Rnr);
            }
            let placed = std::mem::take(&mut self.placed);
            if plen > 0 && !placed && ctx.mem.write(va, payload).is_err() {
                return Err(Reject::Nak(NakCode::RemoteAccessError));
            }
            ctx.counters.rx_payload_bytes += plen;
            if last {
                self.in_msg = None;
                self.msn = (self.msn + 1) & 0xff_ffff;
                if let Some(wqe) = needs_recv.then(|| self.take_recv(ctx)).flatten() {
                    {
                        let wc = self.recv_wc(
                            &wqe,
                            WcStatus::Success,
                            WcOpcode::RecvRdmaWithImm,
                            total,
                            t,
                            src,
                        );
                        ctx.complete(self.init.recv_cq, wc);
                    }
                }
            } else {
                self.in_msg = Some(InMsg::Write {
                    va: va + plen,
                    rkey,
                    remaining: remaining - plen,
                    total,
                });
            }
            self.epsn = self.epsn.next();
            if t.bth.ack_req {
                self.queue_ack();
            }
            return Ok(());
        }
        match op {
            RcReadRequest => {
                let Some(r) = t.reth else {
                    return Err(Reject::Nak(NakCode::InvalidRequest));
                };
                let len = u64::from(r.dma_len);
                self.remote_check(r.rkey, r.va, len, Access::REMOTE_READ, ctx)?;
                let active = self
                    .resp_q
                    .iter()
                    .filter(|x| matches!(x, RespItem::Read(j) if !j.replay))
                    .count();
                if active >= usize::from(self.max_dest_rd_atomic.max(1)) {
                    return Err(Reject::Nak(NakCode::InvalidRequest));
                }
                let npkts = len.div_ceil(mtu).max(1) as u32;
                self.msn = (self.msn + 1) & 0xff_ffff;
                self.push_resource(Resource::Read {
                    psn: t.bth.psn,
                    npkts,
                    va: r.va,
                    rkey: r.rkey,
                    len,
                });
                self.resp_q.push_back(RespItem::Read(ReadJob {
                    psn: t.bth.psn,
                    index: 0,
                    npkts,
                    va: r.va,
                    remaining: len,
                    msn: self.msn,
                    end: npkts,
                    replay: false,
                }));
                self.epsn = self.epsn.add(npkts);
                Ok(())
            }
            RcCompareSwap | RcFetchAdd => {
                let Some(a) = t.atomic_eth else {
                    return Err(Reject::Nak(NakCode::InvalidRequest));
                };
                if a.va % 8 != 0 {
                    return Err(Reject::Nak(NakCode::InvalidRequest));
                }
                self.remote_check(a.rkey, a.va, 8, Access::REMOTE_ATOMIC, ctx)?;
                let orig = ctx
                    .mem
                    .read_u64(a.va)
                    .map_err(|_| Reject::Nak(NakCode::RemoteAccessError))?;
                let new = if op == RcCompareSwap {
                    if orig == a.compare { a.swap_add } else { orig }
                } else {
                    orig.wrapping_add(a.swap_add)
                };
                ctx.mem
                    .write_u64(a.va, new)
                    .map_err(|_| Reject::Nak(NakCode::RemoteAccessError))?;
                ctx.counters.atomics_executed += 1;
                self.msn = (self.msn + 1) & 0xff_ffff;
                self.push_resource(Resource::Atomic {
                    psn: t.bth.psn,
                    orig,
                });
                self.resp_q.push_back(RespItem::AtomicAck {
                    psn: t.bth.psn,
                    msn: self.msn,
                    orig,
                });
                self.epsn = self.epsn.next();
                Ok(())
            }
            _ => Err(Reject::Nak(NakCode::InvalidRequest)),
        }
    }

    fn push_resource(&mut self, r: Resource) {
        if self.resources.len() >= MAX_RESOURCES {
            self.resources.pop_front();
        }
        self.resources.push_back(r);
    }

    /// A request whose PSN is before the expected one (IBA 9.7.5.1.5).
    fn duplicate<Mem: Memory + ?Sized>(&mut self, t: &TransportRepr, ctx: &mut Ctx<'_, Mem>) {
        let psn = t.bth.psn;
        let op = t.bth.opcode;
        if op == Opcode::RcReadRequest {
            let mtu = u64::from(self.mtu.bytes());
            let found = self.resources.iter().rev().find_map(|r| match *r {
                Resource::Read {
                    psn: p,
                    npkts,
                    va,
                    rkey,
                    len,
                } if psn.in_window(p, npkts) => Some((p, npkts, va, rkey, len)),
                _ => None,
            });
            if let Some((p, npkts, va, rkey, len)) = found {
                let k = psn.distance_from(p);
                let off = u64::from(k) * mtu;
                if ctx
                    .mrs
                    .check_remote(self.init.pd, rkey, va, len, Access::REMOTE_READ)
                    .is_err()
                {
                    return;
                }
                // This replay supersedes anything still queued for the same
                // READ (an unfinished original or an older replay); it keeps
                // the original's claim on the responder resource, if any.
                let same = |j: &ReadJob| j.psn.in_window(p, npkts);
                let had_original = self
                    .resp_q
                    .iter()
                    .any(|x| matches!(x, RespItem::Read(j) if same(j) && !j.replay));
                // IRN asks again for missing ranges only, possibly several
                // of one READ: each is answered and none supersedes another.
                let irn = self.irn();
                if !irn {
                    self.resp_q
                        .retain(|x| !matches!(x, RespItem::Read(j) if same(j)));
                }
                // The new request's length bounds the replay (IBA 9.7.5.1.5:
                // respond as the re-issued request asks).
                let asked = t.reth.map_or(u64::MAX, |r| u64::from(r.dma_len));
                let remaining = len.saturating_sub(off).min(asked);
                let span = (remaining.div_ceil(mtu).max(1) as u32).min(npkts - k);
                self.resp_q.push_back(RespItem::Read(ReadJob {
                    psn,
                    index: k,
                    npkts,
                    va: va + off,
                    remaining,
                    msn: self.msn,
                    end: k + span,
                    replay: irn || !had_original,
                }));
            }
        } else if op.is_atomic() {
            let orig = self.resources.iter().rev().find_map(|r| match *r {
                Resource::Atomic { psn: p, orig } if p == psn => Some(orig),
                _ => None,
            });
            if let Some(orig) = orig {
                ctx.counters.atomic_replays += 1;
                self.resp_q.push_back(RespItem::AtomicAck {
                    psn,
                    msn: self.msn,
                    orig,
                });
            }
        } else {
            self.queue_ack();
        }
    }

    /// UD receive: Q_Key check, 40-byte GRH area, one packet per message.
    fn on_ud<Mem: Memory + ?Sized>(
        &mut self,
        src: SocketAddr,
        ce: bool,
        now: Nanos,
        t: &TransportRepr,
        payload: PayloadRef<'_>,
        ctx: &mut Ctx<'_, Mem>,
    ) {
        let Some(deth) = t.deth else {
            ctx.counters.rx_malformed += 1;
            return;
        };
        if ce {
            self.note_ce(now, src, deth.src_qp, ctx);
        }
        if deth.qkey != self.qkey {
            ctx.counters.qkey_violations += 1;
            return;
        }
        let Some(wqe) = self.take_recv(ctx) else {
            ctx.counters.ud_no_recv_drops += 1;
            return;
        };
        let grh = grh_for(src, ctx);
        let mut status = self.scatter(&wqe, 0, PayloadRef::Bytes(&grh), ctx).err();
        if status.is_none() {
            status = self.scatter(&wqe, 40, payload, ctx).err();
        }
        let wc = self.recv_wc(
            &wqe,
            status.unwrap_or(WcStatus::Success),
            WcOpcode::Recv,
            40 + payload.len() as u64,
            t,
            src,
        );
        ctx.counters.rx_payload_bytes += payload.len() as u64;
        ctx.complete(self.init.recv_cq, wc);
    }

    /// True when [`next_response`](Self::next_response) could send: a CNP or
    /// a response is queued. The transmit poll asks this first, so a sender
    /// QP with only requests to send skips that large call (issue 12).
    #[inline]
    pub(crate) fn response_due(&self) -> bool {
        self.cnp_due.is_some() || !self.resp_q.is_empty()
    }

    /// The next responder packet: a CNP first, then ACKs, NAKs and responses in order.
    /// It goes to `sink` where it is built (see `Rnic::poll_transmit_into`); `Err`
    /// hands the sink back when there is none.
    pub(crate) fn next_response<Mem: Memory + ?Sized, S: TransmitSink>(
        &mut self,
        ctx: &mut Ctx<'_, Mem>,
        sink: S,
    ) -> Result<S::Out, S> {
        if let Some((dst, qpn)) = self.cnp_due.take() {
            ctx.counters.cnps_tx += 1;
            let mut t = TransportRepr::new(BthRepr {
                opcode: Opcode::Cnp,
                dest_qp: qpn,
                becn: true,
                psn: Psn::new(0),
                ..Default::default()
            });
            t.bth.pkey = 0xffff;
            let payload = crate::memory::Payload::empty();
            return Ok(self.put(sink, dst, ctx.cfg.cnp_dscp, false, t, payload));
        }
        let Some(dst) = self.ah else {
            return Err(sink);
        };
        let Some(item) = self.resp_q.pop_front() else {
            return Err(sink);
        };
        let mut t = TransportRepr::new(BthRepr {
            dest_qp: self.dest_qpn,
            ..Default::default()
        });
        let mut payload = crate::memory::Payload::empty();
        match item {
            RespItem::Ack { psn, msn, ece } => {
                t.bth.opcode = Opcode::RcAck;
                t.bth.psn = psn;
                t.bth.becn = ece;
                t.aeth = Some(AethRepr {
                    syndrome: Syndrome::Ack { credits: 31 },
                    msn,
                });
                ctx.counters.acks_tx += 1;
            }
            RespItem::Nak { psn, msn, syndrome } => {
                t.bth.opcode = Opcode::RcAck;
                t.bth.psn = psn;
                t.aeth = Some(AethRepr { syndrome, msn });
            }
            RespItem::AtomicAck { psn, msn, orig } => {
                t.bth.opcode = Opcode::RcAtomicAck;
                t.bth.psn = psn;
                t.aeth = Some(AethRepr {
                    syndrome: Syndrome::Ack { credits: 31 },
                    msn,
                });
                t.atomic_ack_eth = Some(AtomicAckEthRepr { orig });
            }
            RespItem::Read(mut j) => {
                let mtu = u64::from(self.mtu.bytes());
                let n = mtu.min(j.remaining);
                let last = j.index + 1 >= j.npkts;
                t.bth.opcode = match (j.npkts == 1, j.index == 0, last) {
                    (true, _, _) => Opcode::RcReadResponseOnly,
                    (false, true, _) => Opcode::RcReadResponseFirst,
                    (false, false, true) => Opcode::RcReadResponseLast,
                    (false, false, false) => Opcode::RcReadResponseMiddle,
                };
                t.bth.psn = j.psn;
                if t.bth.opcode != Opcode::RcReadResponseMiddle {
                    t.aeth = Some(AethRepr {
                        syndrome: Syndrome::Ack { credits: 31 },
                        msn: j.msn,
                    });
                }
                payload = ctx.mem.empty_payload();
                if n > 0 && ctx.mem.read_into(j.va, n as usize, &mut payload).is_err() {
                    // The region vanished under the read (deregistered): stop.
                    return Err(sink);
                }
                if j.index + 1 < j.end {
                    j.psn = j.psn.next();
                    j.index += 1;
                    j.va += n;
                    j.remaining -= n;
                    self.resp_q.push_front(RespItem::Read(j));
                }
                ctx.counters.read_resp_tx += 1;
            }
        }
        let wire = payload.len() as u64 + t.header_len() as u64 + crate::PACKET_OVERHEAD;
        ctx.counters.tx_pkts += 1;
        ctx.counters.tx_bytes += wire;
        Ok(self.put(sink, dst, self.dscp, ctx.cfg.ecn, t, payload))
    }
}

/// The 40-byte GRH area libibverbs applications expect at the head of a UD
/// receive buffer. For RoCEv2 the source and destination GIDs are the
/// IPv4-mapped (or IPv6) addresses; we fill the header as an IPv6 GRH.
fn grh_for<Mem: Memory + ?Sized>(src: SocketAddr, _ctx: &Ctx<'_, Mem>) -> [u8; 40] {
    let mut g = [0u8; 40];
    g[0] = 0x60;
    g[6] = 0x1b; // next header: IBA transport
    g[7] = 64;
    let gid = match src.ip() {
        std::net::IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(a) => a.octets(),
    };
    g[8..24].copy_from_slice(&gid);
    g
}
