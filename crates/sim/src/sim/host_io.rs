//! The simulator's side of a host profile: how packets pass through a
//! host's data path ([`crate::host`]) on their way between the RNIC and the
//! port. Only hosts with a profile come here, so hosts without one run the
//! code they always ran.

use super::{SimConfig, Simulator, ip_host};
use crate::event::{Event, PS_PER_NS, PS_PER_S};
use crate::host::{FabricUse, HostMeasured, LinkUse, PathTable, Staged, TxPacket, path_table};
use crate::link::{QEntry, Scheduler};
use crate::packet::{Net, Packet, frame_len, is_control};
use roce_rnic::{Transmit, TransmitSink};
use roce_wire::{Opcode, TransportRepr};

/// The slot a packet the RNIC of `host` sends as `t` takes in the fabric:
/// addresses, priority, frame length and the transport headers packed
/// (those that do not fit go to the side table `exts`, reusing a slot of
/// `ext_free` first). What depends on the flow (ns-3 ECMP ports, INT, the
/// control priority) is added by `Simulator::packet_from` afterwards.
///
/// Called by the host's transmit poll on the RNIC's own `Transmit`, by
/// reference (`Rnic::poll_transmit_with`): the 32 bytes the fabric keeps
/// are all that leaves the RNIC, not the ~200-byte `Transmit`, which was
/// copied twice per packet on its way here (issue 12). It borrows only
/// the fields it needs, so the host's RNIC can stay borrowed meanwhile.
///
/// What the hand-off cost (session 20, callgrind of the 1 ms HPCC fat
/// tree, 2.42 M packets sent): the RNIC wrote the `Transmit` field by
/// field (about 60 instructions a data packet in `emit_packet`, 40 an ACK
/// in `next_response`), and this function, called out of line through
/// `&Transmit`, took 216 a packet with the `Packet` it builds. Since
/// session 21 the builders call [`HeadSink`] with the packet they made,
/// and its `put`, forced inline, reads the fields where they lie (15,165
/// M to 15,031 M instructions on that run).
#[inline(always)]
pub(super) fn packet_head(
    cfg: &SimConfig,
    exts: &mut Vec<TransportRepr>,
    ext_free: &mut Vec<u32>,
    host: u32,
    t: &Transmit,
) -> Packet {
    let payload = t.payload.len() as u32;
    let net = Net {
        src: host,
        dst: ip_host(t.dst.ip()).unwrap_or(u32::MAX),
        prio: cfg.dscp_to_prio[usize::from(t.dscp & 63)],
        ecn_capable: t.ecn_capable,
        control: is_control(&t.repr),
        frame: frame_len(&t.repr, payload as usize) as u32,
        payload,
        sport: t.udp_sport,
    };
    Packet::new(net, &t.repr, || match ext_free.pop() {
        Some(e) => {
            exts[e as usize] = t.repr;
            e
        }
        None => {
            exts.push(t.repr);
            (exts.len() - 1) as u32
        }
    })
}

/// The transmit poll's sink (see `Rnic::poll_transmit_into`): the
/// fabric's slot of the packet ([`packet_head`]) and its QPN. Its `put`
/// is forced inline into the RNIC's packet builders, so the fields it
/// reads come where the builder made them, and the `Transmit` need not
/// be stored whole first (it was, for a callback the compiler kept out of
/// line: about 200 instructions a packet sent on the 1 ms HPCC fat tree).
///
/// A measured dead end (session 41): the sink cut to two words (a
/// reference to these three references, kept by the caller, and the
/// host), handed over in registers. `perf` had put 30 % of
/// `poll_transmit_into`'s samples on its copy of this 32-byte sink from
/// the caller's stack, which looked like a store the processor could not
/// forward. The fat5ms HPCC run came out slower: 8.60-8.63 s of user
/// time against 8.45-8.53 s, three interleaved pairs.
pub(super) struct HeadSink<'a> {
    pub cfg: &'a SimConfig,
    pub exts: &'a mut Vec<TransportRepr>,
    pub ext_free: &'a mut Vec<u32>,
    pub host: u32,
}

impl TransmitSink for HeadSink<'_> {
    /// The packet, its QP and that QP's context (see
    /// `Simulator::map_qp`).
    type Out = (Packet, u32, u64);
    #[inline(always)]
    fn put(self, t: Transmit) -> (Packet, u32, u64) {
        self.put_from(t, 0)
    }
    #[inline(always)]
    fn put_from(self, t: Transmit, context: u64) -> (Packet, u32, u64) {
        (
            packet_head(self.cfg, self.exts, self.ext_free, self.host, &t),
            t.src_qpn,
            context,
        )
    }
}

