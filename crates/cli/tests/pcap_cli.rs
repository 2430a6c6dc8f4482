//! `roce pcap sample` / `roce pcap decode`, run as the built binary.

use pcap_file::DataLink;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use roce_wire::opcode::Transport;
use roce_wire::pcap::{CaptureWriter, read_capture};
use roce_wire::sample::{ipv4_template, sample_frames, sample_transport};
use roce_wire::{Headers, Opcode};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

#[path = "../../verbs/tests/prereq/mod.rs"]
mod prereq;

fn roce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .output()
        .expect("run roce")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("stderr is UTF-8")
}

fn ok(o: Output) -> Output {
    assert!(
        o.status.success(),
        "roce failed: {:?}\nstderr: {}",
        o.status,
        stderr(&o)
    );
    o
}

/// Writes the sample capture into `dir` and returns its path and frame count.
fn sample(dir: &Path) -> (String, usize) {
    let file = dir.join("sample.pcap").to_str().unwrap().to_string();
    let o = ok(roce(&["pcap", "sample", &file]));
    let msg = stdout(&o);
    let n: usize = msg
        .strip_prefix("wrote ")
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("unexpected sample output {msg:?}"));
    assert_eq!(n, sample_frames().unwrap().len());
    (file, n)
}

/// Runs `roce pcap decode --json FILE`; every line must be a JSON object.
fn decode_json(file: &str) -> Vec<Value> {
    let o = ok(roce(&["pcap", "decode", file, "--json"]));
    stdout(&o)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            assert!(v.is_object(), "not an object: {l}");
            v
        })
        .collect()
}

fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    let ptr = format!("/{}", path.replace('.', "/"));
    v.pointer(&ptr)
        .unwrap_or_else(|| panic!("frame {} has no {path}: {v}", v["frame"]))
}

fn u(v: &Value, path: &str) -> u64 {
    at(v, path)
        .as_u64()
        .unwrap_or_else(|| panic!("{path} is not an unsigned integer: {v}"))
}

fn has(v: &Value, path: &str) -> bool {
    v.pointer(&format!("/{}", path.replace('.', "/"))).is_some()
}

