//! Property tests: parse ∘ emit is the identity for every valid frame, emit
//! writes every byte, and no input makes the parser panic.

use proptest::prelude::*;
use roce_wire::sample::{ipv4_template, sample_transport};
use roce_wire::*;
use std::net::Ipv6Addr;

fn arb_syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..32).prop_map(|c| Syndrome::Ack { credits: c }),
        (0u8..32).prop_map(|t| Syndrome::RnrNak { timer: t }),
        (0u8..5).prop_map(|c| Syndrome::Nak(NakCode::from_u8(c))),
    ]
}

prop_compose! {
    fn arb_frame()(
        op_idx in 0..Opcode::ALL.len(),
        psn in 0u32..(1 << 24),
        qpn in 0u32..(1 << 24),
        src_qp in 0u32..(1 << 24),
        pkey: u16, se: bool, m: bool, fecn: bool, becn: bool, ack: bool,
        va: u64, rkey: u32, len: u32, qkey: u32, swap: u64, cmp: u64, orig: u64,
        imm: u32, syn in arb_syndrome(), msn in 0u32..(1 << 24),
        v6: bool, vlan in proptest::option::of((0u8..8, any::<bool>(), 0u16..4096)),
        dscp in 0u8..64, ecn in 0u8..4, ident: u16, ttl: u8, sport: u16, flow in 0u32..(1 << 20),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) -> (FrameRepr, Vec<u8>) {
        let op = Opcode::ALL[op_idx];
        let mut t = sample_transport(op, psn);
        t.bth.dest_qp = qpn;
        t.bth.pkey = pkey;
        t.bth.solicited = se;
        t.bth.mig_req = m;
        t.bth.fecn = fecn;
        t.bth.becn = becn;
        t.bth.ack_req = ack;
        if let Some(d) = &mut t.deth { *d = DethRepr { qkey, src_qp }; }
        if let Some(r) = &mut t.reth { *r = RethRepr { va, rkey, dma_len: len }; }
        if let Some(a) = &mut t.atomic_eth { *a = AtomicEthRepr { va, rkey, swap_add: swap, compare: cmp }; }
        if let Some(a) = &mut t.aeth { *a = AethRepr { syndrome: syn, msn }; }
        if let Some(a) = &mut t.atomic_ack_eth { a.orig = orig; }
        if t.immdt.is_some() { t.immdt = Some(imm); }
        if t.ieth.is_some() { t.ieth = Some(rkey); }
        let mut f = ipv4_template(t);
        f.udp_src_port = sport;
        f.eth.vlan = vlan.map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid });
        if v6 {
            f.ip = IpRepr::V6(Ipv6Repr {
                src: Ipv6Addr::LOCALHOST, dst: Ipv6Addr::new(0xfd00, 1, 2, 3, 4, 5, 6, 7),
                dscp, ecn, flow_label: flow, hop_limit: ttl, next_header: 17, payload_len: 0,
            });
        } else if let IpRepr::V4(ip) = &mut f.ip {
            ip.dscp = dscp; ip.ecn = ecn; ip.ident = ident; ip.ttl = ttl;
        }
        let has_payload = op.layout().unwrap().payload;
        (f, if has_payload { payload } else { Vec::new() })
    }
}