impl Simulator {
    /// `kick` for a host with a data path: the RNIC's packets wait in the
    /// staging pipe until their payload has been read over PCIe, then
    /// queue at the port.
    #[cold]
    #[inline(never)]
    pub(super) fn kick_host_path(&mut self, node: u32, host: u32) {
        let now = self.q.now();
        let staging = self.cfg.nic_staging_pkts;
        // Keep the pipe full: the RNIC's next packets start their reads
        // while the port sends the ready ones.
        loop {
            let queued = self.nodes[node as usize].ports[0].queued_pkts();
            let h = &mut self.hosts[host as usize];
            let Some(hp) = h.path.as_deref_mut() else {
                return;
            };
            if queued >= staging || hp.pipe.len() >= hp.pipe_depth {
                break;
            }
            let sink = HeadSink {
                cfg: &self.cfg,
                exts: &mut self.exts,
                ext_free: &mut self.ext_free,
                host,
            };
            let Some((pkt, qpn, context)) = h.rnic.poll_transmit_into(now / PS_PER_NS, sink) else {
                break;
            };
            let control = pkt.control();
            let opcode = pkt.opcode();
            let (pkt, flow) = self.packet_from(host, pkt, qpn, context);
            self.counters.injected_bytes += u64::from(pkt.frame());
            self.counters.injected_pkts += 1;
            let (prio, frame) = (usize::from(pkt.prio()), pkt.frame());
            let markable = pkt.ecn_capable() && !pkt.ce();
            let payload = pkt.payload();
            let id = self.alloc_packet(pkt);
            let (mr_key, (messages, message)) = self
                .flows
                .get(flow as usize)
                .map_or((0, (1, u64::MAX)), |f| {
                    (f.src_lkey, self.messages(f.spec.size))
                });
            let Some(hp) = self.hosts[host as usize].path.as_deref_mut() else {
                return;
            };
            if control || payload == 0 {
                hp.tx_control(now);
                let p = &mut self.nodes[node as usize].ports[0];
                p.enqueue(prio, QEntry::new(id, frame, 0, markable));
                continue;
            }
            let ready = hp.tx_data(
                now,
                TxPacket {
                    qpn,
                    mr_key,
                    payload,
                    first: starts_wqe(opcode),
                    message,
                    messages,
                },
            );
            hp.pipe.push_back(Staged {
                ready,
                pkt: id,
                prio: prio as u8,
                frame,
                markable,
            });
        }
        // Ready packets join the port's queues.
        let p = &mut self.nodes[node as usize].ports[0];
        let Some(hp) = self.hosts[host as usize].path.as_deref_mut() else {
            return;
        };
        while let Some(&s) = hp.pipe.front()
            && s.ready <= now
            && p.queued_pkts() < staging
        {
            hp.pipe.pop_front();
            p.enqueue(
                usize::from(s.prio),
                QEntry::new(s.pkt, s.frame, 0, s.markable),
            );
        }
        if let Some(prio) = p.pick(now, &Scheduler::Strict) {
            // Its end wakes the port, which tops the pipe up again.
            self.start_tx::<{ super::shape::GENERAL }>(node, 0, prio);
        } else if let Some(s) = hp.pipe.front()
            && s.ready > now
            && hp.wake_at.is_none_or(|w| w <= now || w > s.ready)
        {
            // Wake the idle port when the pipe's head is ready.
            hp.wake_at = Some(s.ready);
            let at = s.ready;
            self.q.schedule(at, Event::TxDone { node, port: 0 });
        }
    }

    /// A packet reached a host with a data path: `false` if it was dropped
    /// for want of RX-buffer space. Data packets hold buffer space until
    /// their DMA write is done; on a lossless priority the host pauses its
    /// ToR before the buffer fills.
    #[cold]
    #[inline(never)]
    pub(super) fn host_rx_admit(&mut self, host: u32, pkt: u32) -> bool {
        let now = self.q.now();
        let p = self.packets[pkt as usize];
        if p.control() || p.payload() == 0 {
            return true;
        }
        let bth = p.repr(&self.exts).bth;
        let (qpn, op) = (bth.dest_qp, bth.opcode);
        let recv_wqe = matches!(
            op,
            Opcode::RcSendFirst
                | Opcode::RcSendOnly
                | Opcode::RcSendOnlyImm
                | Opcode::RcSendOnlyInv
        );
        let node = self.hosts[host as usize].node;
        let flow = self.flow_of(host, qpn);
        let mr_key = self.flows.get(flow as usize).map_or(0, |f| f.dst_lkey);
        let Some(hp) = self.hosts[host as usize].path.as_deref_mut() else {
            return true;
        };
        if !hp.rx_data(now, qpn, p.frame(), p.payload(), recv_wqe, mr_key) {
            self.take_packet(pkt);
            self.free_int(pkt);
            return false;
        }
        if hp.lossless && !hp.rx_xoff && hp.rx_occupancy(now) > hp.xoff_at {
            hp.rx_xoff = true;
            let prio = hp.xoff_prio;
            let at = hp.rx_drained_to(hp.xon_at).unwrap_or(now);
            self.send_pfc(node, 0, prio, true);
            self.q.schedule(at, Event::HostRxDrain { host });
        }
        true
    }

