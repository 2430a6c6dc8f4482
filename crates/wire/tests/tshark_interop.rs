//! Wireshark (tshark) reads our sample frames and must see the same values
//! our decoder does, and flag nothing as malformed. Skips, saying why, when
//! tshark is not installed — unless `ROCE_REQUIRE_ROOT_TESTS` is set (as
//! `.ci/run` does after installing it), where that is a failure.

use roce_wire::pcap::CaptureWriter;
use roce_wire::sample::sample_frames;
use roce_wire::{Frame, parse_frame};
use std::process::Command;

#[path = "../../verbs/tests/prereq/mod.rs"]
mod prereq;

const FIELDS: &[&str] = &[
    "frame.number",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.a",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "_ws.malformed",
    "_ws.expert.severity",
    "macc.cbfc.enbv",
    "macc.cbfc.pause_time.c3",
];

fn num(s: &str) -> Option<u64> {
    let s = s.split(',').next()?.trim();
    if s.is_empty() {
        return None;
    }
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

#[test]
fn wireshark_agrees_with_our_decoder() {
    if !prereq::tool(
        "wireshark_agrees_with_our_decoder",
        &["tshark", "--version"],
        "apt-get install tshark",
    ) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("roce-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sample.pcap");
    let frames = sample_frames().unwrap();
    let mut w = CaptureWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write(i as u64 * 1000, &f.bytes).unwrap();
    }
    drop(w.into_inner());

    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(&path)
        .args(["-T", "fields", "-E", "separator=|"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(
        rows.len(),
        frames.len(),
        "tshark saw a different frame count"
    );

    for (s, row) in frames.iter().zip(&rows) {
        let col = |name: &str| row[FIELDS.iter().position(|f| *f == name).unwrap()];
        let what = &s.description;
        assert!(
            col("_ws.malformed").is_empty(),
            "{what}: Wireshark says malformed"
        );
        assert!(
            !col("_ws.expert.severity")
                .split(',')
                .any(|v| num(v) == Some(8_388_608)),
            "{what}: Wireshark reports an error-level expert item"
        );
        match parse_frame(&s.bytes).unwrap() {
            Frame::Pfc { pfc, .. } => {
                assert_eq!(
                    num(col("macc.cbfc.enbv")),
                    Some(u64::from(pfc.class_enable))
                );
                assert_eq!(
                    num(col("macc.cbfc.pause_time.c3")),
                    Some(u64::from(pfc.quanta[3]))
                );
            }
            Frame::Roce(r) => {
                let t = r.transport;
                assert_eq!(
                    num(col("infiniband.bth.opcode")),
                    Some(u64::from(t.bth.opcode.to_u8())),
                    "{what}"
                );
                assert_eq!(
                    num(col("infiniband.bth.destqp")),
                    Some(u64::from(t.bth.dest_qp)),
                    "{what}"
                );
                assert_eq!(
                    num(col("infiniband.bth.psn")),
                    Some(u64::from(t.bth.psn.value())),
                    "{what}"
                );
                assert_eq!(
                    num(col("infiniband.bth.a")),
                    Some(u64::from(t.bth.ack_req)),
                    "{what}"
                );
                // Wireshark 4.0 files the AtomicETH's VA and R_Key under the
                // RETH field names (and no DMA length), so compare those too.
                let reth = t
                    .reth
                    .map(|x| (x.va, u64::from(x.rkey), Some(u64::from(x.dma_len))));
                let reth = reth.or(t.atomic_eth.map(|a| (a.va, u64::from(a.rkey), None)));
                let ws_reth = num(col("infiniband.reth.va")).map(|va| {
                    (
                        va,
                        num(col("infiniband.reth.r_key")).unwrap(),
                        num(col("infiniband.reth.dmalen")),
                    )
                });
                assert_eq!(ws_reth, reth, "{what}: RETH");
                let aeth = t
                    .aeth
                    .map(|a| (u64::from(a.syndrome.to_u8()), u64::from(a.msn)));
                let ws_aeth = num(col("infiniband.aeth.syndrome"))
                    .map(|s| (s, num(col("infiniband.aeth.msn")).unwrap()));
                assert_eq!(ws_aeth, aeth, "{what}: AETH");
                let deth = t.deth.map(|d| (u64::from(d.qkey), u64::from(d.src_qp)));
                let ws_deth = num(col("infiniband.deth.q_key"))
                    .map(|q| (q, num(col("infiniband.deth.srcqp")).unwrap()));
                assert_eq!(ws_deth, deth, "{what}: DETH");
                let atomic = t.atomic_eth.map(|a| (a.swap_add, a.compare));
                let ws_atomic = num(col("infiniband.atomiceth.swapdt"))
                    .map(|s| (s, num(col("infiniband.atomiceth.cmpdt")).unwrap()));
                assert_eq!(ws_atomic, atomic, "{what}: AtomicETH");
                assert_eq!(
                    num(col("infiniband.atomicacketh.origremdt")),
                    t.atomic_ack_eth.map(|a| a.orig),
                    "{what}: AtomicAckETH"
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