#[test]
fn sample_decodes_to_json_with_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let (file, n) = sample(dir.path());
    let frames = decode_json(&file);
    assert_eq!(frames.len(), n);

    // The first frames are one of every opcode, in table order.
    for (i, &op) in Opcode::ALL.iter().enumerate() {
        let f = &frames[i];
        assert_eq!(u(f, "frame"), i as u64 + 1);
        assert!(!has(f, "error"), "{f}");
        assert_eq!(u(f, "bth.opcode"), u64::from(op.to_u8()));
        assert_eq!(at(f, "bth.opcode_name"), op.name());
        let psn = if op == Opcode::Cnp {
            0
        } else {
            0x100 + i as u64
        };
        assert_eq!(u(f, "bth.psn"), psn, "{}", op.name());
        let dest_qp = if op.is_request() { 0x102 } else { 0x201 };
        assert_eq!(u(f, "bth.dest_qp"), dest_qp, "{}", op.name());
        let ack_req = op.transport() == Transport::Rc && op.is_request() && op.is_last();
        assert_eq!(at(f, "bth.ack_req"), ack_req, "{}", op.name());
        assert_eq!(at(f, "bth.becn"), op == Opcode::Cnp);

        let h = op.layout().unwrap().headers;
        for (hdr, key) in [
            (Headers::DETH, "deth"),
            (Headers::RETH, "reth"),
            (Headers::ATOMIC_ETH, "atomic_eth"),
            (Headers::AETH, "aeth"),
            (Headers::ATOMIC_ACK_ETH, "atomic_ack_eth"),
            (Headers::IMMDT, "immdt"),
            (Headers::IETH, "ieth"),
        ] {
            assert_eq!(has(f, key), h.contains(hdr), "{key} in {}: {f}", op.name());
        }
        if h.contains(Headers::RETH) {
            assert_eq!(u(f, "reth.va"), 0x0000_7f00_1234_5000);
            assert_eq!(u(f, "reth.rkey"), 0x1234);
            let len = if op == Opcode::RcReadRequest {
                4096
            } else {
                2061
            };
            assert_eq!(u(f, "reth.dma_len"), len);
        }
        if h.contains(Headers::ATOMIC_ETH) {
            assert_eq!(u(f, "atomic_eth.va"), 0x0000_7f00_1234_6000);
            assert_eq!(u(f, "atomic_eth.rkey"), 0x1234);
            assert_eq!(u(f, "atomic_eth.swap_add"), 42);
            let cmp = if op == Opcode::RcCompareSwap { 7 } else { 0 };
            assert_eq!(u(f, "atomic_eth.compare"), cmp);
        }
        if h.contains(Headers::ATOMIC_ACK_ETH) {
            assert_eq!(u(f, "atomic_ack_eth.orig"), 7);
        }
        if h.contains(Headers::AETH) {
            assert_eq!(at(f, "aeth.kind"), "ack");
            assert_eq!(u(f, "aeth.credits"), 31);
            assert_eq!(u(f, "aeth.msn"), 3);
        }
        if h.contains(Headers::IMMDT) {
            assert_eq!(u(f, "immdt"), 0xcafe_f00d);
        }
        if h.contains(Headers::IETH) {
            assert_eq!(u(f, "ieth.rkey"), 0x5678);
        }
        if h.contains(Headers::DETH) {
            assert_eq!(u(f, "deth.qkey"), 0x1111_1111);
            assert_eq!(u(f, "deth.src_qp"), 0x201);
        }
        let layout = op.layout().unwrap();
        let plen = match (layout.payload, op.is_last()) {
            (false, _) => 0,
            (true, true) => 13,
            (true, false) => 1024,
        };
        assert_eq!(u(f, "payload_len"), plen, "{}", op.name());
    }

    // Every AETH form.
    let kinds: BTreeSet<&str> = frames
        .iter()
        .filter_map(|f| f.pointer("/aeth/kind").and_then(Value::as_str))
        .collect();
    assert_eq!(kinds, BTreeSet::from(["ack", "nak", "rnr_nak"]));
    let nak_codes: BTreeSet<u64> = frames
        .iter()
        .filter_map(|f| f.pointer("/aeth/nak_code").and_then(Value::as_u64))
        .collect();
    assert_eq!(nak_codes, (0..=4).collect());
    let rnr: Vec<&Value> = frames
        .iter()
        .filter(|f| f.pointer("/aeth/kind") == Some(&Value::from("rnr_nak")))
        .collect();
    assert_eq!(rnr.len(), 1);
    assert_eq!(u(rnr[0], "aeth.rnr_timer_us"), 1_280);
    assert_eq!(u(rnr[0], "aeth.msn"), 9);
    for f in frames
        .iter()
        .filter(|f| f.pointer("/aeth/kind") == Some(&Value::from("nak")))
    {
        assert!(at(f, "aeth.nak_name").is_string());
        assert_eq!(u(f, "aeth.msn"), 9);
    }

    // Every RoCE frame has a good ICRC, DSCP 26 and ECT(0) (CE on the VLAN one).
    let mut roce = 0;
    for f in &frames {
        if !has(f, "bth") {
            continue;
        }
        roce += 1;
        assert_eq!(at(f, "icrc.ok"), true, "{f}");
        assert_eq!(u(f, "icrc.wire"), u(f, "icrc.computed"));
        assert_eq!(u(f, "ip.dscp"), 26);
        let ecn = if has(f, "eth.vlan") { 3 } else { 2 };
        assert_eq!(u(f, "ip.ecn"), ecn, "{f}");
        assert!(has(f, "payload_len"));
    }
    assert_eq!(roce, n - 1, "all but the PFC frame are RoCEv2");
    assert!(frames.iter().all(|f| !has(f, "error")));

    // The tail: IPv6, 802.1Q, PFC.
    let v6 = &frames[n - 3];
    assert_eq!(u(v6, "ip.version"), 6);
    assert_eq!(at(v6, "bth.opcode_name"), Opcode::RcWriteOnly.name());
    let tagged = &frames[n - 2];
    assert_eq!(u(tagged, "eth.vlan.vid"), 100);
    assert_eq!(u(tagged, "eth.vlan.pcp"), 3);
    let pfc = &frames[n - 1];
    assert_eq!(u(pfc, "pfc.class_enable"), 1 << 3);
    assert_eq!(at(pfc, "pfc.paused_priorities"), &serde_json::json!([3]));
}