    /// The RX buffer may have drained to XON: resume the ToR, or look
    /// again when it will have.
    #[cold]
    #[inline(never)]
    pub(super) fn host_rx_drain(&mut self, host: u32) {
        let now = self.q.now();
        let node = self.hosts[host as usize].node;
        let Some(hp) = self.hosts[host as usize].path.as_deref_mut() else {
            return;
        };
        if !hp.rx_xoff {
            return;
        }
        if hp.rx_occupancy(now) <= hp.xon_at {
            hp.rx_xoff = false;
            let prio = hp.xoff_prio;
            self.send_pfc(node, 0, prio, false);
        } else {
            let at = hp.rx_drained_to(hp.xon_at).unwrap_or(now);
            self.q
                .schedule(at.max(now + 1), Event::HostRxDrain { host });
        }
    }
}

/// The first packet of a message: the RNIC has just fetched its WQE.
fn starts_wqe(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::RcSendFirst
            | Opcode::RcSendOnly
            | Opcode::RcSendOnlyImm
            | Opcode::RcSendOnlyInv
            | Opcode::RcWriteFirst
            | Opcode::RcWriteOnly
            | Opcode::RcWriteOnlyImm
    )
}

impl Simulator {
    /// The §5.9 table from what hosts and fabric measured (hosts with a
    /// profile only).
    #[cold]
    #[inline(never)]
    pub(super) fn host_path_table(&self) -> Option<PathTable> {
        let plan = self.cfg.host.as_ref()?;
        let ifg = self.cfg.ifg_bytes;
        let names: Vec<String> = self
            .topo
            .hosts
            .iter()
            .map(|&n| self.topo.nodes[n].name.clone())
            .collect();
        let hosts: Vec<HostMeasured> = self
            .hosts
            .iter()
            .enumerate()
            .filter_map(|(i, h)| {
                let port = &self.nodes[h.node as usize].ports[0];
                let hp = h.path.as_ref()?;
                Some(hp.measured(i as u32, port.tx_bytes, ifg, port.rate_bps))
            })
            .collect();
        // The fabric's busy time: first flow start to the last finish (or now).
        let start = self.flows.iter().map(|f| f.spec.start).min().unwrap_or(0);
        let end = self
            .flows
            .iter()
            .map(|f| f.finish.unwrap_or(self.q.now()))
            .max()
            .unwrap_or(0);
        let span = end.saturating_sub(start).max(1) as f64;
        let mut fabric = FabricUse {
            ecn_marks: self.counters.ecn_marks,
            pfc_pauses: self.counters.pfc_xoff_tx,
            drops: self.counters.dropped_pkts,
            cnps: self.hosts.iter().map(|h| h.rnic.counters().cnps_tx).sum(),
            ..FabricUse::default()
        };
        for sw in &self.switches {
            let node = sw.node as usize;
            let ports = &self.nodes[node].ports;
            if ports.iter().any(|p| self.nodes[p.peer as usize].host) {
                let up: Vec<f64> = ports
                    .iter()
                    .filter(|p| !self.nodes[p.peer as usize].host)
                    .map(|p| p.tx_bytes as f64 * 8.0 / span * 1e3)
                    .collect();
                fabric.uplinks.push(up);
            }
            for p in ports {
                let bits = (p.tx_bytes as f64) * 8.0;
                let util = bits / (p.rate_bps.max(1) as f64) / span * PS_PER_S as f64;
                let link = format!(
                    "{}→{}",
                    self.topo.nodes[node].name, self.topo.nodes[p.peer as usize].name
                );
                if self.nodes[p.peer as usize].host {
                    fabric.leaf.push((link, util));
                } else {
                    fabric.spine.push(LinkUse {
                        link,
                        gbps: bits / span * 1e3,
                        utilisation: util,
                    });
                }
            }
        }
        Some(path_table(&plan.default.profile, &hosts, &names, &fabric))
    }
}
