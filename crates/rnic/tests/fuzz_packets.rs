//! The RNIC fuzz target's body over random and mutated-valid inputs, so every
//! `cargo test` exercises it (the libFuzzer target runs it for hours).

use proptest::prelude::*;
use roce_wire::sample::sample_frames;

/// Valid transport packets (from the sample capture) as fuzz records.
fn seeds() -> Vec<Vec<u8>> {
    sample_frames()
        .unwrap()
        .into_iter()
        .filter(|f| f.bytes.len() > 42 + 12 && f.bytes.len() < 42 + 255)
        .map(|f| f.bytes[42..].to_vec())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_records(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = roce_rnic::fuzzing::run_packets(&data);
    }

    #[test]
    fn mutated_valid_packets(picks in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<prop::sample::Index>(), any::<u8>()), 1..12)) {
        let s = seeds();
        let mut data = Vec::new();
        for (which, flags, at, x) in picks {
            let mut pkt = s[which.index(s.len())].clone();
            let i = at.index(pkt.len());
            // Leave the opcode alone half the time so most records parse.
            if i != 0 || x & 1 == 0 {
                pkt[i] ^= x;
            }
            data.push(flags | 1);
            data.push(pkt.len() as u8);
            data.extend_from_slice(&pkt);
        }
        let _ = roce_rnic::fuzzing::run_packets(&data);
    }
}

/// The seeds themselves reach the live QP and are answered: the harness is
/// not silently dropping everything.
#[test]
fn seed_packets_reach_the_live_qp() {
    let mut data = Vec::new();
    for pkt in seeds() {
        data.push(1);
        data.push(pkt.len() as u8);
        data.extend_from_slice(&pkt);
    }
    let c = roce_rnic::fuzzing::run_packets(&data);
    let parseable = seeds()
        .iter()
        .filter(|p| roce_wire::TransportRepr::parse(p).is_ok())
        .count();
    assert!(parseable > 30);
    assert!(c.rx_pkts as usize >= parseable, "{c:?}");
    assert!(
        c.naks_tx + c.duplicates + c.out_of_sequence + c.acks_tx > 0,
        "{c:?}"
    );
}