#[test]
fn human_output_has_one_line_per_frame() {
    let dir = tempfile::tempdir().unwrap();
    let (file, n) = sample(dir.path());
    let o = ok(roce(&["pcap", "decode", &file]));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), n);
    for (i, l) in lines.iter().enumerate() {
        let idx: usize = l.split_whitespace().next().unwrap().parse().unwrap();
        assert_eq!(idx, i + 1, "{l}");
        assert!(!l.contains("not RoCEv2") && !l.contains("ICRC BAD"), "{l}");
    }
    for (i, &op) in Opcode::ALL.iter().enumerate() {
        assert!(lines[i].contains(op.name()), "{}: {}", op.name(), lines[i]);
    }
    assert!(lines[n - 1].contains("PFC"));
}

/// A valid RC_RDMA_WRITE_ONLY frame over IPv4 (14 + 20 + 8 + 12 + 16 + 13 + 3 + 4 bytes).
fn write_only() -> Vec<u8> {
    let f = ipv4_template(sample_transport(Opcode::RcWriteOnly, 0x42));
    f.emit_vec(&[b"hello, world!"]).unwrap()
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = CaptureWriter::new(Vec::new()).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write(1_000 * i as u64, f).unwrap();
    }
    std::fs::write(path, w.into_inner()).unwrap();
}

#[test]
fn malformed_frames_get_an_error_field_and_decoding_continues() {
    let good = write_only();
    assert_eq!(good.len(), 90);
    let udp_at = 14 + 20;

    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x06]);
    arp.extend_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1]); // Ethernet/IPv4 request
    arp.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x0a, 10, 0, 0, 1]);
    arp.extend_from_slice(&[0, 0, 0, 0, 0, 0, 10, 0, 0, 2]);
    let truncated = good[..60].to_vec();
    let mut bad_icrc = good.clone();
    *bad_icrc.last_mut().unwrap() ^= 0x01;
    let mut bad_payload = good.clone();
    bad_payload[udp_at + 8 + 12 + 16] ^= 0x80;
    let mut wrong_port = good.clone();
    wrong_port[udp_at + 2..udp_at + 4].copy_from_slice(&4792u16.to_be_bytes());
    let frames = vec![
        good.clone(),
        arp,
        truncated,
        bad_icrc,
        bad_payload,
        wrong_port,
        Vec::new(),
        good,
    ];

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("malformed.pcap");
    write_pcap(&path, &frames);
    let file = path.to_str().unwrap();

    let out = decode_json(file);
    assert_eq!(out.len(), frames.len());
    let errors: Vec<bool> = out.iter().map(|f| has(f, "error")).collect();
    assert_eq!(
        errors,
        [false, true, true, false, false, true, true, false],
        "{out:#?}"
    );
    for f in out.iter().filter(|f| has(f, "error")) {
        assert!(at(f, "error").as_str().is_some_and(|s| !s.is_empty()));
        assert!(!has(f, "bth") && !has(f, "icrc"), "{f}");
    }
    assert!(at(&out[1], "error").as_str().unwrap().contains("0x0806"));
    assert!(at(&out[5], "error").as_str().unwrap().contains("4792"));
    for i in [0, 7] {
        assert_eq!(at(&out[i], "icrc.ok"), true);
    }
    for i in [3, 4] {
        assert_eq!(at(&out[i], "icrc.ok"), false, "{}", out[i]);
        assert_ne!(u(&out[i], "icrc.wire"), u(&out[i], "icrc.computed"));
        assert_eq!(at(&out[i], "bth.opcode_name"), Opcode::RcWriteOnly.name());
    }

    let o = ok(roce(&["pcap", "decode", file]));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), frames.len());
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l.contains("not RoCEv2"), errors[i], "{l}");
        assert_eq!(l.contains("ICRC BAD"), i == 3 || i == 4, "{l}");
    }
}

fn assert_fails_with_one_line(args: &[&str]) {
    let o = roce(args);
    assert!(!o.status.success(), "{args:?} should fail");
    assert!(o.stdout.is_empty(), "stdout: {}", stdout(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "stderr: {err:?}");
    assert!(err.starts_with("roce: "), "stderr: {err:?}");
}

#[test]
fn unreadable_files_fail_with_one_line_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("does-not-exist.pcap");
    let missing = missing.to_str().unwrap();
    assert_fails_with_one_line(&["pcap", "decode", missing]);
    assert_fails_with_one_line(&["pcap", "decode", missing, "--json"]);

    let garbage = dir.path().join("garbage.pcap");
    let bytes: Vec<u8> = (0u32..4096)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&garbage, bytes).unwrap();
    let garbage = garbage.to_str().unwrap();
    assert_fails_with_one_line(&["pcap", "decode", garbage]);
    assert_fails_with_one_line(&["pcap", "decode", garbage, "--json"]);

    let empty = dir.path().join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    assert_fails_with_one_line(&["pcap", "decode", empty.to_str().unwrap(), "--json"]);
}