/// Normalises the fields emit computes, so a parsed repr can be compared with the input.
fn normalised(mut f: FrameRepr, payload_len: usize) -> FrameRepr {
    f.eth.ethertype = match f.ip {
        IpRepr::V4(_) => 0x0800,
        IpRepr::V6(_) => 0x86dd,
    };
    let udp_len = 8 + f.transport.buffer_len(payload_len);
    match &mut f.ip {
        IpRepr::V4(r) => r.payload_len = udp_len,
        IpRepr::V6(r) => r.payload_len = udp_len,
    }
    f.transport.bth.pad_count = TransportRepr::pad_for(payload_len);
    f
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parse_emit_round_trip((f, payload) in arb_frame()) {
        let bytes = f.emit_vec(&[&payload]).unwrap();
        let parsed = match parse_frame(&bytes).unwrap() {
            Frame::Roce(r) => r,
            other => panic!("{other:?}"),
        };
        prop_assert!(parsed.icrc_ok());
        prop_assert!(parsed.ip_checksum_ok);
        prop_assert_eq!(parsed.payload, &payload[..]);
        // The per-packet shortcut agrees with the header set it stands for.
        let t = &parsed.transport;
        prop_assert_eq!(t.header_len(), roce_wire::BTH_LEN + t.headers().len());
        let back = FrameRepr { eth: parsed.eth, ip: parsed.ip, udp_src_port: parsed.udp.src_port, transport: parsed.transport };
        prop_assert_eq!(back, normalised(f, payload.len()));
    }

    #[test]
    fn emit_writes_every_byte((f, payload) in arb_frame()) {
        let n = f.buffer_len(payload.len());
        let mut a = vec![0xa5u8; n];
        let mut b = vec![0x5au8; n];
        f.emit(&[&payload], &mut a).unwrap();
        f.emit(&[&payload], &mut b).unwrap();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn sge_gather_equals_one_slice((f, payload) in arb_frame(), cut in any::<prop::sample::Index>()) {
        let at = if payload.is_empty() { 0 } else { cut.index(payload.len()) };
        let one = f.emit_vec(&[&payload]).unwrap();
        let two = f.emit_vec(&[&payload[..at], &payload[at..]]).unwrap();
        prop_assert_eq!(one, two);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_frame(&bytes);
        let _ = TransportRepr::parse(&bytes);
    }

    #[test]
    fn truncated_and_mutated_frames_never_panic((f, payload) in arb_frame(), cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>(), x: u8) {
        let bytes = f.emit_vec(&[&payload]).unwrap();
        let n = cut.index(bytes.len());
        prop_assert!(parse_frame(&bytes[..n]).is_err());
        let mut m = bytes.clone();
        let i = flip.index(m.len());
        m[i] ^= x;
        let _ = parse_frame(&m);
    }
}

fn frame_for(op: Opcode, payload: &[u8]) -> Vec<u8> {
    ipv4_template(sample_transport(op, 1))
        .emit_vec(&[payload])
        .unwrap()
}

const IB: usize = 14 + 20 + 8;

#[test]
fn typed_errors_for_bad_input() {
    let good = frame_for(Opcode::RcSendOnly, b"hello");
    // Truncated header.
    assert!(matches!(
        parse_frame(&good[..IB + 5]),
        Err(Error::Truncated { .. }) | Err(Error::LengthMismatch { .. })
    ));
    // Wrong UDP port.
    let mut b = good.clone();
    b[14 + 20 + 3] = 0x00;
    assert!(matches!(parse_frame(&b), Err(Error::WrongUdpPort(_))));
    // Unknown opcode.
    let mut b = good.clone();
    b[IB] = 0x15;
    assert_eq!(parse_frame(&b), Err(Error::UnknownOpcode(0x15)));
    // Bad TVer.
    let mut b = good.clone();
    b[IB + 1] |= 0x01;
    assert_eq!(parse_frame(&b), Err(Error::BadTver(1)));
    // PadCnt larger than the payload: an ACK-less SEND ONLY with 1 byte and pad 3 ->
    let small = frame_for(Opcode::RcSendOnly, b"");
    let mut b = small.clone();
    b[IB + 1] |= 0x30;
    assert!(matches!(
        parse_frame(&b),
        Err(Error::PadTooLarge { pad: 3, payload: 0 })
    ));
    // IP total length disagreeing with the bytes present.
    let mut b = good.clone();
    b[14 + 3] = b[14 + 3].wrapping_add(8);
    assert!(matches!(
        parse_frame(&b),
        Err(Error::LengthMismatch { layer: "IPv4", .. })
    ));
    // UDP length disagreeing.
    let mut b = good.clone();
    b[14 + 20 + 5] = b[14 + 20 + 5].wrapping_add(8);
    assert!(matches!(
        parse_frame(&b),
        Err(Error::LengthMismatch { layer: "UDP", .. })
    ));
    // Payload on an opcode that has none.
    let mut t = sample_transport(Opcode::RcAck, 1);
    t.aeth = Some(AethRepr {
        syndrome: Syndrome::Ack { credits: 0 },
        msn: 0,
    });
    assert!(matches!(
        ipv4_template(t).emit_vec(&[b"x"]),
        Err(Error::UnexpectedPayload { .. })
    ));
    // Headers that do not match the opcode.
    let mut t = sample_transport(Opcode::RcSendOnly, 1);
    t.reth = Some(RethRepr::default());
    assert!(matches!(
        ipv4_template(t).emit_vec(&[]),
        Err(Error::LayoutMismatch(_))
    ));
    // ICRC mismatch is reported, not hidden.
    let mut b = good.clone();
    let n = b.len();
    b[n - 1] ^= 0xff;
    match parse_frame(&b).unwrap() {
        Frame::Roce(r) => assert!(!r.icrc_ok()),
        _ => unreachable!(),
    }
    // Not IP at all.
    let mut b = good.clone();
    b[12] = 0x12;
    assert!(matches!(
        parse_frame(&b),
        Err(Error::UnsupportedEtherType(0x1234)) | Err(Error::UnsupportedEtherType(_))
    ));
}

#[test]
fn every_sample_frame_parses_with_a_good_icrc() {
    let frames = roce_wire::sample::sample_frames().unwrap();
    assert!(frames.len() >= Opcode::ALL.len() + 7);
    for s in &frames {
        match parse_frame(&s.bytes).unwrap_or_else(|e| panic!("{}: {e}", s.description)) {
            Frame::Roce(r) => assert!(r.icrc_ok(), "{}", s.description),
            Frame::Pfc { pfc, .. } => assert_eq!(pfc.class_enable, 8),
        }
    }
}
