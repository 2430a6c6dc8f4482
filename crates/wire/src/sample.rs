//! A reference set of frames: one correct packet of every known opcode and
//! every AETH form, a CNP, IPv6 and 802.1Q variants, and a PFC frame. `roce
//! pcap sample` writes these, and the Wireshark interop test decodes them.

use crate::eth::{EthernetRepr, Mac, VlanTag};
use crate::ext::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, DethRepr, NakCode, RethRepr, Syndrome,
};
use crate::frame::{FrameRepr, IpRepr};
use crate::ipv4::Ipv4Repr;
use crate::ipv6::Ipv6Repr;
use crate::opcode::{Headers, Opcode};
use crate::pfc::PfcRepr;
use crate::psn::Psn;
use crate::transport::TransportRepr;
use crate::{BthRepr, Result};
use std::net::{Ipv4Addr, Ipv6Addr};

/// One sample frame and what it shows.
#[derive(Debug, Clone)]
pub struct SampleFrame {
    pub description: String,
    pub bytes: Vec<u8>,
}

/// Host A's MAC in the samples.
pub const MAC_A: Mac = Mac([0x02, 0x00, 0x00, 0x00, 0x00, 0x0a]);
/// Host B's MAC in the samples.
pub const MAC_B: Mac = Mac([0x02, 0x00, 0x00, 0x00, 0x00, 0x0b]);

/// An IPv4 RoCEv2 frame template from A (10.0.0.1) to B (10.0.0.2), DSCP 26, ECT(0).
pub fn ipv4_template(transport: TransportRepr) -> FrameRepr {
    FrameRepr {
        eth: EthernetRepr {
            dst: MAC_B,
            src: MAC_A,
            vlan: None,
            ethertype: 0,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            dscp: 26,
            ecn: 0b10,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 0,
        }),
        udp_src_port: 0xc000,
        transport,
    }
}

/// Fills the extension headers an opcode's layout calls for with sample values.
pub fn sample_transport(op: Opcode, psn: u32) -> TransportRepr {
    let h = op.layout().map_or(Headers::EMPTY, |l| l.headers);
    let mut t = TransportRepr::new(BthRepr {
        opcode: op,
        dest_qp: 0x000102,
        psn: Psn::new(psn),
        ack_req: op.transport() == crate::opcode::Transport::Rc && op.is_request() && op.is_last(),
        solicited: op.has_imm(),
        ..Default::default()
    });
    if h.contains(Headers::DETH) {
        t.deth = Some(DethRepr {
            qkey: 0x1111_1111,
            src_qp: 0x000201,
        });
    }
    if h.contains(Headers::RETH) {
        t.reth = Some(RethRepr {
            va: 0x0000_7f00_1234_5000,
            rkey: 0x0000_1234,
            dma_len: if op == Opcode::RcReadRequest {
                4096
            } else {
                2061
            },
        });
    }
    if h.contains(Headers::ATOMIC_ETH) {
        t.atomic_eth = Some(AtomicEthRepr {
            va: 0x0000_7f00_1234_6000,
            rkey: 0x0000_1234,
            swap_add: 0x0000_0000_0000_002a,
            compare: if op == Opcode::RcCompareSwap { 7 } else { 0 },
        });
    }
    if h.contains(Headers::AETH) {
        t.aeth = Some(AethRepr {
            syndrome: Syndrome::Ack { credits: 31 },
            msn: 3,
        });
    }
    if h.contains(Headers::ATOMIC_ACK_ETH) {
        t.atomic_ack_eth = Some(AtomicAckEthRepr { orig: 7 });
    }
    if h.contains(Headers::IMMDT) {
        t.immdt = Some(0xcafe_f00d);
    }
    if h.contains(Headers::IETH) {
        t.ieth = Some(0x0000_5678);
    }
    if op == Opcode::Cnp {
        t.bth.becn = true;
        t.bth.psn = Psn::new(0);
    }
    t
}

/// Turns an A→B template into B→A (responses, ACKs and CNPs).
fn reverse(f: &mut FrameRepr) {
    std::mem::swap(&mut f.eth.src, &mut f.eth.dst);
    if let IpRepr::V4(ip) = &mut f.ip {
        std::mem::swap(&mut ip.src, &mut ip.dst);
    }
    f.transport.bth.dest_qp = 0x000201;
}

fn payload_for(op: Opcode) -> Vec<u8> {
    let has = op.layout().is_some_and(|l| l.payload);
    if !has {
        return Vec::new();
    }
    // Full-MTU (1024) packets for FIRST/MIDDLE, 13 bytes (3 bytes of pad) otherwise.
    let n = if op.is_last() { 13 } else { 1024 };
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// Every sample frame, in a fixed order.
pub fn sample_frames() -> Result<Vec<SampleFrame>> {
    let mut out = Vec::new();
    let mut psn = 0x00_0100;
    for &op in Opcode::ALL {
        let t = sample_transport(op, psn);
        psn += 1;
        let mut f = ipv4_template(t);
        if !op.is_request() {
            reverse(&mut f);
        }
        out.push(SampleFrame {
            description: format!("{} (0x{:02x})", op.name(), op.to_u8()),
            bytes: f.emit_vec(&[&payload_for(op)])?,
        });
    }
    let aeths: Vec<(String, Syndrome)> = std::iter::once((
        "RNR NAK, timer code 14 (1.28 ms)".to_string(),
        Syndrome::RnrNak { timer: 14 },
    ))
    .chain((0..5).map(|c| {
        let code = NakCode::from_u8(c);
        (format!("NAK {}", code.name()), Syndrome::Nak(code))
    }))
    .collect();
    for (what, syn) in aeths {
        let mut t = sample_transport(Opcode::RcAck, psn);
        psn += 1;
        t.aeth = Some(AethRepr {
            syndrome: syn,
            msn: 9,
        });
        let mut f = ipv4_template(t);
        reverse(&mut f);
        out.push(SampleFrame {
            description: format!("RC_ACKNOWLEDGE: {what}"),
            bytes: f.emit_vec(&[])?,
        });
    }
    // IPv6 and 802.1Q-tagged variants of a WRITE ONLY.
    let mut f = ipv4_template(sample_transport(Opcode::RcWriteOnly, psn));
    f.ip = IpRepr::V6(Ipv6Repr {
        src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
        dst: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
        dscp: 26,
        ecn: 0b10,
        flow_label: 0x12345,
        hop_limit: 64,
        next_header: 17,
        payload_len: 0,
    });
    out.push(SampleFrame {
        description: "RC_RDMA_WRITE_ONLY over IPv6".into(),
        bytes: f.emit_vec(&[&payload_for(Opcode::RcWriteOnly)])?,
    });
    let mut f = ipv4_template(sample_transport(Opcode::RcSendOnly, psn + 1));
    f.eth.vlan = Some(VlanTag {
        pcp: 3,
        dei: false,
        vid: 100,
    });
    if let IpRepr::V4(ip) = &mut f.ip {
        ip.ecn = 0b11;
    }
    out.push(SampleFrame {
        description: "RC_SEND_ONLY, 802.1Q PCP 3 VID 100, ECN CE".into(),
        bytes: f.emit_vec(&[&payload_for(Opcode::RcSendOnly)])?,
    });
    let pfc = PfcRepr {
        class_enable: 1 << 3,
        quanta: [0, 0, 0, 0xffff, 0, 0, 0, 0],
    };
    out.push(SampleFrame {
        description: "802.1Qbb PFC: pause priority 3 for 65535 quanta".into(),
        bytes: pfc.to_frame(MAC_B),
    });
    Ok(out)
}