#[test]
fn decode_refuses_udp_port_zero() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = sample(dir.path());
    for bad in ["0", "65536", "x"] {
        let o = roce(&["pcap", "decode", &file, "--udp-port", bad]);
        assert!(!o.status.success(), "--udp-port {bad} accepted");
        assert!(o.stdout.is_empty(), "stdout: {}", stdout(&o));
        let err = stderr(&o);
        assert!(
            err.contains(&format!("invalid value '{bad}' for '--udp-port <N>'")),
            "{err}"
        );
    }
    let err = stderr(&roce(&["pcap", "decode", &file, "--udp-port", "0"]));
    assert!(
        err.contains("port 0 is not a port frames travel on"),
        "{err}"
    );
    ok(roce(&["pcap", "decode", &file, "--udp-port", "4792"]));
}

#[test]
fn pcapng_is_read_like_pcap() {
    let dir = tempfile::tempdir().unwrap();
    let (file, n) = sample(dir.path());
    let frames = read_capture(&std::fs::read(&file).unwrap()).unwrap().frames;
    assert_eq!(frames.len(), n);

    // Interface 0 keeps the default microsecond resolution, interface 1
    // declares nanoseconds: both must come back as the same nanoseconds.
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 65535))
        .unwrap();
    let mut ns_if = InterfaceDescriptionBlock::new(DataLink::ETHERNET, 65535);
    ns_if.options.push(InterfaceDescriptionOption::IfTsResol(9));
    w.write_pcapng_block(ns_if).unwrap();
    for (i, f) in frames.iter().enumerate() {
        // pcap-file writes the raw tick count it is given.
        let (interface_id, ticks) = if i % 2 == 0 {
            (0, f.ts_ns / 1000)
        } else {
            (1, f.ts_ns)
        };
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id,
            timestamp: Duration::from_nanos(ticks),
            original_len: f.data.len() as u32,
            data: Cow::Borrowed(&f.data),
            options: vec![],
        })
        .unwrap();
    }
    let ng = dir.path().join("sample.pcapng");
    std::fs::write(&ng, w.into_inner()).unwrap();
    let ng = ng.to_str().unwrap();

    assert_eq!(decode_json(ng), decode_json(&file));
    let human = |f: &str| stdout(&ok(roce(&["pcap", "decode", f])));
    assert_eq!(human(ng), human(&file));
}

#[test]
fn pcapng_written_by_tshark_is_read() {
    if !prereq::tool(
        "pcapng_written_by_tshark_is_read",
        &["tshark", "--version"],
        "apt-get install tshark",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (file, n) = sample(dir.path());
    let ng = dir.path().join("tshark.pcapng");
    let ng = ng.to_str().unwrap();
    let o = Command::new("tshark")
        .args(["-r", &file, "-w", ng, "-F", "pcapng"])
        .output()
        .expect("run tshark");
    assert!(o.status.success(), "tshark: {}", stderr(&o));
    assert_eq!(&std::fs::read(ng).unwrap()[..4], &[0x0a, 0x0d, 0x0d, 0x0a]);

    let a = decode_json(ng);
    assert_eq!(a.len(), n);
    assert_eq!(a, decode_json(&file));
}

#[test]
fn a_capture_cut_short_decodes_what_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _n) = sample(dir.path());
    let bytes = std::fs::read(&file).unwrap();
    // Keep the header and three whole records, then half of the fourth.
    let mut at = 24;
    for _ in 0..3 {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + incl;
    }
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &bytes[..at + 20]).unwrap();
    let o = ok(roce(&["pcap", "decode", cut.to_str().unwrap(), "--json"]));
    assert_eq!(stdout(&o).lines().count(), 3);
    assert!(
        stderr(&o).contains("cut short after 3 frames"),
        "{}",
        stderr(&o)
    );
}

