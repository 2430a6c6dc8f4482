//! Arbitrary bytes into `parse_frame` and `TransportRepr::parse`: neither may
//! panic, and whatever parses as RoCEv2 must survive emit → parse unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_wire::{Frame, FrameRepr, TransportRepr, parse_frame};

/// PadCnt is recomputed from the payload length on emit, so a frame whose
/// wire PadCnt is merely "large enough" comes back with the canonical one.
fn canonical(mut t: TransportRepr, payload_len: usize) -> TransportRepr {
    t.bth.pad_count = TransportRepr::pad_for(payload_len);
    t
}

fuzz_target!(|data: &[u8]| {
    if let Ok(tp) = TransportRepr::parse(data) {
        let want = canonical(tp.repr, tp.payload.len());
        let mut buf = vec![0u8; want.buffer_len(tp.payload.len())];
        let hlen = want
            .emit_headers(&mut buf, tp.payload.len())
            .expect("a parsed transport repr must emit");
        buf[hlen..hlen + tp.payload.len()].copy_from_slice(tp.payload);
        let again = TransportRepr::parse(&buf).expect("re-emitted transport must parse");
        assert_eq!(again.repr, want);
        assert_eq!(again.payload, tp.payload);
    }

    if let Ok(Frame::Roce(r)) = parse_frame(data) {
        let repr = FrameRepr {
            eth: r.eth,
            ip: r.ip,
            udp_src_port: r.udp.src_port,
            transport: r.transport,
        };
        let bytes = repr
            .emit_vec(&[r.payload])
            .expect("a parsed frame must emit");
        match parse_frame(&bytes) {
            Ok(Frame::Roce(again)) => {
                assert_eq!(again.transport, canonical(r.transport, r.payload.len()));
                assert_eq!(again.payload, r.payload);
                assert!(again.icrc_ok(), "emitted frame has a bad ICRC");
                assert!(
                    again.ip_checksum_ok,
                    "emitted frame has a bad IPv4 checksum"
                );
            }
            other => panic!("re-emitted frame does not parse as RoCEv2: {other:?}"),
        }
    }
});