/// Every nested field is also present under its full dotted name, equal.
#[test]
fn json_fields_are_reachable_by_dotted_name_too() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = sample(dir.path());
    let mut checked = 0;
    for v in decode_json(&file) {
        let obj = v.as_object().unwrap();
        for (header, inner) in obj {
            let Some(fields) = inner.as_object() else {
                continue;
            };
            for (k, x) in fields {
                if x.is_object() {
                    continue;
                }
                assert_eq!(obj.get(&format!("{header}.{k}")), Some(x), "{header}.{k}");
                checked += 1;
            }
        }
        for name in [
            "bth.opcode",
            "bth.psn",
            "bth.dest_qp",
            "icrc.ok",
            "payload_len",
            "ip.dscp",
        ] {
            if obj.contains_key("bth") {
                assert!(obj.contains_key(name), "{name} missing");
            }
        }
    }
    assert!(checked > 500);
}

/// A capture written by two real engines that both run off 4791 (as when
/// another stack owns it): refused frame by frame as not RoCEv2, until the
/// port is named with `--udp-port` (Wireshark's Decode As), when every
/// frame of both directions decodes with a good ICRC.
#[test]
fn udp_port_decodes_a_capture_taken_off_4791() {
    use roce_verbs::{Access, Device, EngineConfig, SendWr, WrOpcode};
    use std::net::SocketAddr;

    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("off4791.pcap");
    let open = |ip: &str, pcap: Option<std::path::PathBuf>| {
        let cfg = EngineConfig {
            pcap,
            ..Default::default()
        };
        Device::open_with(format!("{ip}:0").parse::<SocketAddr>().unwrap(), cfg).unwrap()
    };
    let a = open("127.0.42.1", Some(pcap.clone()));
    let b = open("127.0.42.2", None);
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let ma = pa.reg_mr(8192, Access::ALL).unwrap();
    let mb = pb.reg_mr(8192, Access::ALL).unwrap();
    let qa = pa.qp_builder(&ca).build().unwrap();
    let qb = pb.qp_builder(&cb).build().unwrap();
    let (ea, eb) = (qa.endpoint_with(&ma), qb.endpoint_with(&mb));
    let (qa, _qb) = (qa.connect(&eb).unwrap(), qb.connect(&ea).unwrap());
    let drive_b = b.spawn_progress(false);
    let wr = SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: eb.addr,
            rkey: eb.rkey,
        },
        vec![ma.sge(0, 3000)],
    );
    qa.post_send(&wr).unwrap();
    let wc = ca.wait(1, Duration::from_secs(20)).unwrap();
    assert_eq!(wc[0].status, roce_verbs::WcStatus::Success);
    drop(drive_b);
    a.flush_pcap().unwrap();
    let (port_a, port_b) = (a.local_addr().port(), b.local_addr().port());
    assert!(port_a != 4791 && port_b != 4791);
    let file = pcap.to_str().unwrap();

    // Without the port: every frame refused, with the way out named.
    let text = stdout(&ok(roce(&["pcap", "decode", file])));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 4, "{text}"); // 3 requests at MTU 1024 and an ACK
    for l in &lines {
        assert!(l.contains("not RoCEv2") && l.contains("--udp-port"), "{l}");
    }
    // Naming A's port decodes both directions (A's port is the source of
    // its requests and the destination of B's ACKs).
    let p = port_a.to_string();
    let text = stdout(&ok(roce(&["pcap", "decode", file, "--udp-port", &p])));
    let decoded: Vec<&str> = text.lines().collect();
    assert_eq!(decoded.len(), lines.len());
    for l in &decoded {
        assert!(l.contains("RRoCE") && !l.contains("ICRC BAD"), "{l}");
    }
    assert!(
        decoded.iter().any(|l| l.contains("RDMA_WRITE_FIRST")),
        "{text}"
    );
    assert!(decoded.iter().any(|l| l.contains("ACK")), "{text}");
    // JSON too, and an unrelated port changes nothing.
    let o = ok(roce(&["pcap", "decode", file, "--json", "--udp-port", &p]));
    for l in stdout(&o).lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        assert!(!has(&v, "error") && v["icrc"]["ok"] == true, "{l}");
    }
    let other = if port_b == 9 { "10" } else { "9" };
    let text = stdout(&ok(roce(&["pcap", "decode", file, "--udp-port", other])));
    assert!(text.lines().all(|l| l.contains("not RoCEv2")), "{text}");
}
